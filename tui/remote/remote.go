// Package remote is the dashboard's backend for a tsd daemon in another
// process: every tui.Backend call goes through the daemon's control socket
// (docs/architecture.md: the dashboard is a client), so any number of
// dashboards may attach, and killing one changes nothing in the daemon.
package remote

import (
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
	"github.com/tsd-project/tsd/tui"
)

// callTimeout bounds one control command (restart, stop, save-log).
const callTimeout = 15 * time.Second

// Backend is a tui.Backend over a control socket.
type Backend struct {
	c      *supervisor.ControlClient
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	first    *watch            // the watch Dial opened, handed to the first Subscribe
	last     snapshot.Snapshot // the newest snapshot any watch read
	readOnly bool              // SetReadOnly: every control call is refused here
	registry string            // where :ctx looks ("": daemons.Dir)
}

// ErrReadOnly is what a read-only backend answers every control call.
var ErrReadOnly = errors.New("read-only dashboard (tsd attach --readonly): restart, stop and start are off")

// SetReadOnly makes every control call (restart, stop, start, stop the
// deployment) fail with ErrReadOnly before it reaches the daemon: an
// observer's dashboard cannot act, whatever its keys say.
func (b *Backend) SetReadOnly() {
	b.mu.Lock()
	b.readOnly = true
	b.mu.Unlock()
}

func (b *Backend) refused() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.readOnly
}

type watch struct {
	cur    snapshot.Snapshot
	ch     <-chan snapshot.Snapshot
	cancel context.CancelFunc
}

var (
	_ tui.Backend           = (*Backend)(nil)
	_ tui.DeploymentStopper = (*Backend)(nil)
	_ tui.Describer         = (*Backend)(nil)
	_ tui.Scaler            = (*Backend)(nil)
)

// Dial connects to the daemon at socket and reads its current Snapshot, so
// a dead or absent daemon is an error here rather than a blank screen.
func Dial(ctx context.Context, socket string) (*Backend, error) {
	b := &Backend{c: supervisor.NewControlClient(socket)}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	w, err := b.open(ctx)
	if err != nil {
		b.cancel()
		return nil, err
	}
	b.first, b.last = w, w.cur
	b.last.History = nil // kept once, by the dashboard that folds it
	return b, nil
}

// open starts a watch that lives until its cancel or Close; ctx bounds only
// the wait for the first snapshot.
func (b *Backend) open(ctx context.Context) (*watch, error) {
	wctx, cancel := context.WithCancel(b.ctx)
	stop := context.AfterFunc(ctx, cancel)
	// The first snapshot brings the daemon's trend rings: the dashboard
	// shows the past at once (snapshot.History).
	cur, ch, err := b.c.WatchHistory(wctx)
	if !stop() && ctx.Err() != nil && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &watch{cur: cur, ch: ch, cancel: cancel}, nil
}

// Close ends every stream this backend opened.
func (b *Backend) Close() { b.cancel() }

// Client is the control client underneath.
func (b *Backend) Client() *supervisor.ControlClient { return b.c }

// Snapshot is the newest Snapshot read from the daemon.
func (b *Backend) Snapshot() snapshot.Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// Subscribe implements tui.Backend. If the daemon cannot be reached the
// last known Snapshot comes with a closed channel (the stream "ended").
func (b *Backend) Subscribe() (snapshot.Snapshot, <-chan snapshot.Snapshot, func()) {
	b.mu.Lock()
	w := b.first
	b.first = nil
	b.mu.Unlock()
	if w == nil {
		ctx, cancel := context.WithTimeout(b.ctx, callTimeout)
		var err error
		w, err = b.open(ctx)
		cancel()
		if err != nil {
			ch := make(chan snapshot.Snapshot)
			close(ch)
			return b.Snapshot(), ch, func() {}
		}
	}
	out := make(chan snapshot.Snapshot, 1)
	go func() {
		defer close(out)
		for s := range w.ch {
			b.mu.Lock()
			b.last = s
			b.mu.Unlock()
			select {
			case out <- s:
			default: // latest wins: drop the stale one waiting
				select {
				case <-out:
				default:
				}
				out <- s
			}
		}
	}()
	var once sync.Once
	return w.cur, out, func() { once.Do(w.cancel) }
}

