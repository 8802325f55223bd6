package supervisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// floodScript writes n bytes of 1000-byte lines as fast as it can.
func floodScript(n int) string {
	return `yes "$(printf '%0999d' 0)" | head -c ` + itoa(n)
}

func itoa(n int) string { return fmtInt(int64(n)) }

func fmtInt(n int64) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// peakHeap samples HeapInuse until stop is closed and returns the maximum.
func peakHeap(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var peak uint64
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak {
				peak = ms.HeapInuse
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// TestLogFloodNeverBlocksAndStaysBounded: 100 MB of output with a log
// subscriber that never reads: the child runs to completion, the ring stays
// within its bounds, the heap stays far below the output size, and the log
// file holds every byte.
func TestLogFloodNeverBlocksAndStaysBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100 MB")
	}
	const total = 100 << 20
	role := shRole("decode", profiles.KindDecode, floodScript(total))
	role.Restart.Policy = PolicyNo
	stop := make(chan struct{})
	peak := peakHeap(stop)
	f := newFixture(t, nil, nil, role)
	_, _, cancel, err := f.sup.SubscribeLogs("decode") // never read
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	r := f.wait("decode", "stopped after a clean exit", state(snapshot.StateStopped))
	close(stop)
	p := <-peak
	if r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("child did not finish cleanly: %+v", r)
	}
	lines, bytes := f.sup.roster.current().members[0].a.ring.sizes()
	if lines > DefaultLogLines || bytes > DefaultLogBytes {
		t.Fatalf("ring holds %d lines / %d bytes", lines, bytes)
	}
	fi, err := os.Stat(f.sup.Plan().Roles[0].LogFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < total {
		t.Fatalf("log file holds %d bytes, want ≥ %d", fi.Size(), total)
	}
	t.Logf("peak heap in use %.1f MiB for %d MiB of output; ring %d lines", float64(p)/(1<<20), total>>20, lines)
	if p > 96<<20 {
		t.Fatalf("peak heap %d MiB: capture is not bounded", p>>20)
	}
}

// BenchmarkLogCapture: a child writing 100 MB of 1000-byte lines as fast as
// it can, to /dev/null directly ("direct") and through the guardian into
// tsd's capture (ring + rotating log file). Reports MB/s and peak heap.
func BenchmarkLogCapture(b *testing.B) {
	const total = 100 << 20
	script := floodScript(total)
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(total)
		for i := 0; i < b.N; i++ {
			cmd := exec.Command("sh", "-c", script+" > /dev/null")
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, mode := range []string{"captured-ring-only", "captured-ring-and-file", "captured-file-and-milestones"} {
		withFile := mode != "captured-ring-only"
		match := mode == "captured-file-and-milestones"
		name := mode
		b.Run(name, func(b *testing.B) {
			exe, _ := os.Executable()
			dir := b.TempDir()
			b.SetBytes(total)
			stop := make(chan struct{})
			peak := peakHeap(stop)
			var lines atomic.Uint64
			for i := 0; i < b.N; i++ {
				ring := newLogRing("bench", DefaultLogLines, DefaultLogBytes)
				var file *rotatingFile
				if withFile {
					var err error
					file, err = openRotating(filepath.Join(dir, "bench.log"), DefaultLogFileMax, 1)
					if err != nil {
						b.Fatal(err)
					}
				}
				spec := procSpec{Role: "bench", Argv: []string{"sh", "-c", script}, Env: map[string]string{"TSD_TEST_GUARD": "1"},
					Grace: time.Second, GuardExe: exe}
				p, err := startProcess(spec, func(out *os.File) error {
					hook := func(string) { lines.Add(1) }
					if match {
						hook = func(l string) {
							if _, ok := MatchMilestone(l); ok {
								lines.Add(1)
							}
						}
					}
					if file != nil {
						return captureStream(out, ring, file, hook)
					}
					return captureStream(out, ring, nil, hook)
				})
				if err != nil {
					b.Fatal(err)
				}
				<-p.done
				if p.exit.Code != 0 {
					b.Fatalf("child exit %v", p.exit)
				}
				if file != nil {
					file.Close()
				}
			}
			b.StopTimer()
			close(stop)
			b.ReportMetric(float64(<-peak)/(1<<20), "peak-heap-MiB")
		})
	}
}
