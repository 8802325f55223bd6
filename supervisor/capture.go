package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// lineSplitter cuts a byte stream into lines: "\n", "\r\n" and a lone "\r"
// (tqdm progress updates) end a line; a line longer than max is emitted in
// max-sized pieces.
type lineSplitter struct {
	max     int
	pending []byte
	lastCR  bool
}

// feed splits data and calls emit for every complete line.
func (s *lineSplitter) feed(data []byte, emit func(string)) {
	str := string(data) // one allocation per read; lines are substrings of it
	i := 0
	if s.lastCR && len(str) > 0 && str[0] == '\n' {
		i = 1
	}
	s.lastCR = false
	for i < len(str) {
		j := strings.IndexAny(str[i:], "\r\n")
		if j < 0 {
			s.addPartial(str[i:], emit)
			return
		}
		seg := str[i : i+j]
		if len(s.pending) > 0 {
			s.addPartial(seg, emit)
			emit(string(s.pending))
			s.pending = s.pending[:0]
		} else {
			for len(seg) > s.max {
				emit(seg[:s.max])
				seg = seg[s.max:]
			}
			emit(seg)
		}
		i += j
		if str[i] == '\r' {
			if i+1 < len(str) {
				if str[i+1] == '\n' {
					i++
				}
			} else {
				s.lastCR = true
			}
		}
		i++
	}
}

func (s *lineSplitter) addPartial(seg string, emit func(string)) {
	for len(s.pending)+len(seg) > s.max {
		k := s.max - len(s.pending)
		s.pending = append(s.pending, seg[:k]...)
		emit(string(s.pending))
		s.pending = s.pending[:0]
		seg = seg[k:]
	}
	s.pending = append(s.pending, seg...)
}

// flush emits an unterminated last line.
func (s *lineSplitter) flush(emit func(string)) {
	if len(s.pending) > 0 {
		emit(string(s.pending))
		s.pending = s.pending[:0]
	}
}

// rotatingFile is a role's full log on disk, rotated by size: path,
// path.1 … path.keep. Safe for concurrent use.
//
// A failing disk (full, read-only, gone) never blocks or stops the
// engine: Write always accepts the bytes, counts the lines it could not
// store, reports the failure once through onHealth, and tries again on
// the next batch; the first write that succeeds after a failure is
// preceded by a "[tsd] N lines lost" marker, and onHealth hears "".
// A failed write also closes the file, so the retry reopens it by path:
// an operator who deletes or rotates a full log frees its space (an open
// file's blocks are not freed while tsd holds it) and logging resumes in
// the new file, which starts with the marker.
//
// A log deleted or moved away while the disk is healthy (rm, an external
// logrotate without copytruncate) is reopened by path too: at most once a
// reopenCheck, a write first checks that the path still names the open
// file, and when it does not, the lines go to a new file there and
// onHealth hears a note saying so (without it they would go to the
// deleted inode until tsd's own rotation).
type rotatingFile struct {
	path string
	max  int64
	keep int
	fs   logFS
	now  func() time.Time // the clock of the path checks (time.Now)

	mu       sync.Mutex
	f        logFile
	size     int64
	failErr  error // the write error of the current outage, nil when healthy
	lost     int64 // lines not stored during the current outage
	onHealth func(problem string)
	closed   bool
	checked  time.Time // the last check that path names the open file

	health atomic.Pointer[string] // what Health returns
}

// logFile and logFS are the file layer of rotatingFile, a seam for tests
// that need a disk that fails.
type logFile interface {
	Write([]byte) (int, error)
	Close() error
}

type logFS interface {
	// Open opens path for appending (truncating when trunc), mode 0600.
	Open(path string, trunc bool) (logFile, int64, error)
	Rename(from, to string) error
	// Names reports whether path still names the open file f (false when
	// the path is gone or is another file now).
	Names(path string, f logFile) bool
}

type osFS struct{}

func (osFS) Open(path string, trunc bool) (logFile, int64, error) {
	flag := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	if trunc {
		flag = os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	}
	// Engine logs carry prompts, paths and sometimes tokens: owner only.
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, 0, err
	}
	if err := f.Chmod(0o600); err != nil { // a file left by an older tsd
		f.Close()
		return nil, 0, fmt.Errorf("chmod log file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("stat log file: %w", err)
	}
	return f, st.Size(), nil
}

func (osFS) Rename(from, to string) error { return os.Rename(from, to) }

func (osFS) Names(path string, f logFile) bool {
	of, ok := f.(*os.File)
	if !ok {
		return true
	}
	at, err := os.Stat(path)
	if err != nil {
		return false
	}
	open, err := of.Stat()
	return err != nil || os.SameFile(at, open) // an open file that cannot stat is not ours to judge
}

// reopenCheck is how often a log's path is checked against its open
// file: a stat of each a second, whatever the output rate.
const reopenCheck = time.Second

// Default log file rotation.
const (
	DefaultLogFileMax  = 100 << 20
	DefaultLogFileKeep = 3
)

func openRotating(path string, max int64, keep int) (*rotatingFile, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create log dir: %w", err)
	}
	return openRotatingFS(osFS{}, path, max, keep)
}

func openRotatingFS(fsys logFS, path string, max int64, keep int) (*rotatingFile, error) {
	if max <= 0 {
		max = DefaultLogFileMax
	}
	if keep <= 0 {
		keep = DefaultLogFileKeep
	}
	f, size, err := fsys.Open(path, false)
	if err != nil {
		return nil, fmt.Errorf("open log file: %w", err)
	}
	return &rotatingFile{path: path, max: max, keep: keep, fs: fsys, now: time.Now, f: f, size: size}, nil
}

