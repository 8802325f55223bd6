// Package daemons is the registry of the tsd daemons running for this
// user (not Prometheus' registry, nor the lane's ranks), so that
// `tsd ls|status|restart|stop|logs|attach` find a deployment by name or
// profile from any directory, two `tsd up` of one name are refused, and
// two planners on one host never pick the same port.
//
// It is a folder (mode 0700) of one JSON file per running daemon, plus a
// lock file: whoever checks and then adds an entry holds an exclusive flock
// on it for the whole check-plan-add step. An entry names its daemon by PID
// and the PID's start time (from /proc), so a PID reused after a crash is
// never taken for the daemon; such stale entries are removed when read —
// unless the entry's Records folder still holds files: a daemon killed
// with its guardians may have left engines running, so its entry stays,
// listed by Dead, until whoever reaps them (tsd stop NAME) removes it.
package daemons

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tsd-project/tsd/internal/procfs"
)

// EnvDir overrides the registry folder (tests). Tests that start tsd
// processes normally keep the real per-user folder so their daemons see
// each other's port claims; only a test about the registry's own listing
// (which must not see the user's deployments) sets it.
const EnvDir = "TSD_REGISTRY_DIR"

// Entry is one running daemon.
type Entry struct {
	Name       string    `json:"name"`
	Profile    string    `json:"profile"`        // absolute path of the profile file
	Socket     string    `json:"control_socket"` // its control socket
	PID        int       `json:"pid"`
	PIDStart   uint64    `json:"pid_start"` // /proc/PID/stat starttime (clock ticks since boot)
	StartedAt  time.Time `json:"started_at"`
	Ports      []int     `json:"ports,omitempty"` // every TCP port its plan uses
	GatewayURL string    `json:"gateway_url,omitempty"`
	LogFile    string    `json:"log_file,omitempty"` // the daemon's own output
	// Records is a folder the daemon keeps a file in for each process
	// group it runs (supervisor/orphans.go), so what a killed daemon left
	// can be found; "" when it keeps none.
	Records string `json:"records,omitempty"`
}

// Dir is the registry folder: $TSD_REGISTRY_DIR, else $XDG_RUNTIME_DIR/tsd,
// else /tmp/tsd-$UID.
func Dir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		return filepath.Join(x, "tsd")
	}
	return filepath.Join(os.TempDir(), "tsd-"+strconv.Itoa(os.Getuid()))
}

// Registry is one registry folder.
type Registry struct{ dir string }

// Open returns the registry in dir ("" = Dir()), creating it 0700.
func Open(dir string) (*Registry, error) {
	if dir == "" {
		dir = Dir()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create registry %s: %w", dir, err)
	}
	// MkdirAll keeps an existing folder's mode; a shared /tmp one must not
	// be readable by others (sockets and profile paths are listed in it).
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("chmod registry %s: %w", dir, err)
	}
	return &Registry{dir: dir}, nil
}

// Lock takes the registry's exclusive lock; the returned function drops it.
// Hold it from the checks (name free, ports unclaimed) to Add.
func (r *Registry) Lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(r.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open registry lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock registry: %w", err)
	}
	return func() { f.Close() }, nil // closing drops the flock
}

func (r *Registry) file(name string) string {
	return filepath.Join(r.dir, safeName(name)+".json")
}

// safeName keeps a deployment name usable as a file name.
func safeName(n string) string {
	return strings.Map(func(c rune) rune {
		if c == '/' || c == 0 {
			return '_'
		}
		return c
	}, n)
}

// List returns the live entries sorted by name, removing stale ones (their
// daemon is gone, or its PID now belongs to another process) except those
// Dead lists.
func (r *Registry) List() ([]Entry, error) {
	live, _, err := r.scan()
	return live, err
}

// Dead returns, sorted by name, the entries whose daemon is gone but whose
// Records folder still holds files: the daemon may have left processes.
// They stay until Remove; the caller checks what is really left.
func (r *Registry) Dead() ([]Entry, error) {
	_, dead, err := r.scan()
	return dead, err
}

func (r *Registry) scan() (live, dead []Entry, err error) {
	names, err := filepath.Glob(filepath.Join(r.dir, "*.json"))
	if err != nil {
		return nil, nil, fmt.Errorf("list registry: %w", err)
	}
	for _, p := range names {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // removed meanwhile
		}
		var e Entry
		switch {
		case json.Unmarshal(b, &e) != nil:
			_ = os.Remove(p)
		case Alive(e):
			live = append(live, e)
		case holdsFiles(e.Records):
			dead = append(dead, e)
		default:
			_ = os.Remove(p)
		}
	}
	byName := func(es []Entry) {
		sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
	}
	byName(live)
	byName(dead)
	return live, dead, nil
}

