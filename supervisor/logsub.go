package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LogBatchInterval is the shortest gap between two batches to one log
// subscriber (≤ 60 batches a second).
const LogBatchInterval = time.Second / 60

// SubscribeLogs returns a role's current ring (GatewayLogSource: the
// gateway's; role "" merges every role, without the gateway's,
// ordered by time; "decode-0,decode-1" merges those, a replica group as
// `tsd logs decode` shows it) and a channel of new lines in batches, at most 60 a
// second. A subscriber that falls behind by more than the ring gets a note
// line saying how many lines it missed; the engines never wait for it. The
// channel is closed after cancel.
func (s *Supervisor) SubscribeLogs(role string) (backlog []LogLine, batches <-chan []LogLine, cancel func(), err error) {
	var rings []*logRing
	// Every role: the roster's now, and each one an apply adds later.
	var ros *roster
	if role == "" {
		ros = s.roster.current()
		for _, m := range ros.members {
			rings = append(rings, m.a.ring)
		}
	} else {
		for _, name := range strings.Split(role, ",") {
			r, err := s.ringOf(name)
			if err != nil {
				return nil, nil, nil, err
			}
			rings = append(rings, r)
		}
	}
	poke := make(chan struct{}, 1)
	var unwatch []func()
	cursors := make([]uint64, len(rings))
	for i, r := range rings {
		// Register before reading the backlog so no line falls in between.
		unwatch = append(unwatch, r.watchChan(poke))
		l, next, _ := r.since(0, 0)
		backlog = append(backlog, l...)
		cursors[i] = next
	}
	if len(rings) > 1 {
		sortLines(backlog)
	}
	out := make(chan []LogLine, 4)
	stop := make(chan struct{})
	var once sync.Once
	cancel = func() { once.Do(func() { close(stop) }) }
	go func() {
		defer close(out)
		defer func() {
			for _, u := range unwatch {
				u()
			}
		}()
		last := time.Time{}
		var changed <-chan struct{}
		if ros != nil {
			changed = ros.superseded
		}
		for {
			select {
			case <-poke:
			case <-changed:
				// Follow the roster: a role added since gets its whole
				// ring in the next batch.
				ros = s.roster.current()
				changed = ros.superseded
				for _, m := range ros.members {
					if !hasRing(rings, m.a.ring) {
						rings = append(rings, m.a.ring)
						cursors = append(cursors, 0)
						unwatch = append(unwatch, m.a.ring.watchChan(poke))
					}
				}
			case <-stop:
				return
			}
			if wait := LogBatchInterval - time.Since(last); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-stop:
					t.Stop()
					return
				}
			}
			var batch []LogLine
			for i, r := range rings {
				l, next, dropped := r.since(cursors[i], 0)
				if dropped > 0 {
					batch = append(batch, LogLine{Time: time.Now(), Role: r.name(), Note: true,
						Text: fmt.Sprintf("[tsd] %d lines skipped (reader too slow)", dropped)})
				}
				batch = append(batch, l...)
				cursors[i] = next
			}
			if len(batch) == 0 {
				continue
			}
			if len(rings) > 1 {
				sortLines(batch)
			}
			last = time.Now()
			select {
			case out <- batch:
			case <-stop:
				return
			}
		}
	}()
	return backlog, out, cancel, nil
}

func hasRing(rings []*logRing, r *logRing) bool {
	for _, o := range rings {
		if o == r {
			return true
		}
	}
	return false
}

func sortLines(l []LogLine) {
	sort.SliceStable(l, func(i, j int) bool { return l[i].Time.Before(l[j].Time) })
}

// watchChan registers a caller-owned poke channel.
func (r *logRing) watchChan(ch chan struct{}) func() {
	r.mu.Lock()
	r.subs[ch] = struct{}{}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.subs, ch)
		r.mu.Unlock()
	}
}

// Logs returns a copy of one role's whole ring (or the gateway's,
// GatewayLogSource), oldest first.
func (s *Supervisor) Logs(role string) ([]LogLine, error) {
	r, err := s.ringOf(role)
	if err != nil {
		return nil, err
	}
	return r.all(), nil
}

// ringOf is the ring of a role or of the gateway's log.
func (s *Supervisor) ringOf(name string) (*logRing, error) {
	if name == GatewayLogSource {
		return s.gwLog.ring, nil
	}
	m, ok := s.roster.current().find(name)
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownRole, name)
	}
	return m.a.ring, nil
}

// SaveLog writes one role's ring ("" = every role, merged in time order and
// prefixed with the role) to path, ANSI stripped, and returns the path.
func (s *Supervisor) SaveLog(role, path string) (string, error) {
	var lines []LogLine
	if role == "" {
		for _, m := range s.roster.current().members {
			lines = append(lines, m.a.ring.all()...)
		}
		sortLines(lines)
	} else {
		l, err := s.Logs(role)
		if err != nil {
			return "", err
		}
		lines = l
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("save log: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("save log: %w", err)
	}
	w := bufio.NewWriter(f)
	for _, l := range lines {
		if role == "" {
			w.WriteString(l.Role)
			w.WriteString(" | ")
		}
		w.WriteString(StripANSI(l.Text))
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return "", fmt.Errorf("save log: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("save log: %w", err)
	}
	return path, nil
}

// killGroupNow sends SIGKILL to a process group, ignoring "already gone".
func killGroupNow(pgid int) {
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = err // nothing more to do: the actor's verification reports leftovers
	}
}
