package tui

import (
	"fmt"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/snapshot/trend"
	"github.com/tsd-project/tsd/tui/tuitest"
)

// benchModel is the target load: 16 roles × 4 ranks at 200×60 with a full
// merged log buffer of bufLines lines.
func benchModel(b *testing.B, bufLines int) *Model {
	m, f := newTestModel(b, 200, 60, tuitest.Deployment(16, 4, 4, t0))
	m.logs.buf = newLogBuf(bufLines)
	f.MaxLines = bufLines
	for _, r := range m.snap.Roles {
		f.AppendLogs(tuitest.LogLines(r.Name, bufLines/16+1, t0)...)
	}
	runCmd(b, m, press(m, "L"))
	if m.logs.buf.n != bufLines {
		b.Fatalf("buffer holds %d lines", m.logs.buf.n)
	}
	return m
}

func benchRender(b *testing.B, m *Model) {
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		_ = m.View()
	}
}

func BenchmarkFrameOverview(b *testing.B) {
	m := benchModel(b, 10000)
	press(m, "esc")
	benchRender(b, m)
}

// The overview with full histories: 16 roles × 4 ranks (every one a row:
// no groups fold them away), the gateway's per-role traffic columns, and
// every trend ring at its whole capacity (snapshots 500 ms apart for more
// than the 10-minute window: a sample a second).
func BenchmarkFrameOverviewFullTrends(b *testing.B) {
	m := benchModel(b, 10000)
	press(m, "esc")
	s := tuitest.WithTraffic(m.snap)
	if len(s.Roles) != 16 || len(s.Roles[15].Ranks) != 4 {
		b.Fatalf("%d roles, %d ranks", len(s.Roles), len(s.Roles[15].Ranks))
	}
	for i := 1; i <= 2*trend.DefaultCap+4; i++ {
		s.Time = t0.Add(time.Duration(i) * 500 * time.Millisecond)
		s.Gateway.ReqPerSec = float64(i % 17)
		s.Gateway.TTFTp99 = time.Duration(i%40) * time.Millisecond
		s.Gateway.ITLp99 = time.Duration(i%13) * time.Millisecond
		for g := range s.GPUs {
			s.GPUs[g].UtilPct = (i + g) % 100
		}
		m.setSnapshot(s)
	}
	set := m.trends.set
	if n := set.Len(); n != trend.DefaultCap || set.Get(trend.GPUUtil(3)).Len() != trend.DefaultCap {
		b.Fatalf("histories hold %d samples, want %d", n, trend.DefaultCap)
	}
	benchRender(b, m)
}

func BenchmarkFrameInspector(b *testing.B) {
	m := benchModel(b, 10000)
	press(m, "esc", "down", "enter")
	benchRender(b, m)
}

func BenchmarkFrameLogsFollow(b *testing.B) {
	benchRender(b, benchModel(b, 10000))
}

// The frame cost must not grow with the buffer: only the visible window
// is rendered.
func BenchmarkFrameLogsBufferSize(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("lines=%d", n), func(b *testing.B) {
			m := benchModel(b, n)
			press(m, "/")
			typeText(m, "step 1")
			press(m, "enter", "w")
			benchRender(b, m)
		})
	}
}

func BenchmarkFrameLogsFindFilterWrap(b *testing.B) {
	m := benchModel(b, 10000)
	press(m, "&")
	typeText(m, "scheduler|loaded")
	press(m, "enter", "/")
	typeText(m, "step 1")
	press(m, "enter", "w")
	benchRender(b, m)
}

// BenchmarkLogIngest feeds the log page the way the feed does at 100,000
// lines/s across 16 roles: ~1,700-line batches, 60 a second. ns/op is per
// line; the UI keeps up while it stays well below 10µs.
func BenchmarkLogIngest(b *testing.B) {
	for _, filter := range []string{"", "WARN", "kv cache|model loaded"} {
		b.Run("filter="+filter, func(b *testing.B) {
			m := benchModel(b, 10000)
			if filter != "" {
				press(m, "&")
				typeText(m, filter)
				press(m, "enter")
			}
			var lines []snapshot.LogLine
			for _, r := range m.snap.Roles {
				lines = append(lines, tuitest.LogLines(r.Name, 105, t0)...)
			}
			gen := m.logs.feed.gen
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += len(lines) {
				m.Update(logBatchMsg{gen: gen, batches: [][]snapshot.LogLine{lines}})
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
		})
	}
}
