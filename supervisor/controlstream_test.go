package supervisor

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// TestControlWatchAndJSONLogs: /v1/watch gives the current Snapshot first
// and then follows a restart; the JSON log stream keeps times and notes and
// follows new lines; tail trims the backlog; the stream ends on shutdown.
func TestControlWatchAndJSONLogs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, func(o *Options) {
		o.TestRequest = func(context.Context) (string, time.Duration, error) { return "hi", 7 * time.Millisecond, nil }
	}, shRole("decode", profiles.KindDecode, readyScript))
	r := f.wait("decode", "ready", state(snapshot.StateReady))
	c := NewControlClient(f.sup.Plan().ControlSocket)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()

	first, snaps, err := c.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Roles) != 1 || first.Roles[0].State != snapshot.StateReady || first.Roles[0].PID != r.PID {
		t.Fatalf("first watched snapshot %+v", first.Roles)
	}
	backlog, lines, err := c.SubscribeLogs(ctx, "decode", LogOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(backlog) == 0 || backlog[0].Time.IsZero() || backlog[0].Role != "decode" {
		t.Fatalf("json backlog %+v", backlog)
	}
	// tail=1 is the ring's last line. The role may still be writing (its
	// ready line can land after the state turned ready), so compare with
	// the last line of whole backlogs read just before and after, once
	// they agree.
	lastSeq := func() uint64 {
		all, _, err := c.SubscribeLogs(ctx, "decode", LogOptions{})
		if err != nil || len(all) == 0 {
			t.Fatalf("backlog: %v %+v", err, all)
		}
		return all[len(all)-1].Seq
	}
	for {
		before := lastSeq()
		tail, _, err := c.SubscribeLogs(ctx, "decode", LogOptions{Tail: 1})
		if err != nil || len(tail) != 1 {
			t.Fatalf("tail=1: %v %+v", err, tail)
		}
		if after := lastSeq(); after == before {
			if tail[0].Seq != before {
				t.Fatalf("tail=1 is line %d, the ring ends at %d", tail[0].Seq, before)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the decode log never settled")
		}
	}
	// -n 0 -f: no backlog, then only what is written from now on (the
	// restart's note below).
	none, fresh, err := c.SubscribeLogs(ctx, "decode", LogOptions{NoBacklog: true, Follow: true})
	if err != nil || len(none) != 0 {
		t.Fatalf("tail=0: %v %+v", err, none)
	}
	if _, _, err := c.SubscribeLogs(ctx, "nope", LogOptions{}); err == nil || !strings.Contains(err.Error(), "unknown role") {
		t.Fatalf("logs of unknown role: %v", err)
	}

	if _, err := c.Command(ctx, "restart", url.Values{"role": {"decode"}}); err != nil {
		t.Fatal(err)
	}
	// The watch follows the restart to a new PID.
	for done := false; !done; {
		select {
		case s, ok := <-snaps:
			if !ok {
				t.Fatal("watch ended during the restart")
			}
			done = len(s.Roles) == 1 && s.Roles[0].State == snapshot.StateReady && s.Roles[0].PID != r.PID
		case <-ctx.Done():
			t.Fatal("watch never showed the restarted role ready")
		}
	}
	// The log stream carries the supervisor's note about the restart.
	for note := false; !note; {
		select {
		case b, ok := <-lines:
			if !ok {
				t.Fatal("log stream ended during the restart")
			}
			for _, l := range b {
				note = note || l.Note
			}
		case <-ctx.Done():
			t.Fatal("no note line on the followed JSON log stream")
		}
	}

	// The -n 0 follower's first batch holds nothing older than the
	// subscription.
	select {
	case b := <-fresh:
		if len(b) == 0 || b[0].Seq <= backlog[len(backlog)-1].Seq {
			t.Fatalf("the -n 0 follower got old lines: %+v", b)
		}
	case <-ctx.Done():
		t.Fatal("the -n 0 follower saw no new line")
	}

	saved, err := c.SaveLog(ctx, "decode", filepath.Join(f.dir, "saved", "d.log"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(saved); err != nil || !strings.Contains(string(b), "headless scheduler(s) ready") {
		t.Fatalf("saved log %s: %v %q", saved, err, b)
	}
	if _, err := c.Command(ctx, "bogus", nil); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("unknown command: %v", err)
	}
	reply, lat, err := c.TestRequest(ctx)
	if err != nil || reply != "hi" || lat != 7*time.Millisecond {
		t.Fatalf("test request: %q %v %v", reply, lat, err)
	}

	if err := f.shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []func() bool{
		func() bool { _, ok := <-snaps; return ok },
		func() bool { _, ok := <-lines; return ok },
	} {
		for ch() {
		}
	}
}

// TestParseLogQuery pins the query forms of /v1/logs.
func TestParseLogQuery(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)
	rows := []struct {
		q    string
		want logQuery
		err  string
	}{
		{"role=decode", logQuery{role: "decode"}, ""},
		{"role=&follow=1&format=json", logQuery{follow: true, json: true}, ""},
		{"tail=5", logQuery{hasTail: true, tail: 5}, ""},
		{"tail=0", logQuery{hasTail: true}, ""},
		{"tail=-1", logQuery{}, "tail"},
		{"tail=x", logQuery{}, "tail"},
		{"since=2026-08-22T10:00:00Z", logQuery{since: at}, ""},
		{"since=yesterday", logQuery{}, "since"},
	}
	for _, r := range rows {
		v, _ := url.ParseQuery(r.q)
		got, err := parseLogQuery(v)
		if r.err != "" {
			if err == nil || !strings.Contains(err.Error(), r.err) {
				t.Errorf("%s: err %v, want %q", r.q, err, r.err)
			}
			continue
		}
		if err != nil || got != r.want {
			t.Errorf("%s: %+v %v, want %+v", r.q, got, err, r.want)
		}
	}
	ls := []LogLine{{Seq: 1, Time: at.Add(-time.Second)}, {Seq: 2, Time: at}, {Seq: 3, Time: at.Add(time.Second)}}
	if got := (logQuery{since: at}).trimBacklog(ls); len(got) != 2 || got[0].Seq != 2 {
		t.Errorf("since: %+v", got)
	}
	if got := (logQuery{since: at, hasTail: true, tail: 1}).trimBacklog(ls); len(got) != 1 || got[0].Seq != 3 {
		t.Errorf("since+tail: %+v", got)
	}
	if got := (logQuery{hasTail: true}).trimBacklog(ls); len(got) != 0 {
		t.Errorf("tail=0 keeps %+v, want nothing", got)
	}
	if got := (logQuery{}).trimBacklog(ls); len(got) != 3 {
		t.Errorf("no tail keeps %+v, want all", got)
	}
}
