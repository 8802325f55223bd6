package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The control socket speaks HTTP over a unix socket (mode 0600). It is the
// only way in to a running daemon: `tsd status|restart|stop|logs` and every
// attached dashboard use it (docs/architecture.md: the dashboard is a client).
//
//	GET  /v1/status                     the Snapshot as JSON
//	GET  /v1/watch[?history=1]          newline-delimited Snapshots, the current one first
//	                                    (history: it carries the trend rings, snapshot.History)
//	POST /v1/restart?role=R[&now=1]     Restart(R) (now: no drain); role "" = RestartAll
//	POST /v1/restart?rolling=1&role=R[&now=1]  RollingRestart(R): one line per
//	                                    step as it happens, then "ok" or "error: ..."
//	POST /v1/start?role=R               Start(R); answers "starting R", or why it did nothing
//	                                    ("R is already running (ready)"), as startAnswer says
//	POST /v1/stop?role=R[&now=1]        Stop(R) (now: no drain); answers "stopping R" or
//	                                    "R is already stopped" (stopAnswer)
//	POST /v1/stop[?now=1|timeout=D][&follow=1]  stop the whole deployment: the gateway drains for
//	                                    the plan's drain_timeout (or D; now: none), then every role
//	                                    stops; follow: "stopping NAME", "drained {…}" (StopLine),
//	                                    "stopped" as it goes, else "ok" at once (stop.go)
//	GET  /v1/logs?role=R[&follow=1]     the ring as text, then (follow) new lines; R may be a
//	                                    comma-separated list of instances (merged by time)
//	     [&format=json]                 instead: one JSON array of LogLines per line,
//	                                    the backlog first (possibly [])
//	     [&tail=N][&since=RFC3339]      only the backlog's last N lines / lines since
//	POST /v1/save-log?role=R&path=P     SaveLog(R, P) in the daemon; answers the path
//	POST /v1/signal?role=R&sig=S        Signal(R, S): S (TERM, USR1, …) to R's process group
//	                                    (controlsignal.go); answers what was sent
//	GET  /v1/describe?role=R            Describe(R): the role as planned (snapshot.RoleSpec, secrets masked)
//	POST /v1/test-request               one request through the gateway (JSON reply)
//	POST /v1/planner?do=pause|resume    PlannerPause / PlannerResume (tsd planner pause|resume);
//	                                    answers what the planner does now
//
// Errors are plain text with a 4xx/5xx status. Commands are rows of
// controlCommands: a new one (say rolling=1 on restart) is a query
// parameter read by its row, not a new endpoint shape.
//
// The server is its own type (controlServer); it sees the daemon only
// through the interfaces below, each what one part of the socket needs
// (the Supervisor implements the first two, its applier and its stopper
// the others).

// daemonView is what the socket shows of the deployment: its state, the
// plan that runs, one role as planned, the logs.
type daemonView interface {
	Snapshot() snapshot.Snapshot
	Subscribe() (snapshot.Snapshot, <-chan snapshot.Snapshot, func())
	History() *snapshot.History
	Plan() *profiles.Plan
	Describe(role string) (snapshot.RoleSpec, error)
	SubscribeLogs(role string) ([]LogLine, <-chan []LogLine, func(), error)
}

// roleVerbs are the socket's POST verbs: commands to roles (by name) and
// to the planner, and a rolling restart.
type roleVerbs interface {
	Snapshot() snapshot.Snapshot // the state a start or stop answers from
	RestartNow(role string, now bool) error
	RestartAll() error
	Start(role string) error
	StopNow(role string, now bool) error
	Shutdown()
	Signal(role, sig string) (string, error)
	SaveLog(role, path string) (string, error)
	PlannerPause() (string, error)
	PlannerResume() (string, error)
	RollingTargets(target string) ([]string, error)
	RollingRestart(ctx context.Context, target string, now bool, progress func(string)) error
}

// applyStarter plans an apply and starts it (POST /v1/apply).
type applyStarter interface {
	// begin plans req and, unless it is a dry run or changes nothing,
	// starts it: the job, or the refusal.
	begin(req ApplyRequest) (*applyJob, error)
}

// stopControl is the whole deployment's stop (POST /v1/stop).
type stopControl interface {
	shutdown()
	shutdownDrain(d time.Duration)
	shuttingDown() <-chan struct{}      // a stop was asked for: streams end
	stopped() <-chan struct{}           // every role has stopped
	progress() *snapshot.StopStatus     // where the stop is; nil before it
	limit(*profiles.Plan) time.Duration // the drain this stop gets
}

