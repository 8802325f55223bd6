package daemons

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestAddListRemove: an entry of this process is listed; a second of the
// same name is refused; its ports are claimed; Remove by another PID keeps
// it, by its own drops it.
func TestAddListRemove(t *testing.T) {
	t.Parallel()
	r, err := Open(filepath.Join(t.TempDir(), "reg"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(r.Path()); fi.Mode().Perm() != 0o700 {
		t.Fatalf("registry mode %v", fi.Mode().Perm())
	}
	e := Entry{Name: "demo", Profile: "/x/demo.yaml", Socket: "/x/tsd.sock", PID: os.Getpid(), Ports: []int{9000, 10000}}
	if err := r.Add(e); err != nil {
		t.Fatal(err)
	}
	var inUse *InUseError
	if err := r.Add(e); !errors.As(err, &inUse) || !strings.Contains(err.Error(), `"demo" is already running`) {
		t.Fatalf("second add: %v", err)
	}
	live, err := r.List()
	if err != nil || len(live) != 1 || live[0].PIDStart == 0 {
		t.Fatalf("list: %v %+v", err, live)
	}
	claimed, _ := r.Claimed()
	if !claimed[9000] || !claimed[10000] || claimed[9001] {
		t.Fatalf("claimed %v", claimed)
	}
	if err := r.Remove("demo", os.Getpid()+1); err != nil {
		t.Fatal(err)
	}
	if live, _ := r.List(); len(live) != 1 {
		t.Fatalf("Remove by another pid dropped the entry")
	}
	if err := r.Remove("demo", os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if live, _ := r.List(); len(live) != 0 {
		t.Fatalf("after remove: %+v", live)
	}
}

// TestStaleEntries: a dead PID, or a live PID with another start time (a
// reused PID), is stale and removed on read.
func TestStaleEntries(t *testing.T) {
	t.Parallel()
	r, err := Open(filepath.Join(t.TempDir(), "reg"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	st, _ := ProcStart(os.Getpid())
	for _, e := range []Entry{
		{Name: "dead", PID: dead, PIDStart: 1},
		{Name: "reused", PID: os.Getpid(), PIDStart: st + 1},
	} {
		if err := r.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	if live, err := r.List(); err != nil || len(live) != 0 {
		t.Fatalf("stale entries listed: %v %+v", err, live)
	}
	if m, _ := filepath.Glob(filepath.Join(r.Path(), "*.json")); len(m) != 0 {
		t.Fatalf("stale files left: %v", m)
	}
}

// TestLockSerializes: under Lock, check-then-add by many goroutines lets
// exactly one add a given name.
func TestLockSerializes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "reg")
	var wg sync.WaitGroup
	var mu sync.Mutex
	added := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := Open(dir)
			if err != nil {
				t.Error(err)
				return
			}
			unlock, err := r.Lock()
			if err != nil {
				t.Error(err)
				return
			}
			defer unlock()
			if r.Add(Entry{Name: "one", PID: os.Getpid()}) == nil {
				mu.Lock()
				added++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if added != 1 {
		t.Fatalf("%d adds of one name succeeded", added)
	}
}

// TestFind pins how a verb picks its deployment.
func TestFind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	prof := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(prof, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(prof)
	a := Entry{Name: "a", Profile: real}
	b := Entry{Name: "b", Profile: "/elsewhere/b.yaml"}
	rows := []struct {
		es   []Entry
		key  string
		want string
		err  string
	}{
		{nil, "", "", "no tsd deployment is running"},
		{[]Entry{a}, "", "a", ""},
		{[]Entry{a, b}, "", "", "2 deployments are running, name one: a, b"},
		{[]Entry{a, b}, "b", "b", ""},
		{[]Entry{a, b}, prof, "a", ""},
		{[]Entry{a, b}, "c", "", `no running deployment named "c" (running: a, b)`},
		{nil, "c", "", "no tsd deployment is running"},
	}
	for _, r := range rows {
		got, err := Find(r.es, r.key)
		if r.err != "" {
			if err == nil || !strings.Contains(err.Error(), r.err) {
				t.Errorf("Find(%d, %q): %v, want %q", len(r.es), r.key, err, r.err)
			}
			continue
		}
		if err != nil || got.Name != r.want {
			t.Errorf("Find(%d, %q) = %q %v, want %q", len(r.es), r.key, got.Name, err, r.want)
		}
	}
}

// TestDeadEntriesKeptWhileRecordsExist: a daemon that is gone but whose
// Records folder still holds a file (it may have left engines) is not
// listed as live, is listed by Dead, its ports stay claimed, and it is
// removed on read once the folder is empty.
func TestDeadEntriesKeptWhileRecordsExist(t *testing.T) {
	t.Parallel()
	r, err := Open(filepath.Join(t.TempDir(), "reg"))
	if err != nil {
		t.Fatal(err)
	}
	recs := filepath.Join(t.TempDir(), "groups")
	if err := os.MkdirAll(recs, 0o700); err != nil {
		t.Fatal(err)
	}
	// A record being written (a dot file) does not count.
	if err := os.WriteFile(filepath.Join(recs, ".decode.tmp"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := cmd.Process.Pid
	for _, e := range []Entry{
		{Name: "killed", PID: gone, PIDStart: 1, Records: recs, Ports: []int{9100}},
		{Name: "norecords", PID: gone, PIDStart: 1},
	} {
		if err := r.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	if dead, _ := r.Dead(); len(dead) != 0 {
		t.Fatalf("only a dot file in the records, yet dead: %+v", dead)
	}
	if err := r.Add(Entry{Name: "killed", PID: gone, PIDStart: 1, Records: recs, Ports: []int{9100}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(recs, "decode.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := r.List()
	if err != nil || len(live) != 0 {
		t.Fatalf("live: %v %+v", err, live)
	}
	dead, err := r.Dead()
	if err != nil || len(dead) != 1 || dead[0].Name != "killed" {
		t.Fatalf("dead: %v %+v", err, dead)
	}
	if claimed, _ := r.Claimed(); !claimed[9100] {
		t.Fatalf("a dead deployment's ports are not claimed: %v", claimed)
	}
	if err := os.Remove(filepath.Join(recs, "decode.json")); err != nil {
		t.Fatal(err)
	}
	if dead, _ := r.Dead(); len(dead) != 0 {
		t.Fatalf("records gone, still dead: %+v", dead)
	}
	if m, _ := filepath.Glob(filepath.Join(r.Path(), "*.json")); len(m) != 0 {
		t.Fatalf("stale files left: %v", m)
	}
}

// TestSetPorts: an applied deployment's entry claims its new ports; an
// entry another process owns now is left alone.
func TestSetPorts(t *testing.T) {
	r, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := Entry{Name: "d", PID: os.Getpid(), Ports: []int{8000}}
	if err := r.Add(e); err != nil {
		t.Fatal(err)
	}
	if err := r.SetPorts("d", os.Getpid(), []int{8000, 12100}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetPorts("d", os.Getpid()+1, []int{1}); err != nil {
		t.Fatal(err)
	}
	claimed, err := r.Claimed()
	if err != nil || !claimed[12100] || claimed[1] {
		t.Fatalf("claimed %v %v", claimed, err)
	}
}

// Path is the registry's folder.
func (r *Registry) Path() string { return r.dir }
