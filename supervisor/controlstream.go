package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// The streaming half of the control socket: /v1/watch, /v1/logs and the
// test request, server and client side. Streams are newline-delimited JSON
// so a client in any language reads them with a line reader.

// serveWatch writes the current Snapshot, then every later one, one JSON
// object per line, until the client leaves, Run ends or quit closes.
func (c *controlServer) serveWatch(w http.ResponseWriter, r *http.Request) {
	cur, ch, cancel := c.view.Subscribe()
	defer cancel()
	if r.URL.Query().Get("history") == "1" {
		// The trend rings ride on the first snapshot only: an attaching
		// dashboard shows the past at once, then folds the stream itself.
		cur.History = c.view.History()
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	fl, _ := w.(http.Flusher)
	enc := json.NewEncoder(w) // Encode ends each value with a newline
	send := func(snap snapshot.Snapshot) bool {
		if err := enc.Encode(snap); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	if !send(cur) {
		return
	}
	for {
		select {
		case snap, ok := <-ch:
			if !ok || !send(snap) {
				return
			}
		case <-r.Context().Done():
			return
		case <-c.quit:
			// The last snapshot of the shutdown, so watchers see it end.
			send(c.view.Snapshot())
			return
		}
	}
}

// logQuery is what /v1/logs reads from its query.
type logQuery struct {
	role   string
	follow bool
	json   bool
	// hasTail: keep only the backlog's last tail lines (tail=0: none, so a
	// follower sees only lines written from now on: `tsd logs -n 0 -f`).
	hasTail bool
	tail    int
	since   time.Time // keep only backlog lines at or after since (zero: all)
}

func parseLogQuery(q url.Values) (logQuery, error) {
	lq := logQuery{role: q.Get("role"), follow: q.Get("follow") == "1", json: q.Get("format") == "json"}
	if t := q.Get("tail"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 {
			return lq, fmt.Errorf("logs: tail=%q is not a count of lines", t)
		}
		lq.hasTail, lq.tail = true, n
	}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return lq, fmt.Errorf("logs: since=%q is not an RFC 3339 time", v)
		}
		lq.since = t
	}
	return lq, nil
}

// trimBacklog applies tail and since to a backlog, oldest first.
func (lq logQuery) trimBacklog(ls []LogLine) []LogLine {
	if !lq.since.IsZero() {
		i := 0
		for i < len(ls) && ls[i].Time.Before(lq.since) {
			i++
		}
		ls = ls[i:]
	}
	if lq.hasTail && len(ls) > lq.tail {
		ls = ls[len(ls)-lq.tail:]
	}
	return ls
}