// controlDeps are what a control server is built over.
type controlDeps struct {
	path  string // the socket's path; "" or "-": no socket
	view  daemonView
	verbs roleVerbs
	apply applyStarter
	stop  stopControl
	// test, if set, serves /v1/test-request (the dashboard's key t).
	test func(ctx context.Context) (reply string, latency time.Duration, err error)
}

// controlCommand is one POST verb: it reads what it needs from the query.
type controlCommand func(s roleVerbs, q url.Values) (string, error)

// controlCommands are the POST verbs of the control socket.
var controlCommands = map[string]controlCommand{
	"restart": func(s roleVerbs, q url.Values) (string, error) {
		if r := q.Get("role"); r != "" {
			return "ok", s.RestartNow(r, q.Get("now") == "1")
		}
		return "ok", s.RestartAll()
	},
	"start": func(s roleVerbs, q url.Values) (string, error) {
		r := q.Get("role")
		if r == "" {
			return "", errors.New("start needs a role")
		}
		st, _ := roleIn(s.Snapshot(), r)
		send, answer := startAnswer(r, st.State)
		if !send {
			return answer, nil
		}
		return answer, s.Start(r)
	},
	"stop": func(s roleVerbs, q url.Values) (string, error) {
		r := q.Get("role")
		if r == "" { // the whole deployment: POST /v1/stop reaches serveStop
			s.Shutdown()
			return "ok", nil
		}
		st, _ := roleIn(s.Snapshot(), r)
		send, answer := stopAnswer(r, st.State)
		if !send {
			return answer, nil
		}
		return answer, s.StopNow(r, q.Get("now") == "1")
	},
	"planner": func(s roleVerbs, q url.Values) (string, error) {
		switch q.Get("do") {
		case "pause":
			return s.PlannerPause()
		case "resume":
			return s.PlannerResume()
		}
		return "", fmt.Errorf("planner needs do=pause or do=resume, got %q", q.Get("do"))
	},
	"signal": func(s roleVerbs, q url.Values) (string, error) {
		return s.Signal(q.Get("role"), q.Get("sig"))
	},
	"save-log": func(s roleVerbs, q url.Values) (string, error) {
		path := q.Get("path")
		if path == "" {
			return "", errors.New("save-log needs a path")
		}
		return s.SaveLog(q.Get("role"), path)
	},
}

// startAnswer decides a start of role in state: whether to send it to the
// role's actor, and the answer. A running role is left alone and said to
// be running (a start used to print "starting" and do nothing); a role
// that is stopping starts again once stopped, as its lifecycle does.
func startAnswer(role, state string) (send bool, answer string) {
	switch state {
	case snapshot.StateStarting, snapshot.StateHandshaking, snapshot.StateReady, snapshot.StateStalled:
		return false, fmt.Sprintf("%s is already running (%s)", role, state)
	case snapshot.StateRemote:
		return false, fmt.Sprintf("%s is remote: tsd does not start its process", role)
	case snapshot.StateDraining, snapshot.StateStopping:
		return true, fmt.Sprintf("%s is %s; it starts again once stopped", role, state)
	}
	return true, "starting " + role // stopped, failed, backoff, crashed, planned, or unknown (the actor says)
}

// stopAnswer is startAnswer's mirror: a stopped or failed role is left
// alone and said to be stopped; any other (a backoff, a restart under
// way) is sent the stop.
func stopAnswer(role, state string) (send bool, answer string) {
	switch state {
	case snapshot.StateStopped:
		return false, role + " is already stopped"
	case snapshot.StateFailed:
		return false, role + " is already stopped (failed)"
	case snapshot.StateRemote:
		return false, fmt.Sprintf("%s is remote: tsd does not stop its process", role)
	}
	return true, "stopping " + role
}

// controlServer serves the control socket over its deps.
type controlServer struct {
	controlDeps
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	// quit ends the streams (watch, logs) before the server shuts down, so
	// the shutdown does not wait on them.
	quit     chan struct{}
	quitOnce sync.Once
}

// control is what the control socket serves this supervisor through.
func (s *Supervisor) control() controlDeps {
	path := s.opts.ControlSocket
	if path == "" {
		path = s.Plan().ControlSocket
	}
	return controlDeps{path: path, view: s, verbs: s, apply: s.apply, stop: s.stop, test: s.opts.TestRequest}
}