// setOnHealth installs the callback told about outages ("" = healthy
// again). It runs on the capture goroutine and must not block.
func (w *rotatingFile) setOnHealth(fn func(problem string)) {
	w.mu.Lock()
	w.onHealth = fn
	w.mu.Unlock()
}

// Health is "" while the log file is written, else what is wrong.
func (w *rotatingFile) Health() string {
	if h := w.health.Load(); h != nil {
		return *h
	}
	return ""
}

// Write stores p or counts it as lost; it never returns an error, so the
// capture goroutine keeps draining the engine's pipe whatever the disk does.
func (w *rotatingFile) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return len(p), nil
	}
	if err := w.writeLocked(p); err != nil {
		w.failLocked(err, p)
	}
	return len(p), nil
}

func (w *rotatingFile) writeLocked(p []byte) error {
	if w.f != nil && w.failErr == nil {
		if now := w.now(); now.Sub(w.checked) >= reopenCheck {
			w.checked = now
			if !w.fs.Names(w.path, w.f) {
				// Deleted or moved away: the next lines go to a new file at
				// the path, which the operator (or logrotate) expects.
				_ = w.f.Close()
				w.f = nil
				if w.onHealth != nil {
					w.onHealth(fmt.Sprintf("log file %s was removed or moved away (rm, logrotate): reopened it by path", w.path))
				}
			}
		}
	}
	if w.f == nil {
		f, size, err := w.fs.Open(w.path, false)
		if err != nil {
			return fmt.Errorf("reopen log file: %w", err)
		}
		w.f, w.size = f, size
	}
	if w.size > 0 && w.size+int64(len(p)) > w.max {
		if err := w.rotate(); err != nil {
			return err
		}
	}
	if w.failErr != nil {
		marker := fmt.Sprintf("[tsd] %d lines lost: log file write failed (%v)\n", w.lost, w.failErr)
		n, err := w.f.Write([]byte(marker))
		w.size += int64(n)
		if err != nil {
			return err
		}
	}
	n, err := w.f.Write(p)
	w.size += int64(n)
	if err != nil {
		return partialWrite{err: err, n: n}
	}
	if w.failErr != nil {
		lost := w.lost
		w.failErr, w.lost = nil, 0
		w.setHealthLocked("", fmt.Sprintf("log file %s writable again; %d lines lost", w.path, lost))
	}
	return nil
}

func (w *rotatingFile) failLocked(err error, p []byte) {
	if w.f != nil {
		_ = w.f.Close() // the next write reopens by path
		w.f = nil
	}
	first := w.failErr == nil
	if first {
		w.failErr = err
	}
	var pw partialWrite
	if errors.As(err, &pw) {
		p = p[pw.n:] // the unwritten tail is what is lost
	}
	w.lost += int64(bytes.Count(p, []byte{'\n'}))
	if first {
		w.setHealthLocked(fmt.Sprintf("log file %s not written: %v (engine output kept in memory only; retrying)", w.path, err), "")
	}
}

// partialWrite is a write of the batch that stored its first n bytes.
type partialWrite struct {
	err error
	n   int
}

func (e partialWrite) Error() string { return e.err.Error() }
func (e partialWrite) Unwrap() error { return e.err }

func (w *rotatingFile) setHealthLocked(problem, recovered string) {
	h := problem
	w.health.Store(&h)
	if w.onHealth != nil {
		if problem != "" {
			w.onHealth(problem)
		} else {
			w.onHealth(recovered)
		}
	}
}

func (w *rotatingFile) rotate() error {
	if err := w.f.Close(); err != nil {
		w.f = nil
		return fmt.Errorf("close log for rotation: %w", err)
	}
	w.f = nil
	for i := w.keep; i >= 1; i-- {
		from := w.path
		if i > 1 {
			from = fmt.Sprintf("%s.%d", w.path, i-1)
		}
		// A missing older file is normal; anything else would show on open.
		_ = w.fs.Rename(from, fmt.Sprintf("%s.%d", w.path, i))
	}
	f, _, err := w.fs.Open(w.path, true)
	if err != nil {
		return fmt.Errorf("reopen rotated log: %w", err)
	}
	w.f, w.size = f, 0
	return nil
}

func (w *rotatingFile) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

// captureStream reads r until EOF: raw bytes go to file (if any), lines to
// the ring, and every line to onLine (which must not block). It never waits
// on a consumer, so the child writing into r is only ever paced by disk.
func captureStream(r io.Reader, ring *logRing, file io.Writer, onLine func(string)) error {
	buf := make([]byte, 256<<10)
	sp := lineSplitter{max: MaxLineBytes}
	var batch []LogLine
	var now time.Time
	emit := func(s string) {
		batch = append(batch, LogLine{Time: now, Text: s})
		if onLine != nil {
			onLine(s)
		}
	}
	var fileErr error
	for {
		n, err := r.Read(buf)
		if n > 0 {
			now = time.Now()
			if file != nil && fileErr == nil {
				if _, werr := file.Write(buf[:n]); werr != nil {
					fileErr = werr // keep capturing to the ring; report once at the end
				}
			}
			sp.feed(buf[:n], emit)
			ring.append(batch)
			batch = batch[:0]
		}
		if err != nil {
			now = time.Now()
			sp.flush(emit)
			ring.append(batch)
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				return fileErr
			}
			return fmt.Errorf("read engine output: %w", err)
		}
	}
}
