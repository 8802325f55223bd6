package main

import (
	"fmt"
	"strconv"
)

// layout is which cores each side gets.
type layout struct {
	pinned                     bool
	why                        string
	tsd, engines, load         string // taskset -c lists; empty when not pinned
	tsdN, enginesN, loadN, all int
}

func planCores(pin string, n, tsdN int, haveTaskset bool) layout {
	l := layout{all: n}
	switch {
	case pin == "off":
		l.why = "-pin off"
	case !haveTaskset:
		l.why = "taskset not found"
	case n < 8 && pin == "auto":
		l.why = fmt.Sprintf("%d cores, fewer than 8; tsd, engines and load generator share them", n)
	case n < tsdN+2:
		l.why = fmt.Sprintf("%d cores: too few for %d tsd cores, an engine core and a load core", n, tsdN)
	default:
		l.pinned = true
		l.tsdN = tsdN
		l.loadN = max(1, min(4, n/4, n-tsdN-1))
		l.enginesN = min(8, n-l.tsdN-l.loadN)
		l.tsd = span(0, l.tsdN)
		l.engines = span(l.tsdN, l.enginesN)
		l.load = span(n-l.loadN, l.loadN)
		l.why = fmt.Sprintf("pinned with taskset: tsd and the bare server on cores %s, ts-fake engines on %s, load generator on %s", l.tsd, l.engines, l.load)
	}
	return l
}

// span is the taskset list of k cores from first.
func span(first, k int) string {
	if k == 1 {
		return strconv.Itoa(first)
	}
	return fmt.Sprintf("%d-%d", first, first+k-1)
}

// describe says how the run is laid out on the cores.
func (l layout) describe() string {
	if l.pinned {
		return l.why
	}
	return "not pinned: " + l.why
}

// wrap prefixes argv with taskset when pinned.
func (l layout) wrap(cores string, argv ...string) []string {
	if !l.pinned || cores == "" {
		return argv
	}
	return append([]string{"taskset", "-c", cores}, argv...)
}
