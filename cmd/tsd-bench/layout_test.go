package main

import "testing"

// The scaling rows' layouts: tsd's cores first, engines next, the load
// generator on the rest, split into processes of about 4 cores; a box
// too small says why instead of pinning.
func TestPlanScale(t *testing.T) {
	for _, c := range []struct {
		name             string
		pin              string
		n, tsd, load     int
		taskset          bool
		pinned           bool
		tsdC, eng, loadC string
		slices           []string
		why              string
	}{
		{name: "2-core box, auto", pin: "auto", n: 2, tsd: 2, taskset: true, why: "2 cores, fewer than 8: tsd cannot have 2 of its own"},
		{name: "2-core box, on", pin: "on", n: 2, tsd: 2, taskset: true, why: "2 cores: too few for 2 tsd cores, an engine core and 1 load core"},
		{name: "off", pin: "off", n: 16, tsd: 2, taskset: true, why: "-pin off"},
		{name: "no taskset", pin: "on", n: 16, tsd: 2, why: "taskset not found"},
		{name: "16 cores, 2 for tsd", pin: "auto", n: 16, tsd: 2, taskset: true, pinned: true, tsdC: "0-1", eng: "2-5", loadC: "6-15", slices: []string{"6-10", "11-15"}},
		{name: "16 cores, 4 for tsd", pin: "auto", n: 16, tsd: 4, taskset: true, pinned: true, tsdC: "0-3", eng: "4-7", loadC: "8-15", slices: []string{"8-11", "12-15"}},
		{name: "16 cores, 8 for tsd", pin: "auto", n: 16, tsd: 8, taskset: true, pinned: true, tsdC: "0-7", eng: "8-9", loadC: "10-15", slices: []string{"10-15"}},
		{name: "16 cores, 8 for tsd, 4 load", pin: "on", n: 16, tsd: 8, load: 4, taskset: true, pinned: true, tsdC: "0-7", eng: "8-11", loadC: "12-15", slices: []string{"12-15"}},
		{name: "32 cores, 8 for tsd", pin: "auto", n: 32, tsd: 8, taskset: true, pinned: true, tsdC: "0-7", eng: "8-15", loadC: "16-31", slices: []string{"16-19", "20-23", "24-27", "28-31"}},
		{name: "32 cores, 2 for tsd", pin: "auto", n: 32, tsd: 2, taskset: true, pinned: true, tsdC: "0-1", eng: "2-9", loadC: "10-31", slices: []string{"10-13", "14-17", "18-21", "22-25", "26-31"}},
		{name: "8 cores, 8 for tsd", pin: "on", n: 8, tsd: 8, taskset: true, why: "8 cores: too few for 8 tsd cores, an engine core and 1 load core"},
		{name: "load asked beyond the cores", pin: "on", n: 16, tsd: 8, load: 8, taskset: true, why: "16 cores: too few for 8 tsd cores, an engine core and 8 load cores"},
	} {
		l := planScale(c.pin, c.n, c.tsd, c.load, c.taskset)
		if l.pinned != c.pinned || l.tsd != c.tsdC || l.engines != c.eng || l.load != c.loadC || !equal(l.loadSlices, c.slices) {
			t.Errorf("%s: pinned %v tsd %q engines %q load %q slices %q; want %v %q %q %q %q", c.name, l.pinned, l.tsd, l.engines, l.load, l.loadSlices,
				c.pinned, c.tsdC, c.eng, c.loadC, c.slices)
		}
		if !c.pinned && l.why != c.why {
			t.Errorf("%s: why %q, want %q", c.name, l.why, c.why)
		}
		if c.pinned && l.tsdN+l.enginesN+l.loadN > c.n {
			t.Errorf("%s: %d+%d+%d cores on a %d-core machine", c.name, l.tsdN, l.enginesN, l.loadN, c.n)
		}
	}
}

// The serving rows' layout stays as it was: tsd on 0-1, engines on up to
// 8 after, load on the last 4.
func TestPlanCoresServing(t *testing.T) {
	l := planCores("auto", 16, 2, true)
	if !l.pinned || l.tsd != "0-1" || l.engines != "2-9" || l.load != "12-15" {
		t.Errorf("16 cores: %+v", l)
	}
	l = planCores("auto", 32, 2, true)
	if !l.pinned || l.tsd != "0-1" || l.engines != "2-9" || l.load != "28-31" {
		t.Errorf("32 cores: %+v", l)
	}
	if l := planCores("auto", 2, 2, true); l.pinned {
		t.Errorf("2 cores pinned: %+v", l)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
