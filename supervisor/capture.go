package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
type rotatingFile struct {
	path string
	max  int64
	keep int

	mu   sync.Mutex
	f    *os.File
	size int64
}

// Default log file rotation.
const (
	DefaultLogFileMax  = 100 << 20
	DefaultLogFileKeep = 3
)

func openRotating(path string, max int64, keep int) (*rotatingFile, error) {
	if max <= 0 {
		max = DefaultLogFileMax
	}
	if keep <= 0 {
		keep = DefaultLogFileKeep
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create log dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat log file: %w", err)
	}
	return &rotatingFile{path: path, max: max, keep: keep, f: f, size: st.Size()}, nil
}

func (w *rotatingFile) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return 0, errors.New("log file closed")
	}
	if w.size > 0 && w.size+int64(len(p)) > w.max {
		if err := w.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := w.f.Write(p)
	w.size += int64(n)
	return n, err
}

func (w *rotatingFile) rotate() error {
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("close log for rotation: %w", err)
	}
	for i := w.keep; i >= 1; i-- {
		from := w.path
		if i > 1 {
			from = fmt.Sprintf("%s.%d", w.path, i-1)
		}
		// A missing older file is normal; anything else would show on open.
		_ = os.Rename(from, fmt.Sprintf("%s.%d", w.path, i))
	}
	f, err := os.OpenFile(w.path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		w.f = nil
		return fmt.Errorf("reopen rotated log: %w", err)
	}
	w.f, w.size = f, 0
	return nil
}

func (w *rotatingFile) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
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
