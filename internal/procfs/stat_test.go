package procfs

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"testing"
)

// stat lines as the kernel writes them, command names included that a
// process chose to make hard (spaces, parentheses), and the truncated or
// broken lines a parser must refuse.
func TestParseStat(t *testing.T) {
	t.Parallel()
	full := "42 (ts serve) S 1 42 40 0 -1 4194560 1 0 0 0 3 4 0 0 20 0 7 0 1234 1000 100 0\n"
	for _, c := range []struct {
		in   string
		want Stat
		bad  bool
	}{
		{in: full, want: Stat{PID: 42, Comm: "ts serve", State: 'S', PPID: 1, PGRP: 42, Session: 40, UTime: 3, STime: 4, Threads: 7, Start: 1234, RSS: 100}},
		{in: "7 (a) b) T 3 5 5 0 -1 0 0 0 0 0 10 20 0 0 20 0 1 0 99 0 2 0", want: Stat{PID: 7, Comm: "a) b", State: 'T', PPID: 3, PGRP: 5, Session: 5, UTime: 10, STime: 20, Threads: 1, Start: 99, RSS: 2}},
		{in: "8 ()) Z 1 2 3\n", want: Stat{PID: 8, Comm: ")", State: 'Z', PPID: 1, PGRP: 2, Session: 3}},
		{in: "9 (x) S 1\n", bad: true},
		{in: "(x) S 1 2 3", bad: true},
		{in: "9 x S 1 2 3", bad: true},
		{in: "9 (x) S one 2 3", bad: true},
		{in: "", bad: true},
	} {
		got, err := ParseStat([]byte(c.in))
		if c.bad {
			if err == nil {
				t.Errorf("%q: parsed as %+v, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q:\n got %+v %v\nwant %+v", c.in, got, err, c.want)
		}
	}
	st, _ := ParseStat([]byte("8 (z) Z 1 2 3"))
	if !st.Gone() || st.Stopped() {
		t.Errorf("zombie: Gone %v Stopped %v", st.Gone(), st.Stopped())
	}
}

// The table of a fake /proc: trees, children, and a pid cycle (possible
// when pids are reused during a scan) that must end.
func TestScanTree(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	stat := func(pid int, comm string, ppid int, state string) {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		line := strconv.Itoa(pid) + " (" + comm + ") " + state + " " + strconv.Itoa(ppid) + " 1 1 0 -1 4194560 1 0 0 0 3 4 0 0 20 0 7 0 " + strconv.Itoa(1000+pid) + " 1000 100 0\n"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stat(1, "init", 0, "S")
	stat(10, "ts serve) S 1 (x", 1, "S")
	stat(11, "python3", 10, "S")
	stat(12, ") )", 11, "S")
	stat(13, "dead", 10, "Z")
	stat(20, "other", 1, "S")
	stat(30, "a", 31, "S")
	stat(31, "b", 30, "S")
	for _, junk := range []string{"self", "cpuinfo"} {
		if err := os.MkdirAll(filepath.Join(root, junk), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tb, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	tree := tb.Tree(10)
	sort.Ints(tree[1:])
	if !reflect.DeepEqual(tree, []int{10, 11, 12, 13}) {
		t.Errorf("Tree(10) = %v", tree)
	}
	kids := tb.Children(10)
	if !reflect.DeepEqual(kids, []int{11}) {
		t.Errorf("live children of 10 = %v", kids)
	}
	if e := tb.Procs[12]; e.Start != 1012 || e.PPID != 11 || e.Threads != 7 || e.Comm != ") )" {
		t.Errorf("entry 12 = %+v", e)
	}
	if got := tb.Tree(30); len(got) != 2 {
		t.Errorf("Tree(30) with a cycle = %v", got)
	}
	if tb.Tree(99) != nil {
		t.Error("Tree of a missing root")
	}
	if _, ok := ReadStat(root, 99); ok {
		t.Error("ReadStat of a missing pid")
	}
}

// This process's own stat, read from the real /proc.
func TestReadStatSelf(t *testing.T) {
	t.Parallel()
	st, ok := ReadStat("", os.Getpid())
	if !ok || st.PID != os.Getpid() || st.PPID != os.Getppid() || st.Start == 0 || st.RSSBytes() == 0 || st.Threads < 1 {
		t.Fatalf("self: %+v %v", st, ok)
	}
}

// /proc/PID/stat holds a command name the process chose itself.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte("42 (ts serve) S 1 42 42 0 -1 4194560 1 0 0 0 3 4 0 0 20 0 7 0 1234 1000 100 0\n"))
	f.Add([]byte("42 ()) S 1 2 3\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseStat(b)
		if err == nil && (len(st.Comm) > len(b) || st.State == 0) {
			t.Fatalf("%q parsed as %+v", b, st)
		}
	})
}
