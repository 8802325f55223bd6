package tui

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/tui/tuitest"
)

// runOpts feeds keys through an io.Pipe (not an *os.File: bubbletea's
// input reader may outlive Run and must not race with a Close).
func runOpts(in io.Reader, out *bytes.Buffer) Options {
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
	r, w := io.Pipe()
	defer w.Close()
	go func() { _, _ = w.Write([]byte("qy")) }()
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
	r, w := io.Pipe()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	if err := Run(ctx, f, runOpts(r, &out)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if n := f.Subscribers(); n != 0 {
		t.Fatalf("%d snapshot subscriptions left", n)
	}
}
