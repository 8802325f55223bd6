package tui

import (
	"fmt"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/tui/tuitest"
)

var sizes = []struct{ w, h int }{{120, 40}, {80, 24}, {200, 60}}

// The overview shows gateway, every role's state word and the GPU panel at
// both sizes without colour.
func TestGoldenOverview(t *testing.T) {
	for _, sz := range sizes {
		m, _ := newTestModel(t, sz.w, sz.h, tuitest.Deployment(8, 4, 4, t0))
		press(m, "down", "down")
		s := plain(m)
		checkFrame(t, s, sz.w, sz.h)
		golden(t, fmt.Sprintf("overview_%dx%d", sz.w, sz.h), s)
	}
}

// Without a driver the GPU panel says why it is off.
func TestGoldenOverviewNoGPU(t *testing.T) {
	m, _ := newTestModel(t, 80, 24, tuitest.Deployment(4, 1, 0, t0))
	s := plain(m)
	checkFrame(t, s, 80, 24)
	golden(t, "overview_nogpu_80x24", s)
}

// The inspector shows each rank's timeline and what a rank still waits for.
func TestGoldenInspector(t *testing.T) {
	for _, sz := range sizes {
		m, _ := newTestModel(t, sz.w, sz.h, tuitest.Deployment(8, 4, 4, t0))
		press(m, "down", "enter") // decode-0: handshaking, rank 1 waiting for INIT
		s := plain(m)
		checkFrame(t, s, sz.w, sz.h)
		golden(t, fmt.Sprintf("inspector_%dx%d", sz.w, sz.h), s)
	}
}

// The logs page with a find active marks the current match and counts.
func TestGoldenLogsFind(t *testing.T) {
	for _, sz := range sizes {
		m, f := newTestModel(t, sz.w, sz.h, tuitest.Deployment(8, 4, 4, t0))
		f.AppendLogs(tuitest.LogLines("prefill-0", 120, t0)...)
		f.AppendLogs(tuitest.LogLines("decode-0", 80, t0)...)
		runCmd(t, m, press(m, "L"))
		press(m, "/")
		typeText(m, "model loaded")
		press(m, "enter")
		s := plain(m)
		checkFrame(t, s, sz.w, sz.h)
		golden(t, fmt.Sprintf("logs_find_%dx%d", sz.w, sz.h), s)
	}
}

// The help page lists every binding of the keymap.
func TestGoldenHelp(t *testing.T) {
	for _, sz := range sizes {
		m, _ := newTestModel(t, sz.w, sz.h, tuitest.Deployment(8, 4, 4, t0))
		press(m, "?")
		s := plain(m)
		checkFrame(t, s, sz.w, sz.h)
		golden(t, fmt.Sprintf("help_%dx%d", sz.w, sz.h), s)
		if sz.h < 30 {
			// The rest of the page is one scroll away.
			press(m, "j", "j", "j", "j", "j", "j", "j", "j", "j", "j")
			s = plain(m)
			checkFrame(t, s, sz.w, sz.h)
			golden(t, fmt.Sprintf("help_%dx%d_scrolled", sz.w, sz.h), s)
		}
	}
}

// A deployment of two roles keeps its table short: the GPU panel and the
// events follow it directly, with no blank rows between.
func TestGoldenOverviewSmall(t *testing.T) {
	m, _ := newTestModel(t, 120, 40, tuitest.Deployment(2, 2, 4, t0))
	s := plain(m)
	checkFrame(t, s, 120, 40)
	golden(t, "overview_small_120x40", s)
}

// A very short window squeezes the GPU panel before the roles table.
func TestGoldenOverviewTiny(t *testing.T) {
	m, _ := newTestModel(t, 80, 12, tuitest.Deployment(8, 4, 4, t0))
	s := plain(m)
	checkFrame(t, s, 80, 12)
	golden(t, "overview_tiny_80x12", s)
}

// Every page renders inside tiny and odd windows without panicking or
// spilling past the frame.
func TestTinyWindows(t *testing.T) {
	t.Parallel()
	for _, sz := range []struct{ w, h int }{{1, 1}, {10, 3}, {20, 5}, {40, 10}, {300, 100}} {
		m, f := newTestModel(t, sz.w, sz.h, tuitest.Deployment(16, 4, 4, t0))
		f.AppendLogs(tuitest.LogLines("prefill-0", 50, t0)...)
		checkFrame(t, m.render(), sz.w, sz.h)
		press(m, "enter")
		checkFrame(t, m.render(), sz.w, sz.h)
		runCmd(t, m, press(m, "l"))
		press(m, "/")
		typeText(m, "step")
		press(m, "enter", "w")
		checkFrame(t, m.render(), sz.w, sz.h)
		press(m, "&")
		checkFrame(t, m.render(), sz.w, sz.h)
		press(m, "esc", "?")
		checkFrame(t, m.render(), sz.w, sz.h)
		press(m, "esc", "esc", "esc", "r")
		checkFrame(t, m.render(), sz.w, sz.h)
		// The split view, the describe view, a filter being typed and the
		// command line with its completions.
		press(m, "n")
		if cmd := press(m, "x"); cmd != nil {
			m.Update(cmd())
		}
		checkFrame(t, m.render(), sz.w, sz.h)
		press(m, "x")
		if cmd := press(m, "d"); cmd != nil {
			m.Update(cmd())
		}
		checkFrame(t, m.render(), sz.w, sz.h)
		press(m, "esc", "/")
		typeText(m, "decode")
		checkFrame(t, m.render(), sz.w, sz.h)
		press(m, "esc", ":")
		typeText(m, "restart d")
		press(m, "tab")
		checkFrame(t, m.render(), sz.w, sz.h)
	}
}

