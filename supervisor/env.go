package supervisor

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/profiles"
)

// env is what an actor uses of the deployment around it: the clock, the
// gateway, the publisher, the record of live groups and the few settings
// every role shares. It is built once by New and never changes, so an
// actor made later (a role added to a running deployment) gets the same.
type env struct {
	now        func() time.Time
	rand       func() float64
	gw         Gateway // nil: engines run without a gateway
	pub        *publisher
	rec        recorder
	runs       *Runs
	gpus       GPUReleaseVerifier // nil: no GPU release check
	gpuLimit   time.Duration      // bound of one GPU release wait
	noProgress time.Duration      // a starting role silent this long is stopped; ≤ 0: never
	closing    *atomic.Bool       // tsd shuts down: ranks dropping from now on are part of it
	guardExe   string
	guardArgs  []string
	plan       *atomic.Pointer[profiles.Plan] // the deployment's settings every role shares now (api_key_env: childEnvUnset)
}

// recorder keeps the run folder's record of live process groups and gives
// each run its own cgroup (orphans.go).
type recorder interface {
	recordGroup(role string, p *process, cgroup string)
	renameGroup(from, to string)
	dropGroup(role string)
	roleCgroup(role string) string
	releaseCgroup(dir string)
}

// progressTick is how often a starting role's output is checked against
// the no-progress deadline.
func (e *env) progressTick() *time.Ticker {
	d := e.noProgress / 4
	if e.noProgress <= 0 || d > 5*time.Second {
		d = 5 * time.Second
	}
	if d < 20*time.Millisecond {
		d = 20 * time.Millisecond
	}
	return time.NewTicker(d)
}

// Runs says which process runs each role instance now: the supervisor's
// actors write it, and the gateway's lane reads it to admit only a role's
// own processes to its sockets (docs/architecture.md §D12). It is built
// before the gateway and the supervisor and handed to both, so neither
// has to exist before the other. Safe from any goroutine; reading it
// never waits on an actor.
type Runs struct {
	mu  sync.RWMutex
	pid map[string]int
}

// NewRuns returns an empty table.
func NewRuns() *Runs { return &Runs{pid: map[string]int{}} }

// PIDs is the process (group leader) of the role's current run, or nil
// while it has none.
func (r *Runs) PIDs(role string) []int {
	if pid := r.of(role); pid > 0 {
		return []int{pid}
	}
	return nil
}

func (r *Runs) of(role string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.pid[role]
}

// set records the role's current run; 0 when it has none.
func (r *Runs) set(role string, pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pid <= 0 {
		delete(r.pid, role)
		return
	}
	r.pid[role] = pid
}