// listenControl binds the socket and serves it; no path: a server that
// serves nothing.
func listenControl(deps controlDeps) (*controlServer, error) {
	path := deps.path
	if path == "" || path == "-" {
		return &controlServer{}, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create run dir for control socket: %w", err)
	}
	if _, err := os.Lstat(path); err == nil {
		// A live tsd answers; a dead one left a stale file we may remove.
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("another tsd is running on %s", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale control socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod control socket: %w", err)
	}
	cs := &controlServer{controlDeps: deps, ln: ln, done: make(chan struct{}), quit: make(chan struct{})}
	cs.srv = &http.Server{Handler: cs.mux(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(cs.done)
		_ = cs.srv.Serve(ln) // returns on close
	}()
	return cs, nil
}

// mux routes the control socket.
func (c *controlServer) mux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(c.view.Snapshot())
	})
	mux.HandleFunc("GET /v1/watch", c.serveWatch)
	mux.HandleFunc("GET /v1/logs", c.serveLogs)
	mux.HandleFunc("POST /v1/test-request", c.serveTestRequest)
	mux.HandleFunc("GET /v1/plan", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = c.view.Plan().WriteJSON(w)
	})
	mux.HandleFunc("POST /v1/apply", c.serveApply) // controlapply.go
	mux.HandleFunc("GET /v1/describe", c.serveDescribe)
	verbs := func(w http.ResponseWriter, r *http.Request) {
		cmd, ok := controlCommands[r.PathValue("verb")]
		if !ok {
			http.Error(w, fmt.Sprintf("unknown command %q", r.PathValue("verb")), http.StatusNotFound)
			return
		}
		out, err := cmd(c.verbs, r.URL.Query())
		switch {
		case errors.Is(err, ErrUnknownRole):
			http.Error(w, err.Error(), http.StatusNotFound)
		case err != nil:
			http.Error(w, err.Error(), http.StatusConflict)
		default:
			fmt.Fprintln(w, out)
		}
	}
	mux.HandleFunc("POST /v1/{verb}", verbs)
	// A rolling restart answers as it goes: one line per step, then "ok"
	// or "error: …" (its length is the deployment's, not one request's).
	mux.HandleFunc("POST /v1/restart", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("rolling") != "1" {
			r.SetPathValue("verb", "restart")
			verbs(w, r)
			return
		}
		c.serveRolling(w, r)
	})
	// A stop of the whole deployment drains first (stop.go); followed, it
	// answers as it goes.
	mux.HandleFunc("POST /v1/stop", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("role") != "" {
			r.SetPathValue("verb", "stop")
			verbs(w, r)
			return
		}
		c.serveStop(w, r)
	})
	return mux
}

// lineStream starts a plain-text answer the client reads line by line as
// the work goes (a rolling restart's progress, a stop's): each line is
// flushed as it is written.
func lineStream(w http.ResponseWriter) func(msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fl, _ := w.(http.Flusher)
	return func(msg string) {
		fmt.Fprintln(w, msg)
		if fl != nil {
			fl.Flush()
		}
	}
}

// serveRolling runs a rolling restart for the request, streaming its
// progress lines; it ends when the restart does, or when the daemon or the
// client goes away.
func (c *controlServer) serveRolling(w http.ResponseWriter, r *http.Request) {
	role := r.URL.Query().Get("role")
	if _, err := c.verbs.RollingTargets(role); err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	line := lineStream(w)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-c.stop.shuttingDown():
			cancel()
		case <-c.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := c.verbs.RollingRestart(ctx, role, r.URL.Query().Get("now") == "1", line); err != nil {
		line("error: " + oneLine(err.Error()))
		return
	}
	line("ok")
}

