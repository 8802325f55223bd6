package tui

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/tui/tuitest"
)

func runOpts(in *os.File, out *bytes.Buffer) Options {
	return Options{
		Input:          in,
		Output:         out,
		Now:            func() time.Time { return t0 },
		ProgramOptions: []tea.ProgramOption{tea.WithWindowSize(100, 30), tea.WithoutSignalHandler()},
	}
}

// Run returns nil when the user quits (q, then y while roles run) and
// leaves no subscription behind.
func TestRunQuit(t *testing.T) {
	f := tuitest.NewFake(deployment())
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := w.Write([]byte("qy")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Run(context.Background(), f, runOpts(r, &out)); err != nil {
		t.Fatalf("Run: %v", err)
	}
	f.Publish(deployment()) // must not block: nobody listens any more
	if n := f.Subscribers(); n != 0 {
		t.Fatalf("%d snapshot subscriptions left", n)
	}
	if n := f.LogSubscribers(); n != 0 {
		t.Fatalf("%d log subscriptions left", n)
	}
}

// Run ends with the context.
func TestRunContextCancel(t *testing.T) {
	f := tuitest.NewFake(deployment())
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	if err := Run(ctx, f, runOpts(r, &out)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}
