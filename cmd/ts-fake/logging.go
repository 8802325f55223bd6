package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// logger writes TokenSpeed-shaped lines to stderr (docs/protocol.md §10.3): the
// "colourful" shape, always wrapped in ANSI colour codes, for most modules,
// and the plain root shape for zmq_msgpack / output_processor lines. prefix
// is " ATTN TP RANK n" in scheduler processes and empty in the launcher.
type logger struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	now    func() time.Time
}

var stderrMu sync.Mutex

func newLogger(prefix string) *logger {
	return &logger{mu: &stderrMu, w: os.Stderr, prefix: prefix, now: time.Now}
}

const (
	ansiGrey    = "\x1b[38;20m"
	ansiYellow  = "\x1b[33;20m"
	ansiRed     = "\x1b[31;20m"
	ansiBoldRed = "\x1b[31;1m"
	ansiReset   = "\x1b[0m"
)

func (l *logger) write(s string) {
	l.mu.Lock()
	_, _ = io.WriteString(l.w, s)
	l.mu.Unlock()
}

// colourful writes `ESC[..m[ts,ms prefix] - LEVEL - msg (file:line)ESC[0m`.
func (l *logger) colourful(level, src, format string, args ...any) {
	colour := ansiGrey
	switch level {
	case "WARNING":
		colour = ansiYellow
	case "ERROR":
		colour = ansiRed
	case "CRITICAL":
		colour = ansiBoldRed
	}
	ts := l.now().Format("2006-01-02 15:04:05,000")
	l.write(fmt.Sprintf("%s[%s%s] - %s - %s (%s)%s\n", colour, ts, l.prefix, level, fmt.Sprintf(format, args...), src, ansiReset))
}

func (l *logger) info(src, format string, args ...any) { l.colourful("INFO", src, format, args...) }
func (l *logger) warn(src, format string, args ...any) { l.colourful("WARNING", src, format, args...) }
func (l *logger) errorf(src, format string, args ...any) {
	l.colourful("ERROR", src, format, args...)
}

// plain writes the root-logger shape `[ts prefix] msg` (no level, no colour).
func (l *logger) plain(format string, args ...any) {
	ts := l.now().Format("2006-01-02 15:04:05")
	l.write(fmt.Sprintf("[%s%s] %s\n", ts, l.prefix, fmt.Sprintf(format, args...)))
}

// raw writes text as is (tqdm-style carriage-return progress).
func (l *logger) raw(s string) { l.write(s) }