// serveStop stops the whole deployment and, with follow=1, answers as it
// goes: a line when the drain begins and when it ends, then "stopped" once
// every role has stopped (just before the control socket closes), so
// `tsd stop` can say what its stop did. Without follow it answers "ok" at
// once, as before.
func (c *controlServer) serveStop(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d, set, err := stopQuery(q.Get("now"), q.Get("timeout"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if set {
		c.stop.shutdownDrain(d)
	} else {
		c.stop.shutdown()
	}
	if q.Get("follow") != "1" {
		fmt.Fprintln(w, "ok")
		return
	}
	line := lineStream(w)
	line("stopping " + c.view.Plan().Name)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	told := false
	tell := func() {
		if st := c.stop.progress(); !told && st != nil && st.Phase == snapshot.StopStopping {
			told = true
			b, _ := json.Marshal(stopLine{Drain: st.Drain, LimitMS: c.stop.limit(c.view.Plan()).Milliseconds()})
			line("drained " + string(b))
		}
	}
	for {
		tell()
		select {
		case <-c.stop.stopped():
			tell() // the stop's phase was set before stopDone closed
			line("stopped")
			return
		case <-c.quit:
			return
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

func (c *controlServer) close() {
	if c.srv == nil {
		return
	}
	c.quitOnce.Do(func() { close(c.quit) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.srv.Shutdown(ctx); err != nil {
		_ = c.srv.Close()
	}
	<-c.done
	_ = os.Remove(c.path)
}

// ControlClient talks to a running tsd over its control socket.
type ControlClient struct {
	Path string
	hc   *http.Client
}

// NewControlClient returns a client for the socket at path.
func NewControlClient(path string) *ControlClient {
	return &ControlClient{Path: path, hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}}
}

func (c *ControlClient) do(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://tsd"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reach tsd at %s (is it running?): %w", c.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, errors.New(strings.TrimSpace(string(b)))
	}
	return resp, nil
}

// StatusJSON returns the Snapshot exactly as tsd serves it.
func (c *ControlClient) StatusJSON(ctx context.Context) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/status")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// Status returns the decoded Snapshot.
func (c *ControlClient) Status(ctx context.Context) (snapshot.Snapshot, error) {
	var s snapshot.Snapshot
	b, err := c.StatusJSON(ctx)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("decode status: %w", err)
	}
	return s, nil
}

func (c *ControlClient) post(ctx context.Context, verb, role string, now bool) error {
	q := "/v1/" + verb + "?role=" + queryEscape(role)
	if now {
		q += "&now=1"
	}
	resp, err := c.do(ctx, http.MethodPost, q)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Restart restarts one role ("" = every role), draining it first.
func (c *ControlClient) Restart(ctx context.Context, role string) error {
	return c.post(ctx, "restart", role, false)
}

// RestartNow restarts one role; with now its in-flight requests end at once.
func (c *ControlClient) RestartNow(ctx context.Context, role string, now bool) error {
	return c.post(ctx, "restart", role, now)
}

// StopNow stops one role; with now its in-flight requests end at once.
func (c *ControlClient) StopNow(ctx context.Context, role string, now bool) error {
	return c.post(ctx, "stop", role, now)
}

// RollingRestart restarts target's instances one at a time (see
// Supervisor.RollingRestart), copying each progress line to progress
// (may be nil) as it comes; it returns when the last one is ready again,
// or the error that stopped it.
func (c *ControlClient) RollingRestart(ctx context.Context, target string, now bool, progress func(string)) error {
	q := "/v1/restart?rolling=1&role=" + queryEscape(target)
	if now {
		q += "&now=1"
	}
	resp, err := c.do(ctx, http.MethodPost, q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "ok":
			return nil
		case strings.HasPrefix(l, "error: "):
			return errors.New(strings.TrimPrefix(l, "error: "))
		case progress != nil:
			progress(l)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read rolling restart progress: %w", err)
	}
	return errors.New("tsd ended the rolling restart without an answer")
}

// StopAll stops the whole deployment and follows the stop until every
// role has stopped: drain is its limit (nil: the plan's drain_timeout; 0:
// none), and each line the daemon writes ("stopping NAME", "drained {…}",
// StopLine) goes to progress. It returns once the daemon says "stopped",
// or when the socket closes under it (a daemon that does not follow its
// stop answers "ok" and returns at once: then the caller waits itself).
func (c *ControlClient) StopAll(ctx context.Context, drain *time.Duration, progress func(string)) (followed bool, err error) {
	q := "/v1/stop?follow=1"
	switch {
	case drain == nil:
	case *drain <= 0:
		q += "&now=1"
	default:
		q += "&timeout=" + url.QueryEscape(drain.String())
	}
	resp, err := c.do(ctx, http.MethodPost, q)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		switch l := sc.Text(); l {
		case "ok":
			return false, nil
		case "stopped":
			return true, nil
		default:
			if progress != nil {
				progress(l)
			}
		}
	}
	// The socket closed before "stopped": the daemon went while we read.
	return true, nil
}

// Start starts one role.
func (c *ControlClient) Start(ctx context.Context, role string) error {
	return c.post(ctx, "start", role, false)
}

// Stop stops one role, or ("" ) the whole deployment.
func (c *ControlClient) Stop(ctx context.Context, role string) error {
	return c.post(ctx, "stop", role, false)
}

// Logs copies a role's ring ("" = all roles, prefixed) to w; with follow it
// keeps copying new lines until ctx ends or tsd stops.
func (c *ControlClient) Logs(ctx context.Context, role string, follow bool, w io.Writer) error {
	q := "/v1/logs?role=" + queryEscape(role)
	if follow {
		q += "&follow=1"
	}
	resp, err := c.do(ctx, http.MethodGet, q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	if err != nil && ctx.Err() != nil {
		return nil
	}
	return err
}

func queryEscape(s string) string { return url.QueryEscape(s) }
