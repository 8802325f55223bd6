// Package testports hands tests TCP ports that no other test is handed at
// the same time — in this process or in another test binary that `go test
// ./...` runs beside it — and that tsd's planner never picks by itself.
//
// A port is reserved by an exclusive flock on a file named after it in a
// per-user folder under the temp dir, held until the test ends. Ports come
// from 4100-8899: below the planner's first bootstrap port (8998) and its
// dist-init and handshake zones (10000-32767, see profiles/planner.go), and
// far below the kernel's ephemeral range, so neither a planner in a tsd
// under test nor an outgoing connection can take a port between the
// reservation and the moment the process under test binds it.
package testports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	lo = 4100
	hi = 8900 // exclusive
)

// Port returns a free port reserved for t until t (and its cleanups) end.
func Port(t testing.TB) int {
	t.Helper()
	return Range(t, 1)
}

// Range returns the first of n consecutive free ports, all reserved for t.
func Range(t testing.TB, n int) int {
	t.Helper()
	dir := lockDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatalf("testports: make %s: %v", dir, err)
	}
	for range 2000 {
		p := lo + rand.IntN(hi-lo-n)
		locks, ok := reserve(dir, p, n)
		if !ok {
			continue
		}
		t.Cleanup(func() {
			for _, f := range locks {
				f.Close() // closing the file drops its flock
			}
		})
		return p
	}
	t.Fatalf("testports: no %d free consecutive port(s) in %d-%d", n, lo, hi-1)
	return 0
}

func lockDir() string {
	return filepath.Join(os.TempDir(), "tsd-test-ports-"+strconv.Itoa(os.Getuid()))
}

func lockPath(p int) string { return filepath.Join(lockDir(), strconv.Itoa(p)) }

// reserve locks p..p+n-1 and checks each can be bound now; on any failure
// it releases what it took.
func reserve(dir string, p, n int) ([]*os.File, bool) {
	var locks []*os.File
	release := func() {
		for _, f := range locks {
			f.Close()
		}
	}
	for q := p; q < p+n; q++ {
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(q)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			release()
			return nil, false
		}
		// flock belongs to the open file: a second open of the same file,
		// even in this process, cannot take it.
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			release()
			return nil, false
		}
		locks = append(locks, f)
		if !bindable(q) {
			release()
			return nil, false
		}
	}
	return locks, true
}

// bindable: something outside the tests (or a process of an earlier test
// still exiting) may hold the port.
func bindable(p int) bool {
	for _, host := range []string{"127.0.0.1", "0.0.0.0"} {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// Addr is 127.0.0.1 with a reserved port.
func Addr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", Port(t))
}