// SubscribeLogs implements tui.Backend with the daemon's JSON log stream.
func (b *Backend) SubscribeLogs(role string) ([]snapshot.LogLine, <-chan []snapshot.LogLine, func(), error) {
	ctx, cancel := context.WithCancel(b.ctx)
	backlog, ch, err := b.c.SubscribeLogs(ctx, role, supervisor.LogOptions{Follow: true})
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return backlog, ch, cancel, nil
}

func (b *Backend) command(verb, role string) error {
	if b.refused() {
		return ErrReadOnly
	}
	ctx, cancel := context.WithTimeout(b.ctx, callTimeout)
	defer cancel()
	_, err := b.c.Command(ctx, verb, url.Values{"role": {role}})
	return err
}

func (b *Backend) commandNow(verb, role string, now bool) error {
	if !now || b.refused() {
		return b.command(verb, role)
	}
	ctx, cancel := context.WithTimeout(b.ctx, callTimeout)
	defer cancel()
	_, err := b.c.Command(ctx, verb, url.Values{"role": {role}, "now": {"1"}})
	return err
}

// RestartNow and StopNow are the control socket's restart and stop with
// now=1 (no drain).
func (b *Backend) RestartNow(role string, now bool) error { return b.commandNow("restart", role, now) }
func (b *Backend) StopNow(role string, now bool) error    { return b.commandNow("stop", role, now) }

func (b *Backend) Restart(role string) error { return b.command("restart", role) }
func (b *Backend) Stop(role string) error    { return b.command("stop", role) }
func (b *Backend) Start(role string) error   { return b.command("start", role) }
func (b *Backend) RestartAll() error         { return b.command("restart", "") }

// RollingRestart restarts target's instances one at a time in the daemon,
// passing on each progress line.
func (b *Backend) RollingRestart(ctx context.Context, target string, now bool, progress func(string)) error {
	if b.refused() {
		return ErrReadOnly
	}
	return b.c.RollingRestart(ctx, target, now, progress)
}

// StopDeployment stops the whole deployment (tsd stop).
func (b *Backend) StopDeployment() error { return b.command("stop", "") }

// SaveLog implements tui.Backend: the daemon writes the file (path is on
// its host, which is this host).
func (b *Backend) SaveLog(role, path string) (string, error) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs // the daemon's working directory is not ours
	}
	ctx, cancel := context.WithTimeout(b.ctx, callTimeout)
	defer cancel()
	return b.c.SaveLog(ctx, role, path)
}

// TestRequest implements tui.Backend: the daemon sends it through its
// gateway (it knows the model name and the API key).
func (b *Backend) TestRequest(ctx context.Context) (string, time.Duration, error) {
	return b.c.TestRequest(ctx)
}

// Describe implements tui.Describer: the role as the daemon planned it,
// secrets masked there.
func (b *Backend) Describe(role string) (snapshot.RoleSpec, error) {
	ctx, cancel := context.WithTimeout(b.ctx, callTimeout)
	defer cancel()
	return b.c.Describe(ctx, role)
}

// Scale implements tui.Scaler: the daemon plans the running profile with
// entry's new replica count and carries it out (tsd scale); it returns
// when that is done or with what stopped it.
func (b *Backend) Scale(ctx context.Context, entry string, replicas int, gpus []string) error {
	if b.refused() {
		return ErrReadOnly
	}
	req := supervisor.ApplyRequest{Scale: map[string]int{entry: replicas}, GPUs: gpus}
	return b.c.Apply(ctx, req, false, nil, nil)
}
