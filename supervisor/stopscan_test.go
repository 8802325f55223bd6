package supervisor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The stall scan reads all of /proc only every fullEvery passes and while
// a group is young; between, it re-reads the members it knows. A stopped
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
	pass := func(want map[int]string) {
		t.Helper()
		got := s.stopped(groups)
		for pg, w := range want {
			if !strings.Contains(got[pg], w) || (w == "" && got[pg] != "") {
				t.Fatalf("pass %d: group %d: %q, want %q (all: %v)", s.n-1, pg, got[pg], w, got)
			}
		}
	}
	for range 4 { // passes 0-2: full (the groups are young); 3: full (every 3rd)
		pass(map[int]string{10: "11 (p11)", 20: ""})
	}
	proc(11, 10, "S")
	proc(12, 10, "T")                    // forked after the last full pass
	pass(map[int]string{10: "", 20: ""}) // pass 4: members only: 11 runs again, 12 not known yet
	proc(20, 20, "t")
	pass(map[int]string{10: "", 20: "20 (p20)"}) // pass 5: a known member stopped
	pass(map[int]string{10: "12 (p12)"})         // pass 6: full, 12 found
	// A group not seen before is young: its first passes are full.
	proc(30, 30, "S")
	groups[30] = true
	pass(map[int]string{30: ""})
	proc(32, 30, "T")
	pass(map[int]string{30: "32 (p32)"})
	// A member whose pid now belongs to another group is not counted.
	proc(12, 31, "T")
	for range 4 {
		pass(map[int]string{10: ""})
	}
}