func (c *controlServer) serveLogs(w http.ResponseWriter, r *http.Request) {
	lq, err := parseLogQuery(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	backlog, batches, cancel, err := c.view.SubscribeLogs(lq.role)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer cancel()
	bw := bufio.NewWriterSize(w, 64<<10)
	var write func([]LogLine) error
	if lq.json {
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(bw)
		write = func(ls []LogLine) error {
			if ls == nil {
				ls = []LogLine{}
			}
			if err := enc.Encode(ls); err != nil {
				return err
			}
			return bw.Flush()
		}
	} else {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		write = func(ls []LogLine) error {
			prefix := lq.role == "" || strings.Contains(lq.role, ",")
			for _, l := range ls {
				if prefix {
					bw.WriteString(l.Role)
					bw.WriteString(" | ")
				}
				bw.WriteString(l.Text)
				bw.WriteByte('\n')
			}
			return bw.Flush()
		}
	}
	fl, _ := w.(http.Flusher)
	if write(lq.trimBacklog(backlog)) != nil || !lq.follow {
		return
	}
	if fl != nil {
		fl.Flush()
	}
	for {
		select {
		case b, ok := <-batches:
			if !ok || write(b) != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		case <-r.Context().Done():
			return
		case <-c.quit:
			return
		case <-c.stop.shuttingDown():
			return
		}
	}
}

// testReply is the JSON answer of /v1/test-request.
type testReply struct {
	Reply     string `json:"reply"`
	LatencyMS int64  `json:"latency_ms"`
	Error     string `json:"error,omitempty"`
}

func (c *controlServer) serveTestRequest(w http.ResponseWriter, r *http.Request) {
	if c.test == nil {
		http.Error(w, "this tsd has no test request (no gateway)", http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	reply, lat, err := c.test(ctx)
	out := testReply{Reply: reply, LatencyMS: lat.Milliseconds()}
	if err != nil {
		out.Error = err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// Watch streams Snapshots: the current one first, then every later one,
// until ctx ends or the daemon stops (the channel is then closed). The
// first Snapshot is returned directly so a caller knows the daemon answered.
func (c *ControlClient) Watch(ctx context.Context) (snapshot.Snapshot, <-chan snapshot.Snapshot, error) {
	return c.watch(ctx, "/v1/watch")
}

// WatchHistory is Watch with the daemon's trend rings in the first
// Snapshot's History (what `tsd attach` shows at once).
func (c *ControlClient) WatchHistory(ctx context.Context) (snapshot.Snapshot, <-chan snapshot.Snapshot, error) {
	return c.watch(ctx, "/v1/watch?history=1")
}

func (c *ControlClient) watch(ctx context.Context, path string) (snapshot.Snapshot, <-chan snapshot.Snapshot, error) {
	resp, err := c.do(ctx, http.MethodGet, path)
	if err != nil {
		return snapshot.Snapshot{}, nil, err
	}
	dec := json.NewDecoder(resp.Body)
	var first snapshot.Snapshot
	if err := dec.Decode(&first); err != nil {
		resp.Body.Close()
		return first, nil, fmt.Errorf("read status stream: %w", err)
	}
	ch := make(chan snapshot.Snapshot, 1)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		for {
			var snap snapshot.Snapshot
			if err := dec.Decode(&snap); err != nil {
				return
			}
			// Latest wins: a slow reader skips stale snapshots, as with the
			// in-process Subscribe.
			select {
			case ch <- snap:
			default:
				select {
				case <-ch:
				default:
				}
				select {
				case ch <- snap:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return first, ch, nil
}

// LogOptions narrow a log request.
type LogOptions struct {
	Follow bool
	Tail   int       // last N lines of the backlog (0: all)
	Since  time.Time // backlog lines at or after (zero: all)
	// NoBacklog asks for no backlog at all: with Follow, only lines
	// written after the subscription (`tsd logs -n 0 -f`).
	NoBacklog bool
}

func (o LogOptions) query(role string, json bool) string {
	q := url.Values{"role": {role}}
	if o.Follow {
		q.Set("follow", "1")
	}
	if json {
		q.Set("format", "json")
	}
	switch {
	case o.NoBacklog:
		q.Set("tail", "0")
	case o.Tail > 0:
		q.Set("tail", strconv.Itoa(o.Tail))
	}
	if !o.Since.IsZero() {
		q.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
	}
	return "/v1/logs?" + q.Encode()
}

// SubscribeLogs returns a role's backlog ("" = every role, merged) and then,
// with o.Follow, new lines in batches until ctx ends or the daemon stops
// (the channel is then closed). Lines keep their times, levels and notes.
func (c *ControlClient) SubscribeLogs(ctx context.Context, role string, o LogOptions) ([]LogLine, <-chan []LogLine, error) {
	resp, err := c.do(ctx, http.MethodGet, o.query(role, true))
	if err != nil {
		return nil, nil, err
	}
	dec := json.NewDecoder(resp.Body)
	var backlog []LogLine
	if err := dec.Decode(&backlog); err != nil {
		resp.Body.Close()
		return nil, nil, fmt.Errorf("read log stream: %w", err)
	}
	ch := make(chan []LogLine, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		for {
			var b []LogLine
			if err := dec.Decode(&b); err != nil {
				return
			}
			select {
			case ch <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	return backlog, ch, nil
}

// Command sends one POST verb with its query (e.g. "restart",
// {"role": {"decode"}}) and returns the daemon's answer.
func (c *ControlClient) Command(ctx context.Context, verb string, q url.Values) (string, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/"+verb+"?"+q.Encode())
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("read %s answer: %w", verb, err)
	}
	return string(trimNL(b)), nil
}

// SaveLog asks the daemon to write a role's whole retained log to path
// (a path on the daemon's host) and returns where it went.
func (c *ControlClient) SaveLog(ctx context.Context, role, path string) (string, error) {
	return c.Command(ctx, "save-log", url.Values{"role": {role}, "path": {path}})
}

// TestRequest asks the daemon to send one short request through its gateway.
func (c *ControlClient) TestRequest(ctx context.Context) (string, time.Duration, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/test-request")
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	var out testReply
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil {
		return "", 0, fmt.Errorf("decode test reply: %w", err)
	}
	lat := time.Duration(out.LatencyMS) * time.Millisecond
	if out.Error != "" {
		return out.Reply, lat, errors.New(out.Error)
	}
	return out.Reply, lat, nil
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