// holdsFiles reports whether dir exists and lists a file not starting
// with a dot (a record being written is a dot file first).
func holdsFiles(dir string) bool {
	if dir == "" {
		return false
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if !e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			return true
		}
	}
	return false
}

// Add records e, replacing nothing: a live entry of the same name is an
// error. Call it under Lock.
func (r *Registry) Add(e Entry) error {
	if e.PIDStart == 0 {
		st, ok := ProcStart(e.PID)
		if !ok {
			return fmt.Errorf("register %s: process %d not found", e.Name, e.PID)
		}
		e.PIDStart = st
	}
	live, err := r.List()
	if err != nil {
		return err
	}
	for _, o := range live {
		if o.Name == e.Name {
			return &InUseError{Entry: o}
		}
	}
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Errorf("register %s: %w", e.Name, err)
	}
	tmp := r.file(e.Name) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("register %s: %w", e.Name, err)
	}
	if err := os.Rename(tmp, r.file(e.Name)); err != nil {
		return fmt.Errorf("register %s: %w", e.Name, err)
	}
	return nil
}

// SetPorts replaces the ports of name's entry if it is pid's: a running
// deployment changed by tsd apply or tsd scale claims what its plan uses
// now. Call it under Lock.
func (r *Registry) SetPorts(name string, pid int, ports []int) error {
	p := r.file(name)
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("update %s: %w", name, err)
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return fmt.Errorf("update %s: %w", name, err)
	}
	if e.PID != pid {
		return nil // someone else's now
	}
	e.Ports = ports
	if b, err = json.MarshalIndent(e, "", "  "); err != nil {
		return fmt.Errorf("update %s: %w", name, err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("update %s: %w", name, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("update %s: %w", name, err)
	}
	return nil
}

// Remove deletes name's entry if it is pid's.
func (r *Registry) Remove(name string, pid int) error {
	p := r.file(name)
	b, err := os.ReadFile(p)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("unregister %s: %w", name, err)
	}
	var e Entry
	if json.Unmarshal(b, &e) == nil && e.PID != pid {
		return nil // someone else's now
	}
	if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("unregister %s: %w", name, err)
	}
	return nil
}

// Claimed is every port the live entries' plans use, and the dead ones'
// (their leftover engines may still hold them).
func (r *Registry) Claimed() (map[int]bool, error) {
	live, dead, err := r.scan()
	if err != nil {
		return nil, err
	}
	m := map[int]bool{}
	for _, e := range append(live, dead...) {
		for _, p := range e.Ports {
			m[p] = true
		}
	}
	return m, nil
}

// InUseError says a deployment of that name already runs.
type InUseError struct{ Entry Entry }

func (e *InUseError) Error() string {
	return fmt.Sprintf("a deployment named %q is already running (pid %d, profile %s); stop it with `tsd stop %s` or give this profile another name",
		e.Entry.Name, e.Entry.PID, e.Entry.Profile, e.Entry.Name)
}

// Alive says whether e's daemon still runs: its PID exists with the start
// time recorded.
func Alive(e Entry) bool {
	if e.PID <= 0 {
		return false
	}
	st, ok := ProcStart(e.PID)
	return ok && st == e.PIDStart
}

// ProcStart is the start time of pid in clock ticks since boot (field 22 of
// /proc/PID/stat), which with the PID names one process for good; a
// zombie is gone for this purpose.
func ProcStart(pid int) (uint64, bool) {
	st, ok := procfs.ReadStat("", pid)
	if !ok || st.Gone() { // a zombie is gone for our purposes
		return 0, false
	}
	return st.Start, true
}

// Find picks the deployment a control verb means. key is a deployment name
// or a profile path ("" = the only one running). Errors list what runs.
func Find(entries []Entry, key string) (Entry, error) {
	if key == "" {
		switch len(entries) {
		case 0:
			return Entry{}, ErrNoneRunning
		case 1:
			return entries[0], nil
		}
		return Entry{}, fmt.Errorf("%d deployments are running, name one: %s", len(entries), names(entries))
	}
	for _, e := range entries {
		if e.Name == key {
			return e, nil
		}
	}
	if abs, err := filepath.Abs(key); err == nil {
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		for _, e := range entries {
			if e.Profile == abs {
				return e, nil
			}
		}
	}
	if len(entries) == 0 {
		return Entry{}, fmt.Errorf("%w (looked for %q)", ErrNoneRunning, key)
	}
	return Entry{}, fmt.Errorf("no running deployment named %q (running: %s)", key, names(entries))
}

// ErrNoneRunning: the registry lists no live daemon.
var ErrNoneRunning = errors.New("no tsd deployment is running")

func names(es []Entry) string {
	n := make([]string, len(es))
	for i, e := range es {
		n[i] = e.Name
	}
	return strings.Join(n, ", ")
}
