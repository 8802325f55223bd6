package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/traffic"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// A shutdown drains: a stream that ends within the drain finishes whole;
// one still running at the drain's deadline is cut with the finish
// reason abort and then an error event with code shutdown, its access
// line says 503 reason=shutdown (not the client's 499), and Drain counts
// one finished and one cut.
func TestDrainCutsWithFinishAndShutdownCode(t *testing.T) {
	t.Parallel()
	logs := &syncBuf{b: &bytes.Buffer{}}
	paced := []string{"--fake-tokens-per-s", "20"}
	c := newCluster(t, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))},
		role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode, extra: paced})
	c.waitRegistered("prefill", "decode")
	hc := &http.Client{}
	start := func(seed int64, n int) <-chan genResult {
		first := make(chan struct{})
		res := make(chan genResult, 1)
		go func() { res <- c.generateNotify(context.Background(), hc, genBody(seed, n, true), first) }()
		select {
		case <-first:
		case <-time.After(20 * time.Second):
			t.Fatal("the stream never started")
		}
		return res
	}
	long, short := start(1, 900), start(2, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	got := c.g.Drain(ctx)
	if want := (snapshot.DrainResult{InFlight: 2, Finished: 1, Cut: 1}); got != want {
		t.Fatalf("Drain = %+v, want %+v", got, want)
	}
	if again := c.g.Drain(context.Background()); again != got {
		t.Fatalf("a second Drain = %+v, want the first's %+v", again, got)
	}
	if s := <-short; s.err != "" || s.finish != "length" || len(s.ids) != 20 {
		t.Fatalf("the short stream: %+v", s)
	}
	l := <-long
	if l.finish != "abort" || !strings.Contains(l.err, "drain of 3s ended") || len(l.ids) == 0 || len(l.ids) >= 900 {
		t.Fatalf("the cut stream: finish %q err %q after %d tokens", l.finish, l.err, len(l.ids))
	}
	waitCond(t, "both access lines", func() bool { return len(accessLines(logs)) == 2 })
	var cut string
	for _, a := range accessLines(logs) {
		if strings.Contains(a, "status=503") {
			cut = a
		}
	}
	if !strings.Contains(cut, "reason=shutdown") || !strings.Contains(cut, "error=shutdown") || strings.Contains(cut, "499") {
		t.Fatalf("the cut stream's access line: %q\nall:\n%s", cut, strings.Join(accessLines(logs), "\n"))
	}
	if traffic.ReasonShutdown != front.CodeShutdown {
		t.Fatalf("the access line's reason %q and the error code %q differ", traffic.ReasonShutdown, front.CodeShutdown)
	}
}

// A /generate client that goes away is logged 499, streaming or not,
// before or after its first token: never the 502 worker_stream_failed
// its generation's end would have been answered with.
func TestGenerateClientGoneIs499(t *testing.T) {
	t.Parallel()
	logs := &syncBuf{b: &bytes.Buffer{}}
	paced := []string{"--fake-tokens-per-s", "20"}
	c := newCluster(t, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))},
		role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode, extra: paced})
	c.waitRegistered("prefill", "decode")
	hc := &http.Client{}
	for i, stream := range []bool{false, true, false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.generate(ctx, hc, genBody(int64(i), 900, stream)); close(done) }()
		// Half of them leave before the first token could come.
		waitCond(t, "the request in flight", func() bool { n, _ := c.g.InFlight("decode"); return n == 1 })
		if i >= 2 {
			time.Sleep(300 * time.Millisecond) // tokens are flowing: leave mid-generation
		}
		cancel()
		<-done
		waitCond(t, "its access line", func() bool { return len(accessLines(logs)) == i+1 })
	}
	for _, a := range accessLines(logs) {
		if !strings.Contains(a, "status=499") || strings.Contains(a, "worker_stream_failed") {
			t.Errorf("a client that left: %s", a)
		}
	}
	if st := c.g.Status(); st.Errors != 0 {
		t.Fatalf("clients that left counted as %d errors of the deployment", st.Errors)
	}
}
