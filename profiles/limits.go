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
// deep. It scans bytes in one pass with O(1) memory: flow collections
// ([ and { outside quotes and comments) count one level each, and block
// collections count by indentation (a stack of the columns at which block
// keys and "- " entries start).
func checkLimits(file string, data []byte) *Error {
	if len(data) > MaxProfileBytes {
		return &Error{File: file, Msg: fmt.Sprintf("the file is over the %d-byte (1 MiB) limit for a profile", MaxProfileBytes)}
	}
	var (
		flow      int // open [ and { in flow context
		block     [MaxProfileDepth + 1]int
		nblock    int    // block levels open (columns in block[:nblock])
		line, col = 1, 0 // col is 1-based, of the byte at i
		lineStart = true // only spaces so far on this line
		quote     byte   // ' or " while inside a quoted scalar
		comment   bool
		prev      byte = '\n' // last non-space byte (for "a flow [ may start here")
	)
	tooDeep := func() *Error {
		return &Error{File: file, Pos: Pos{line, col}, Msg: fmt.Sprintf("nested deeper than %d levels; a profile never needs that (refused before parsing)", MaxProfileDepth)}
	}
	// openBlock records a block node starting at column c.
	openBlock := func(c int) *Error {
		for nblock > 0 && block[nblock-1] >= c {
			nblock--
		}
		if nblock+flow >= MaxProfileDepth {
			return tooDeep()
		}
		block[nblock] = c
		nblock++
		return nil
	}
	for i := 0; i < len(data); i++ {
		c := data[i]
		col++
		if c == '\n' {
			line, col, lineStart, comment, prev = line+1, 0, true, false, '\n'
			if flow == 0 {
				quote = 0 // a quoted scalar spanning lines is rare; resync
			}
			continue
		}
		if comment {
			continue
		}
		if quote != 0 {
			switch {
			case quote == '"' && c == '\\':
				i++
				col++
			case c == quote:
				if quote == '\'' && i+1 < len(data) && data[i+1] == '\'' {
					i++ // '' is an escaped quote
					col++
				} else {
					quote = 0
				}
			}
			continue
		}
		switch c {
		case ' ', '\t', '\r':
			continue
		case '#':
			if prev == '\n' || i == 0 || data[i-1] == ' ' || data[i-1] == '\t' {
				comment = true
				continue
			}
		case '\'', '"':
			quote = c
		case '[', '{':
			if flow > 0 || prev == ':' || prev == '-' || prev == ',' || prev == '?' || prev == '\n' || lineStart {
				if flow == 0 && lineStart {
					if err := openBlock(col); err != nil {
						return err
					}
				}
				flow++
				if flow+nblock > MaxProfileDepth {
					return tooDeep()
				}
			}
		case ']', '}':
			if flow > 0 {
				flow--
			}
		case '-':
			// "- " (or "-" at the end of a line) opens a block sequence entry.
			if flow == 0 && (prev == '\n' || prev == '-' && lineStart || lineStart) && (i+1 == len(data) || data[i+1] == ' ' || data[i+1] == '\n') {
				if err := openBlock(col); err != nil {
					return err
				}
				prev = '-'
				continue
			}
		default:
			if flow == 0 && lineStart {
				// A block mapping key (or a scalar) starts here.
				if err := openBlock(col); err != nil {
					return err
				}
			}
		}
		lineStart = false
		prev = c
	}
	return nil
}
