package tui

import (
	"testing"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/tui/tuitest"
)

// benchModel is the target load: 16 roles × 4 ranks at 200×60 with a full
// 10,000-line merged log buffer.
func benchModel(b *testing.B) *Model {
	m, f := newTestModel(b, 200, 60, tuitest.Deployment(16, 4, 4, t0))
	for _, r := range m.snap.Roles {
		f.AppendLogs(tuitest.LogLines(r.Name, 10000/16+1, t0)...)
	}
	runCmd(b, m, press(m, "L"))
	if m.logs.buf.n != 10000 {
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
	m := benchModel(b)
	press(m, "esc")
	benchRender(b, m)
}

func BenchmarkFrameInspector(b *testing.B) {
	m := benchModel(b)
	press(m, "esc", "down", "enter")
	benchRender(b, m)
}

func BenchmarkFrameLogsFollow(b *testing.B) {
	benchRender(b, benchModel(b))
}

func BenchmarkFrameLogsFindFilterWrap(b *testing.B) {
	m := benchModel(b)
	press(m, "&")
	typeText(m, "scheduler|loaded")
	press(m, "enter", "/")
	typeText(m, "step 1")
	press(m, "enter", "w")
	benchRender(b, m)
}

// BenchmarkLogIngest feeds the log page the way the feed does at 100,000
// lines/s across 16 roles: ~1,700-line batches, 60 a second. ns/op is per
// line; it must stay far below 10µs for the UI to keep up.
func BenchmarkLogIngest(b *testing.B) {
	m := benchModel(b)
	press(m, "&")
	typeText(m, "WARN")
	press(m, "enter")
	var lines []snapshot.LogLine
	for _, r := range m.snap.Roles {
		lines = append(lines, tuitest.LogLines(r.Name, 105, t0)...)
	}
	gen := m.logs.gen
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(lines) {
		m.Update(logBatchMsg{gen: gen, batches: [][]snapshot.LogLine{lines}})
	}
}
