package telemetry

import (
	"os"
	"path/filepath"
	"testing"
)

// nvidia-smi output is another program's text: no line of it may crash the
// poller, and whatever parses must keep its invariants.
func FuzzParseSMI(f *testing.F) {
	f.Add([]byte(smiTwoH200))
	f.Add([]byte(smiTwoApps))
	f.Add([]byte("0, GPU-y, NVIDIA Foo, Rev 2, 5, 1, 2, 3.5, 40, 1000\n"))
	f.Add([]byte("No running processes found\n"))
	f.Add([]byte("\"0, GPU-\"x, N, [N/A], -1, 1e400, NaN, Inf, 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		gpus, err := parseSMIGPUs(b)
		if err == nil {
			for _, g := range gpus {
				if g.PowerW < 0 || g.UtilPct < 0 || g.TempC < 0 {
					t.Fatalf("negative reading from %q: %+v", b, g)
				}
			}
		}
		_, _ = parseSMIApps(b)
	})
}

// /proc/PID/stat holds a command name the process chose itself.
func FuzzReadStat(f *testing.F) {
	f.Add([]byte("42 (ts serve) S 1 42 42 0 -1 4194560 1 0 0 0 3 4 0 0 20 0 7 0 1234 1000 100 0\n"))
	f.Add([]byte("42 ()) S 1 2 3\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "42"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "42", "stat"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		s := newProcScanner(root)
		if err := s.scan(); err != nil {
			t.Fatal(err)
		}
		_ = s.tree(42)
	})
}
