package headless

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
)

// source is a deployment of two roles whose rings, batches and run the
// test drives.
type source struct {
	mu      sync.Mutex
	rings   map[string][]supervisor.LogLine
	batches chan []supervisor.LogLine
	snaps   chan snapshot.Snapshot
}

func newSource(backlog ...supervisor.LogLine) *source {
	s := &source{rings: map[string][]supervisor.LogLine{}, batches: make(chan []supervisor.LogLine), snaps: make(chan snapshot.Snapshot)}
	s.add(backlog...)
	return s
}

func (s *source) add(ls ...supervisor.LogLine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range ls {
		s.rings[l.Role] = append(s.rings[l.Role], l)
	}
}

func (s *source) Roles() []string { return []string{"prefill", "decode-1"} }

func (s *source) SubscribeLogs(string) ([]supervisor.LogLine, <-chan []supervisor.LogLine, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []supervisor.LogLine
	for _, r := range s.Roles() {
		all = append(all, s.rings[r]...)
	}
	return all, s.batches, func() {}, nil
}

func (s *source) Subscribe() (snapshot.Snapshot, <-chan snapshot.Snapshot, func()) {
	return snapshot.Snapshot{}, s.snaps, func() {}
}

func (s *source) Logs(role string) ([]supervisor.LogLine, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]supervisor.LogLine(nil), s.rings[role]...), nil
}

func line(role string, seq uint64, text string, note bool) supervisor.LogLine {
	return supervisor.LogLine{Role: role, Seq: seq, Text: text, Note: note, Time: time.Unix(int64(seq), 0)}
}

// run follows src, delivers each batch and event in turn (a batch is
// printed before the next is taken: the channel is unbuffered), ends the
// run after adding late to the rings, and returns what was printed.
func run(t *testing.T, opts Options, src *source, batches [][]supervisor.LogLine, events []snapshot.Event, late ...supervisor.LogLine) string {
	t.Helper()
	var out bytes.Buffer
	p := New(&out, opts)
	for _, e := range events {
		p.Event(e)
	}
	done := p.Follow(src)
	for _, b := range batches {
		src.add(b...)
		src.batches <- b
	}
	src.add(late...)
	close(src.snaps)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("printer did not finish after the run ended")
	}
	return out.String()
}

// Every line is prefixed with its role, padded to the longest name;
// engine escapes are stripped off a terminal; deployment-wide events are
// printed as "tsd | == …" and a role's events are not (its notes say
// it); lines no batch carried are printed once at the end.
func TestPlainOutput(t *testing.T) {
	t.Parallel()
	src := newSource(line("prefill", 1, "\x1b[32mloading\x1b[0m weights", false))
	got := run(t, Options{}, src,
		[][]supervisor.LogLine{{line("decode-1", 1, "ready", false), line("prefill", 2, "[tsd] prefill is ready", true)}},
		[]snapshot.Event{{Message: "deployment ready"}, {Role: "prefill", Message: "prefill: starting → ready"}},
		line("prefill", 3, "late line", false))
	want := []string{
		"prefill  | loading weights",
		"decode-1 | ready",
		"prefill  | [tsd] prefill is ready",
		"prefill  | late line",
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	var logs []string
	sawEvent := false
	for _, l := range lines {
		if l == "tsd      | == deployment ready" {
			sawEvent = true
			continue
		}
		logs = append(logs, l)
	}
	if !sawEvent || strings.Join(logs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("printed:\n%s\nwant the event and:\n%s", got, strings.Join(want, "\n"))
	}
	if strings.Contains(got, "starting → ready") {
		t.Errorf("a role's event printed:\n%s", got)
	}
}

// On a terminal each role's prefix has its colour, tsd's lines are bold
// and the engine's own colours are kept.
func TestColourOutput(t *testing.T) {
	t.Parallel()
	src := newSource(line("prefill", 1, "\x1b[32mgreen\x1b[0m", false), line("decode-1", 1, "[tsd] note", true))
	got := run(t, Options{Colour: true}, src, nil, []snapshot.Event{{Message: "up"}})
	for _, want := range []string{
		"\x1b[36mprefill  | \x1b[0m\x1b[32mgreen\x1b[0m\n",
		"\x1b[33mdecode-1 | \x1b[0m\x1b[1m[tsd] note\x1b[0m\n",
		"tsd      | \x1b[1m== up\x1b[0m\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%q", want, got)
		}
	}
}

// A daemon's output keeps tsd's notes and the events, not the engines'
// lines, and never prints a line twice.
func TestNotesOnly(t *testing.T) {
	t.Parallel()
	src := newSource(line("prefill", 1, "engine chatter", false), line("prefill", 2, "[tsd] started", true))
	got := run(t, Options{NotesOnly: true}, src,
		[][]supervisor.LogLine{{line("decode-1", 1, "more chatter", false), line("decode-1", 2, "[tsd] ready", true)}},
		[]snapshot.Event{{Message: "deployment ready"}})
	if strings.Contains(got, "chatter") {
		t.Errorf("engine lines in a notes-only output:\n%s", got)
	}
	for _, want := range []string{"prefill  | [tsd] started\n", "decode-1 | [tsd] ready\n", "tsd      | == deployment ready\n"} {
		if strings.Count(got, want) != 1 {
			t.Errorf("%q printed %d times:\n%s", want, strings.Count(got, want), got)
		}
	}
}
