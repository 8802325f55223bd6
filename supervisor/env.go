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
	names      nameBook // the roster: an instance's name now, and its renames
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

// nameBook is where an actor finds its name and changes it: the roster,
// the one place names map to ids (roster.go). An actor speaks its name
// only at the edges (the gateway's calls, events, log lines).
type nameBook interface {
	nameOf(id int) string
	rename(id int, to string) error
}

// recorder keeps the run folder's record of live process groups, by
// instance id, and gives each run its own cgroup (orphans.go). name is
// what the record calls the instance for a later tsd's report.
type recorder interface {
	recordGroup(id int, name string, p *process, cgroup string)
	dropGroup(id int)
	roleCgroup(name string) string
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
// actors write it, by instance id, and the gateway's lane reads it by
// role name to admit only a role's own processes to its sockets
// (docs/architecture.md §D12); the name is looked up in the roster,
// which the supervisor hands the table when it is made. It is built
// before the gateway and the supervisor and handed to both, so neither
// has to exist before the other. Safe from any goroutine; reading it
// never waits on an actor.
type Runs struct {
	mu  sync.RWMutex
	pid map[int]int // instance id → its run's process group
	// find is the roster's lookup of the gateway's names (roster.route):
	// current, or an instance's former name while the gateway may
	// still use it. nil until a supervisor runs the table.
	find atomic.Pointer[func(role string) (id int, ok bool)]
}

// NewRuns returns an empty table.
func NewRuns() *Runs { return &Runs{pid: map[int]int{}} }

// PIDs is the process (group leader) of the role's current run, or nil
// while it has none.
func (r *Runs) PIDs(role string) []int {
	find := r.find.Load()
	if find == nil {
		return nil
	}
	id, ok := (*find)(role)
	if !ok {
		return nil
	}
	if pid := r.of(id); pid > 0 {
		return []int{pid}
	}
	return nil
}

// lookup makes find the table's way from a role name to an instance.
func (r *Runs) lookup(find func(role string) (int, bool)) { r.find.Store(&find) }

func (r *Runs) of(id int) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.pid[id]
}

// set records the instance's current run; 0 when it has none.
func (r *Runs) set(id, pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pid <= 0 {
		delete(r.pid, id)
		return
	}
	r.pid[id] = pid
}
