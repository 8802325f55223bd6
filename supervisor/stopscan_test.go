package supervisor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The stall scan reads all of /proc only every fullEvery passes or when it
// meets a new group; between, it re-reads the members it knows. A stopped
// member is seen at once; a process forked since the last full pass is
// seen at the next one.
func TestStopScanReadsMembersBetweenFullPasses(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	proc := func(pid, pgrp int, state string) {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		line := strconv.Itoa(pid) + " (p" + strconv.Itoa(pid) + ") " + state + " 1 " + strconv.Itoa(pgrp) + " 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 1 0\n"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	proc(10, 10, "S")
	proc(11, 10, "T")
	proc(20, 20, "S")
	proc(99, 99, "T") // not ours
	s := newStopScan(root, 3)
	groups := map[int]bool{10: true, 20: true}

	got := s.stopped(groups) // pass 0: full
	if !strings.Contains(got[10], "11 (p11)") || got[20] != "" || len(got) != 1 {
		t.Fatalf("pass 0: %v", got)
	}
	proc(11, 10, "S")
	proc(12, 10, "T") // forked after the full pass
	if got := s.stopped(groups); len(got) != 0 {
		t.Fatalf("pass 1 (members only): %v, want nothing: 11 runs again, 12 is not known yet", got)
	}
	proc(20, 20, "t")
	if got := s.stopped(groups); !strings.Contains(got[20], "20 (p20)") || len(got) != 1 {
		t.Fatalf("pass 2 (members only): %v, want 20 stopped", got)
	}
	if got := s.stopped(groups); !strings.Contains(got[10], "12 (p12)") {
		t.Fatalf("pass 3 (full): %v, want 12 found", got)
	}
	// A group not seen before forces a full pass.
	proc(30, 30, "T")
	groups[30] = true
	if got := s.stopped(groups); !strings.Contains(got[30], "30 (p30)") {
		t.Fatalf("new group: %v", got)
	}
	// A member whose pid now belongs to another group is not counted.
	proc(31, 31, "S")
	proc(12, 31, "T")
	if got := s.stopped(groups); strings.Contains(got[10], "12") {
		t.Fatalf("reused pid counted for its old group: %v", got)
	}
}
