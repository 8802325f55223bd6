package tui

import (
	"hash/fnv"
	"strings"

	"charm.land/lipgloss/v2"
)

// logLevel is how serious a log line reads: engines (Python logging),
// the gateway (slog) and tsd's own notes each spell levels their way.
type logLevel uint8

const (
	levelNone logLevel = iota
	levelInfo
	levelWarning
	levelError
)

// levelMarks are the spellings looked for, most serious first; the first
// found wins. Python logging writes " - ERROR - ", slog "level=ERROR",
// tracebacks and Go panics have no level word at all.
var levelMarks = []struct {
	mark  string
	level logLevel
}{
	{" - ERROR - ", levelError},
	{" - CRITICAL - ", levelError},
	{"level=ERROR", levelError},
	{"Traceback (most recent call last)", levelError},
	{"panic: ", levelError},
	{" ERROR ", levelError},
	{"ERROR:", levelError},
	{" - WARNING - ", levelWarning},
	{"level=WARN", levelWarning},
	{" WARNING ", levelWarning},
	{"WARNING:", levelWarning},
	{" - INFO - ", levelInfo},
	{"level=INFO", levelInfo},
	{" INFO ", levelInfo},
}

// lineLevel reads a sanitized line's level.
func lineLevel(text string) logLevel {
	for _, m := range levelMarks {
		if strings.Contains(text, m.mark) {
			return m.level
		}
	}
	return levelNone
}

// noteMarks are the words of tsd's own notes that tell of a failure: a
// crash (a non-zero exit or a signal), a failed start, a stall, a group
// that would not end. Such a note is an error line, so e and E stop at it
// (tsd's crash note is often the clearest line of a crash).
var noteMarks = []string{"crashed", "failed", "stalled", "(SIGKILL)", "(SIGSEGV)", "(SIGABRT)", "(SIGTERM)", "(SIGINT)",
	"signal:", "was SIGKILLed", "still has live processes", "start failed"}

// noteLevel reads a note of tsd's (a line marked Note): an error when it
// tells of a failure, else nothing.
func noteLevel(text string) logLevel {
	for _, m := range noteMarks {
		if strings.Contains(text, m) {
			return levelError
		}
	}
	if i := strings.Index(text, "exit "); i >= 0 {
		rest := text[i+len("exit "):]
		if rest != "" && rest[0] >= '1' && rest[0] <= '9' {
			return levelError // "exit 137 …", not "exit 0"
		}
	}
	return levelNone
}

// roleColours are the merged view's tag colours (the 16 basic ANSI
// colours, so the terminal's theme decides the shades), one per role.
var roleColours = []string{"6", "3", "5", "2", "4", "14", "11", "13", "10", "12"}

// roleStyle gives a role the same colour in every view and every run: a
// hash of its name, not its position, picks it.
func roleStyle(role string) lipgloss.Style {
	h := fnv.New32a()
	h.Write([]byte(role))
	return lipgloss.NewStyle().Foreground(lipgloss.Color(roleColours[h.Sum32()%uint32(len(roleColours))]))
}
