package profiles

import (
	"fmt"
	"io"
	"os"
)

// Limits on a profile file, checked before the YAML parser sees it: the
// parser's memory grows much faster than the input on deeply nested flow
// collections (a 200 KB file of `[` took gigabytes), and no real profile
// comes near either limit.
const (
	MaxProfileBytes = 1 << 20 // 1 MiB
	MaxProfileDepth = 64      // nested mappings and sequences
)

// readProfile reads at most MaxProfileBytes+1 bytes of path, so a huge
// file is refused without being read whole.
func readProfile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxProfileBytes+1))
}

// checkLimits refuses input over the size cap or nested deeper than
// MaxProfileDepth, naming the line and column of the node that goes too
// deep. It scans bytes in one pass with O(depth) memory: flow collections
// ([ and { outside quotes and comments) count one level each, and block
// collections count by indentation (a stack of the columns at which block
// keys and "- " entries start).
func checkLimits(file string, data []byte) *Error {
	if len(data) > MaxProfileBytes {
		return &Error{File: file, Msg: fmt.Sprintf("the file is over the %d-byte (1 MiB) limit for a profile", MaxProfileBytes)}
	}
	s := depthScan{file: file, data: data, line: 1, lineStart: true, prev: '\n'}
	return s.run()
}

// depthScan is checkLimits' state while it walks the bytes.
type depthScan struct {
	file      string
	data      []byte
	i         int // index of the byte being looked at
	line, col int // 1-based position of that byte
	flow      int // open [ and { in flow context
	block     [MaxProfileDepth + 1]int
	nblock    int  // block levels open (their columns in block[:nblock])
	lineStart bool // only spaces (and "- ") so far on this line
	prev      byte // last significant byte ('\n' at a line start)
}

func (s *depthScan) run() *Error {
	for ; s.i < len(s.data); s.i++ {
		c := s.data[s.i]
		s.col++
		var err *Error
		switch c {
		case '\n':
			s.line, s.col, s.lineStart, s.prev = s.line+1, 0, true, '\n'
		case ' ', '\t', '\r':
		case '#':
			if s.i == 0 || s.data[s.i-1] == ' ' || s.data[s.i-1] == '\t' {
				s.skipTo(func(b byte) bool { return b == '\n' })
				continue
			}
			s.plain(c)
		case '\'', '"':
			if s.flow == 0 && s.lineStart {
				err = s.openBlock()
			}
			s.skipQuoted(c)
			s.lineStart, s.prev = false, c
		case '[', '{':
			err = s.openFlow(c)
		case ']', '}':
			if s.flow > 0 {
				s.flow--
			}
			s.lineStart, s.prev = false, c
		case '-':
			err = s.dash()
		default:
			if s.flow == 0 && s.lineStart {
				err = s.openBlock() // a block mapping key (or a scalar) starts here
			}
			s.plain(c)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *depthScan) plain(c byte) { s.lineStart, s.prev = false, c }

// skipTo advances to just before the first byte stop accepts (or the end),
// keeping the column in step.
func (s *depthScan) skipTo(stop func(byte) bool) {
	for s.i+1 < len(s.data) && !stop(s.data[s.i+1]) {
		s.i++
		s.col++
	}
}

// skipQuoted skips a quoted scalar up to its closing quote or the end of
// the line (a quoted scalar spanning lines is rare in a profile; resyncing
// at the line end keeps the scan simple and never under-counts by more
// than that scalar's brackets).
func (s *depthScan) skipQuoted(q byte) {
	for s.i+1 < len(s.data) && s.data[s.i+1] != '\n' {
		s.i++
		s.col++
		c := s.data[s.i]
		switch {
		case q == '"' && c == '\\' && s.i+1 < len(s.data) && s.data[s.i+1] != '\n':
			s.i++
			s.col++
		case c == q && q == '\'' && s.i+1 < len(s.data) && s.data[s.i+1] == '\'':
			s.i++ // '' is an escaped quote
			s.col++
		case c == q:
			return
		}
	}
}

// openFlow counts a [ or { that starts a flow collection (not one inside
// a plain scalar such as a[b).
func (s *depthScan) openFlow(c byte) *Error {
	starts := s.flow > 0 || s.lineStart || s.prev == ':' || s.prev == '-' || s.prev == ',' || s.prev == '?'
	if !starts {
		s.plain(c)
		return nil
	}
	if s.flow == 0 && s.lineStart {
		if err := s.openBlock(); err != nil {
			return err
		}
	}
	s.flow++
	s.plain(c)
	if s.flow+s.nblock > MaxProfileDepth {
		return s.tooDeep()
	}
	return nil
}

// dash opens a block sequence entry for "- " (or "-" ending a line) at a
// line start; any other dash is part of a scalar.
func (s *depthScan) dash() *Error {
	next := byte('\n')
	if s.i+1 < len(s.data) {
		next = s.data[s.i+1]
	}
	if s.flow > 0 || !s.lineStart || (next != ' ' && next != '\n') {
		s.plain('-')
		return nil
	}
	s.prev = '-' // still at the line start: "- - x" nests
	return s.openBlock()
}

// openBlock records a block node starting at the current column.
func (s *depthScan) openBlock() *Error {
	for s.nblock > 0 && s.block[s.nblock-1] >= s.col {
		s.nblock--
	}
	if s.nblock+s.flow >= MaxProfileDepth {
		return s.tooDeep()
	}
	s.block[s.nblock] = s.col
	s.nblock++
	return nil
}

func (s *depthScan) tooDeep() *Error {
	return &Error{File: s.file, Pos: Pos{s.line, s.col}, Msg: fmt.Sprintf("nested deeper than %d levels; a profile never needs that (refused before parsing)", MaxProfileDepth)}
}
