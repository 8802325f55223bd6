// Package tuitest holds a fake dashboard backend and deterministic
// deployments for tests, benchmarks and trying the dashboard without
// engines.
package tuitest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// Fake implements tui.Backend in memory. Controls are recorded, not acted
// on; tests publish snapshots and log lines themselves.
type Fake struct {
	mu      sync.Mutex
	snap    snapshot.Snapshot
	subs    map[int]chan snapshot.Snapshot
	logSubs map[int]*logSub
	logs    map[string][]snapshot.LogLine // per role, bounded
	merged  []snapshot.LogLine
	next    int
	calls   []string

	// MaxLines bounds each retained log (default 10000).
	MaxLines int
	// Err, when set, is returned by every control call.
	Err error
	// TestReply and TestLatency answer TestRequest.
	TestReply   string
	TestLatency time.Duration
	// Dropped counts log batches a full subscriber channel refused.
	Dropped int
	// Specs answer Describe; a role without one gets Spec of its status.
	Specs map[string]snapshot.RoleSpec
}

type logSub struct {
	role string
	ch   chan []snapshot.LogLine
}

// NewFake starts from snapshot s.
func NewFake(s snapshot.Snapshot) *Fake {
	return &Fake{
		snap:        s,
		subs:        map[int]chan snapshot.Snapshot{},
		logSubs:     map[int]*logSub{},
		logs:        map[string][]snapshot.LogLine{},
		MaxLines:    10000,
		TestReply:   "Hello from ts-fake",
		TestLatency: 42 * time.Millisecond,
	}
}

// Subscribe hands out the current snapshot, then every published one.
// The channel holds one value: a slow reader sees the newest, never stale.
func (f *Fake) Subscribe() (snapshot.Snapshot, <-chan snapshot.Snapshot, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.next
	f.next++
	ch := make(chan snapshot.Snapshot, 1)
	f.subs[id] = ch
	var once sync.Once
	return f.snap, ch, func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.subs, id)
			f.mu.Unlock()
		})
	}
}

// Publish replaces the snapshot and offers it to every subscriber.
func (f *Fake) Publish(s snapshot.Snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snap = s
	for _, ch := range f.subs {
		select {
		case <-ch: // drop the unread older one
		default:
		}
		ch <- s
	}
}

// Snapshot is the last published snapshot.
func (f *Fake) Snapshot() snapshot.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snap
}

// SubscribeLogs returns the retained lines, then new batches. A batch a
// full channel cannot take is dropped, never waited for.
func (f *Fake) SubscribeLogs(role string) ([]snapshot.LogLine, <-chan []snapshot.LogLine, func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if role != "" && !f.hasRole(role) {
		return nil, nil, nil, fmt.Errorf("subscribe logs: unknown role %q", role)
	}
	var backlog []snapshot.LogLine
	if role == "" {
		backlog = append(backlog, f.merged...)
	} else {
		backlog = append(backlog, f.logs[role]...)
	}
	id := f.next
	f.next++
	ls := &logSub{role: role, ch: make(chan []snapshot.LogLine, 256)}
	f.logSubs[id] = ls
	var once sync.Once
	return backlog, ls.ch, func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.logSubs, id)
			f.mu.Unlock()
		})
	}, nil
}

func (f *Fake) hasRole(role string) bool {
	if role == "gateway" {
		return true // the gateway's access log is a source like a role's
	}
	for _, r := range f.snap.Roles {
		if r.Name == role {
			return true
		}
	}
	return false
}

// AppendLogs adds one batch (any roles) and offers it to subscribers.
func (f *Fake) AppendLogs(lines ...snapshot.LogLine) {
	f.mu.Lock()
	defer f.mu.Unlock()
	max := f.MaxLines
	for _, l := range lines {
		rl := append(f.logs[l.Role], l)
		if len(rl) > max {
			rl = rl[len(rl)-max:]
		}
		f.logs[l.Role] = rl
	}
	f.merged = append(f.merged, lines...)
	if len(f.merged) > max {
		f.merged = f.merged[len(f.merged)-max:]
	}
	for _, s := range f.logSubs {
		batch := lines
		if s.role != "" {
			batch = nil
			for _, l := range lines {
				if l.Role == s.role {
					batch = append(batch, l)
				}
			}
			if len(batch) == 0 {
				continue
			}
		}
		select {
		case s.ch <- batch:
		default:
			f.Dropped++
		}
	}
}

// Subscribers counts open snapshot subscriptions.
func (f *Fake) Subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// LogSubscribers counts open log subscriptions.
func (f *Fake) LogSubscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.logSubs)
}

// Calls lists the control calls made so far, e.g. "restart decode-0".
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *Fake) record(call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	return f.Err
}

func (f *Fake) Restart(role string) error { return f.record("restart " + role) }
func (f *Fake) Stop(role string) error    { return f.record("stop " + role) }
func (f *Fake) Start(role string) error   { return f.record("start " + role) }

// RestartNow records "restart ROLE", or "restart --now ROLE" with now.
func (f *Fake) RestartNow(role string, now bool) error {
	if now {
		return f.record("restart --now " + role)
	}
	return f.record("restart " + role)
}

// StopNow records "stop ROLE", or "stop --now ROLE" with now.
func (f *Fake) StopNow(role string, now bool) error {
	if now {
		return f.record("stop --now " + role)
	}
	return f.record("stop " + role)
}
func (f *Fake) RestartAll() error { return f.record("restart-all") }

// RollingRestart records the call and returns at once.
func (f *Fake) RollingRestart(_ context.Context, target string, now bool, _ func(string)) error {
	if now {
		return f.record("rolling-restart --now " + target)
	}
	return f.record("rolling-restart " + target)
}

// SaveLog records the call; it writes nothing.
func (f *Fake) SaveLog(role, path string) (string, error) {
	if err := f.record("save " + role + " " + path); err != nil {
		return "", err
	}
	return path, nil
}

// TestRequest answers with TestReply and reports TestLatency (not waited).
func (f *Fake) TestRequest(ctx context.Context) (string, time.Duration, error) {
	if err := f.record("test"); err != nil {
		return "", 0, err
	}
	if err := ctx.Err(); err != nil {
		return "", 0, fmt.Errorf("test request: %w", err)
	}
	return f.TestReply, f.TestLatency, nil
}

// StopDeployment records the call (the Detach quit prompt's stop answer).
func (f *Fake) StopDeployment() error { return f.record("stop-deployment") }

// Scale implements tui.Scaler: recorded as "scale ENTRY=N[ gpus G,G]".
func (f *Fake) Scale(_ context.Context, entry string, replicas int, gpus []string) error {
	call := fmt.Sprintf("scale %s=%d", entry, replicas)
	if len(gpus) > 0 {
		call += " gpus " + strings.Join(gpus, ",")
	}
	return f.record(call)
}

// Signal implements tui.Signaler: recorded as "signal ROLE SIG".
func (f *Fake) Signal(role, sig string) error { return f.record("signal " + role + " " + sig) }

// Describe answers the role's plan: Specs[role], else Spec of the role in
// the current snapshot.
func (f *Fake) Describe(role string) (snapshot.RoleSpec, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.Specs[role]; ok {
		return s, nil
	}
	for _, r := range f.snap.Roles {
		if r.Name == role {
			return Spec(r), nil
		}
	}
	return snapshot.RoleSpec{}, fmt.Errorf("describe: unknown role %q", role)
}
