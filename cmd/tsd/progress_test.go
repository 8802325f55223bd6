package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// TestPhaseChanges pins the plain form: one line per role per change of
// state or startup phase, never one per percent of progress, and nothing
// for a state already told.
func TestPhaseChanges(t *testing.T) {
	last := map[string]string{}
	weights := func(f float64) *snapshot.Progress {
		return &snapshot.Progress{Phase: "loading weights", Frac: f, Text: "x"}
	}
	steps := []struct {
		roles []snapshot.RoleStatus
		want  []string
	}{
		{[]snapshot.RoleStatus{{Name: "prefill", State: "starting"}, {Name: "decode", State: "starting"}},
			[]string{"prefill: starting", "decode: starting"}},
		{[]snapshot.RoleStatus{{Name: "prefill", State: "starting", Phase: "loading weights", Progress: weights(0.2)}, {Name: "decode", State: "starting"}},
			[]string{"prefill: starting · loading weights"}},
		{[]snapshot.RoleStatus{{Name: "prefill", State: "starting", Phase: "loading weights", Progress: weights(0.8)}, {Name: "decode", State: "starting"}},
			nil},
		{[]snapshot.RoleStatus{{Name: "prefill", State: "ready", Phase: "ready"}, {Name: "decode", State: "failed", Reason: "exit 1 at start"}},
			[]string{"prefill: ready", "decode: failed: exit 1 at start"}},
	}
	for i, s := range steps {
		if got := phaseChanges(last, s.roles); strings.Join(got, "|") != strings.Join(s.want, "|") {
			t.Errorf("step %d: %q, want %q", i, got, s.want)
		}
	}
}

// TestProgressBlock pins the terminal block: a mark, the name, state and
// phase, the engine's progress bar with its own count while it reports
// one, and how long its start has taken (frozen once ready); a failed
// role's reason at the end.
func TestProgressBlock(t *testing.T) {
	now := time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)
	roles := []snapshot.RoleStatus{
		{Name: "prefill", State: "starting", Phase: "loading weights", Progress: &snapshot.Progress{Phase: "loading weights", Frac: 0.4, Text: "2/5"}},
		{Name: "decode-0", State: "ready", Phase: "ready"},
		{Name: "decode-1", State: "failed", Reason: "exit 1"},
	}
	clock := map[string]span{"prefill": {from: now.Add(-4 * time.Second)}, "decode-0": {from: now.Add(-9 * time.Second), to: now.Add(-3 * time.Second)}}
	got := progressBlock(roles, clock, now)
	want := []string{
		"⠿ prefill   starting · loading weights  ████████░░░░░░░░░░░░ 2/5       4s",
		"✔ decode-0  ready                                                      6s",
		"✘ decode-1  failed                                                         exit 1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("block:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestProgressViewRedrawsInPlace: on a terminal each update goes back up
// over the block it drew and redraws it (so a role is on screen once);
// a step line goes above the block; off a terminal nothing is redrawn.
func TestProgressViewRedrawsInPlace(t *testing.T) {
	now := time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)
	s := snapshot.Snapshot{Roles: []snapshot.RoleStatus{{Name: "prefill", State: "starting"}, {Name: "decode", State: "starting"}}}
	var b bytes.Buffer
	v := newProgressView(&b, true, nil)
	v.update(s, now)
	if strings.Contains(b.String(), "\x1b[2A") || strings.Count(b.String(), "\n") != 2 {
		t.Fatalf("first draw %q", b.String())
	}
	b.Reset()
	s.Roles[0].State = "ready"
	v.update(s, now.Add(time.Second))
	if !strings.HasPrefix(b.String(), "\x1b[2A") || !strings.Contains(b.String(), "✔ prefill") {
		t.Fatalf("redraw %q", b.String())
	}
	b.Reset()
	v.say("restarting decode (1/1)", now)
	if !strings.HasPrefix(b.String(), "\x1b[2A\x1b[Jrestarting decode (1/1)\n") || strings.Count(b.String(), "prefill") != 1 {
		t.Fatalf("a step line %q", b.String())
	}

	var plain bytes.Buffer
	p := newProgressView(&plain, false, []string{"decode"})
	p.prime([]snapshot.RoleStatus{{Name: "decode", State: "starting"}})
	p.update(s, now)
	s.Roles[1].State = "ready"
	p.update(s, now)
	if plain.String() != "decode: ready\n" {
		t.Fatalf("plain %q", plain.String())
	}
}

// TestSpan: a role's clock runs from when it was first seen on its way to
// when it settled, and starts again when it leaves ready (a restart).
func TestSpan(t *testing.T) {
	t0 := time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)
	var s span
	if s = s.next("ready", t0); s.took(t0) != "" {
		t.Fatalf("ready all along: %q", s.took(t0))
	}
	s = s.next("starting", t0.Add(time.Second))
	s = s.next("handshaking", t0.Add(3*time.Second))
	if got := s.took(t0.Add(4 * time.Second)); got != "3s" {
		t.Fatalf("on its way: %q", got)
	}
	s = s.next("ready", t0.Add(5*time.Second))
	if got := s.took(t0.Add(time.Minute)); got != "4s" {
		t.Fatalf("settled: %q", got)
	}
	s = s.next("stopping", t0.Add(2*time.Minute))
	if got := s.took(t0.Add(2*time.Minute + 1500*time.Millisecond)); got != "1.5s" {
		t.Fatalf("restarting: %q", got)
	}
}
