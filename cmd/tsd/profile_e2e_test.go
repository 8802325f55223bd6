package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// privateProfile copies profiles/examples/NAME into a fresh directory with
// each old → new replacement applied in order, and returns the copy's path.
// Every old text must occur, so an edited example fails here loudly rather
// than silently running on the shared default ports and directories. The
// copy's relative run_dir and log_dir land in that directory too.
func privateProfile(t *testing.T, name string, repl ...[2]string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "profiles", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	prof := string(src)
	for _, r := range repl {
		if !strings.Contains(prof, r[0]) {
			t.Fatalf("%s changed: no %q", name, r[0])
		}
		prof = strings.ReplaceAll(prof, r[0], r[1])
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// spacedFreePorts returns n currently free loopback ports at least 16
// apart, so a dist-init cluster (D … D+max(6, 5+dp)) planted on one never
// covers another.
func spacedFreePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	for len(out) < n {
		p := freePort(t)
		ok := true
		for _, q := range out {
			if p-q < 16 && q-p < 16 {
				ok = false
			}
		}
		if ok {
			out = append(out, p)
		}
	}
	return out
}

func absPath(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(rel)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
