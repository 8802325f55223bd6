package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tsd-project/tsd/internal/procfs"
)

// cpuTicks is a process's user+system time in clock ticks (USER_HZ)
// from /proc/PID/stat.
func cpuTicks(pid int) (int64, error) {
	st, ok := procfs.ReadStat("", pid)
	if !ok {
		return 0, fmt.Errorf("read cpu of %d: no readable /proc/%d/stat", pid, pid)
	}
	return int64(st.CPUTicks()), nil
}

func ticksToDur(t int64) time.Duration { return time.Duration(t) * time.Second / procfs.UserHZ }

// childrenOf lists the pids whose parent is pid (tsd's guardians).
func childrenOf(pid int) []int {
	t, err := procfs.Scan("")
	if err != nil {
		return nil
	}
	return t.Children(pid)
}

// server is a child process whose stdout lines are kept.
type server struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	stamp []time.Time
	grew  chan struct{}
	done  chan struct{}
}

func startServer(dir string, argv []string) (*server, error) {
	s := &server{grew: make(chan struct{}), done: make(chan struct{})}
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Dir = dir
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s.cmd.Stderr = s.cmd.Stdout
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", strings.Join(argv, " "), err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			s.stamp = append(s.stamp, time.Now())
			close(s.grew)
			s.grew = make(chan struct{})
			s.mu.Unlock()
		}
		_ = s.cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// pid of the server itself: taskset execs its command, so the pid stays.
func (s *server) pid() int { return s.cmd.Process.Pid }

// waitLine waits for a line at index ≥ from containing every part; it
// returns the index after it and when it was read.
func (s *server) waitLine(from int, limit time.Duration, parts ...string) (int, time.Time, error) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		for i := from; i < len(s.lines); i++ {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(s.lines[i], p)
			}
			if ok {
				at := s.stamp[i]
				s.mu.Unlock()
				return i + 1, at, nil
			}
		}
		grew := s.grew
		n := len(s.lines)
		s.mu.Unlock()
		select {
		case <-grew:
		case <-s.done:
			s.mu.Lock()
			more := len(s.lines) > n
			s.mu.Unlock()
			if !more {
				return 0, time.Time{}, fmt.Errorf("process exited before printing %q; output:\n%s", parts, s.tail(30))
			}
		case <-deadline.C:
			return 0, time.Time{}, fmt.Errorf("no line with %q within %v; output:\n%s", parts, limit, s.tail(30))
		}
	}
}

func (s *server) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lines)
}

func (s *server) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines[max(0, len(s.lines)-n):], "\n")
}

// stop ends the server: SIGINT (tsd's orderly stop), SIGKILL to its
// group after limit.
func (s *server) stop(limit time.Duration) {
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(limit):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls /readiness until 200: a driver, not a test, so a short
// poll on a deadline is the simple way to see the gateway route.
func waitReady(base string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		resp, err := http.Get(base + "/readiness")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s/readiness not 200 within %v", base, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
