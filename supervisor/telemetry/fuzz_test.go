package telemetry

import (
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
