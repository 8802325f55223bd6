package main

import (
	"fmt"
	"strconv"
	"strings"
)

// layout is which cores each side gets.
type layout struct {
	pinned                     bool
	why                        string
	tsd, engines, load         string // taskset -c lists; empty when not pinned
	tsdN, enginesN, loadN, all int
	// loadSlices split the load cores over several load generator
	// processes (planScale); empty: one process on all of them.
	loadSlices []string
	loadSliceN []int
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

// engineCommand is a driver profile's engine.command list (inside its
// brackets): ts-fake serve, behind taskset on the engines' cores when
// pinned, each word quoted.
func (l layout) engineCommand(fake string) string {
	cmd := []string{fake, "serve"}
	if l.pinned {
		cmd = l.wrap(l.engines, cmd...)
	}
	q := make([]string, len(cmd))
	for i, c := range cmd {
		q[i] = strconv.Quote(c)
	}
	return strings.Join(q, ", ")
}

// wrap prefixes argv with taskset when pinned.
func (l layout) wrap(cores string, argv ...string) []string {
	if !l.pinned || cores == "" {
		return argv
	}
	return append([]string{"taskset", "-c", cores}, argv...)
}

// planScale lays out one run of the scaling rows: tsd on tsdN cores, the
// ts-fake engines after them, the load generator on the last cores.
// loadN 0 gives the load generator every core the engines leave (they
// take a third of the rest, 1 to 8); a load of more than 4 cores is split
// over several `tsd bench` processes of about 4 cores each, so no one
// process's scheduling is the limit. Not pinned (why says so) when pin
// is off, taskset is missing, auto on fewer than 8 cores, or too few
// cores for tsdN plus an engine core and a load core.
func planScale(pin string, n, tsdN, loadN int, haveTaskset bool) layout {
	l := layout{all: n}
	rest := n - tsdN
	switch {
	case pin == "off":
		l.why = "-pin off"
		return l
	case !haveTaskset:
		l.why = "taskset not found"
		return l
	case n < 8 && pin == "auto":
		l.why = fmt.Sprintf("%d cores, fewer than 8: tsd cannot have %d of its own", n, tsdN)
		return l
	case rest < 2 || loadN > rest-1:
		l.why = fmt.Sprintf("%d cores: too few for %d tsd cores, an engine core and %s", n, tsdN, plural(max(1, loadN), "load core"))
		return l
	}
	if loadN > 0 {
		l.loadN = loadN
		l.enginesN = min(8, rest-loadN)
	} else {
		l.enginesN = min(8, max(1, rest/3))
		l.loadN = rest - l.enginesN
	}
	l.pinned = true
	l.tsdN = tsdN
	l.tsd = span(0, tsdN)
	l.engines = span(tsdN, l.enginesN)
	first := n - l.loadN
	l.load = span(first, l.loadN)
	procs := max(1, l.loadN/4)
	for i := range procs {
		k := l.loadN / procs
		if i == procs-1 {
			k = l.loadN - k*(procs-1)
		}
		l.loadSlices = append(l.loadSlices, span(first, k))
		l.loadSliceN = append(l.loadSliceN, k)
		first += k
	}
	l.why = fmt.Sprintf("pinned with taskset: tsd on cores %s, ts-fake engines on %s, load generator on %s (%s)", l.tsd, l.engines, l.load, plural(procs, "process"))
	return l
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	if what == "process" {
		return fmt.Sprintf("%d processes", n)
	}
	return fmt.Sprintf("%d %ss", n, what)
}