// The trends panel after five minutes of a load that rises and falls, at
// every size: sparklines use the width they get, the gateway's rates read
// smoothed, and at 80×24 the trends give way to the table and GPUs.
func TestGoldenTrends(t *testing.T) {
	for _, sz := range []struct{ w, h int }{{200, 60}, {120, 40}, {80, 24}} {
		s := tuitest.Deployment(4, 2, 2, t0)
		m, _ := newTestModel(t, sz.w, sz.h, s)
		for i := 1; i <= 300; i++ {
			s.Time = t0.Add(time.Duration(i) * time.Second)
			load := float64((i / 10) % 10) // a saw tooth: 0..9 over 100 s
			s.Gateway.ReqPerSec = 2 * load
			s.Gateway.TokPerSec = 300 * load
			s.Gateway.InFlight = int(load)
			s.Gateway.Queued = int(load) / 3
			s.Gateway.TTFTp50 = time.Duration(20+5*load) * time.Millisecond
			s.Gateway.TTFTp99 = time.Duration(60+30*load) * time.Millisecond
			s.Gateway.ITLp50 = time.Duration(8+load) * time.Millisecond
			s.Gateway.ITLp99 = time.Duration(15+4*load) * time.Millisecond
			for g := range s.GPUs {
				s.GPUs[g].UtilPct = int(load*10) / (g + 1)
			}
			m.setSnapshot(s)
		}
		out := plain(m)
		checkFrame(t, out, sz.w, sz.h)
		golden(t, fmt.Sprintf("trends_%dx%d", sz.w, sz.h), out)
	}
}

var allSizes = []struct{ w, h int }{{80, 24}, {120, 40}, {200, 60}}

// underLoad folds ten minutes of a varying load into m, one snapshot a
// second ending at t0, and leaves s (at t0) as the current snapshot.
func underLoad(m *Model, s snapshot.Snapshot) {
	base := s.Gateway
	gpus := append([]snapshot.GPUStatus(nil), s.GPUs...)
	for i := 600; i >= 0; i-- {
		x := s
		x.Time = t0.Add(-time.Duration(i) * time.Second)
		load := 0.6 + 0.4*float64((600-i)/20%10)/9 // steps up and down
		x.Gateway = base
		x.Gateway.ReqPerSec = base.ReqPerSec * load
		x.Gateway.TokPerSec = base.TokPerSec * load
		x.Gateway.InFlight = int(float64(base.InFlight) * load)
		x.Gateway.TTFTp50 = time.Duration(30 * load * float64(time.Millisecond))
		x.Gateway.TTFTp99 = time.Duration(120 * load * load * float64(time.Millisecond))
		x.Gateway.ITLp50 = time.Duration(9 * load * float64(time.Millisecond))
		x.Gateway.ITLp99 = time.Duration(25 * load * float64(time.Millisecond))
		x.GPUs = append([]snapshot.GPUStatus(nil), gpus...)
		for g := range x.GPUs {
			x.GPUs[g].UtilPct = int(float64(gpus[g].UtilPct) * load)
		}
		if i == 0 {
			x = s
		}
		m.setSnapshot(x)
	}
}

// The overview of 16 roles × 4 ranks under load at every size: replicas
// folded under their roles (decode open), the gateway's per-role traffic,
// a role in backoff counting down, one loading its weights with a bar,
// and ten minutes of trends.
func TestGoldenOverviewLoad(t *testing.T) {
	for _, sz := range allSizes {
		s := tuitest.WithTraffic(tuitest.Grouped(tuitest.Troubled(tuitest.Deployment(16, 4, 4, t0), t0, -1, 6, 9)))
		early := s
		early.Time = t0.Add(-601 * time.Second)
		m, _ := newTestModel(t, sz.w, sz.h, early)
		underLoad(m, s)
		press(m, "down", "right") // open decode
		out := plain(m)
		checkFrame(t, out, sz.w, sz.h)
		golden(t, fmt.Sprintf("overview_load_%dx%d", sz.w, sz.h), out)
	}
}

// A role that failed for good: its reason stands out in the table and
// its events say what happened, at every size.
func TestGoldenFailedRole(t *testing.T) {
	for _, sz := range allSizes {
		s := tuitest.Troubled(tuitest.Deployment(8, 2, 4, t0), t0, 2, -1, -1)
		s.Events = append(s.Events,
			snapshot.Event{Time: t0.Add(-20 * time.Second), Role: "decode-1", Message: "starting → crashed: exit 1 after 3.2s"},
			snapshot.Event{Time: t0.Add(-20 * time.Second), Role: "decode-1", Message: "last error line: RuntimeError: CUDA error: out of memory"},
			snapshot.Event{Time: t0.Add(-20 * time.Second), Role: "decode-1", Message: "crashed → failed: exit 1 after 3.2s; restart budget spent (3 in 1m)"},
		)
		m, _ := newTestModel(t, sz.w, sz.h, s)
		press(m, "down", "down")
		out := plain(m)
		checkFrame(t, out, sz.w, sz.h)
		golden(t, fmt.Sprintf("overview_failed_%dx%d", sz.w, sz.h), out)
	}
}
