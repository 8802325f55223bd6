package supervisor

import (
	"sync"
	"time"

	"github.com/tsd-project/tsd/profiles"
)

// GatewayLogSource is the log name of the embedded gateway: `tsd logs
// gateway`, the dashboard's log page and SaveLog know it beside the roles
// (no role may take the name, profiles.GatewayLogName). The merged view
// (role "") stays the engines' own output: the gateway writes one access
// line per request, which would bury them under load.
const GatewayLogSource = profiles.GatewayLogName

// LogSource is a log tsd writes itself instead of capturing it from a
// child: the embedded gateway's (its warnings and one access line per
// request). It is an io.Writer for the gateway's logger; what it is given
// goes to a rotated file (mode 0600, like a role's log) and, split into
// lines, to a bounded ring that readers pull from, exactly as a role's
// output does (docs/architecture.md §S3): a writer never waits for a reader.
type LogSource struct {
	ring *logRing
	file *rotatingFile // nil: memory only

	mu sync.Mutex // one Write at a time: the splitter keeps a partial line
	sp lineSplitter
}

// LogSourceOptions bound a LogSource; zero values are the role defaults.
type LogSourceOptions struct {
	Lines, Bytes int    // ring bounds (DefaultLogLines, DefaultLogBytes)
	FileMax      int64  // rotate past this size (DefaultLogFileMax)
	FileKeep     int    // rotated files kept (DefaultLogFileKeep)
	Path         string // the log file; "" keeps the log in memory only
}

// NewLogSource opens the source named name (its log file too, when o.Path
// is set, creating its directory).
func NewLogSource(name string, o LogSourceOptions) (*LogSource, error) {
	l := &LogSource{ring: newLogRing(name, o.Lines, o.Bytes), sp: lineSplitter{max: MaxLineBytes}}
	if o.Path != "" {
		f, err := openRotating(o.Path, o.FileMax, o.FileKeep)
		if err != nil {
			return nil, err
		}
		l.file = f
	}
	return l, nil
}

// Write stores p in the file and its complete lines in the ring. It never
// fails: a disk problem is the file's health (reported as an event), and
// the gateway must not stop serving because its log cannot be written.
func (l *LogSource) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil {
		_, _ = l.file.Write(p)
	}
	now := time.Now()
	var batch []LogLine
	l.sp.feed(p, func(s string) { batch = append(batch, LogLine{Time: now, Text: s}) })
	l.ring.append(batch)
	return len(p), nil
}

// Close keeps a last partial line and closes the file; later writes reach
// the ring only.
func (l *LogSource) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	var batch []LogLine
	l.sp.flush(func(s string) { batch = append(batch, LogLine{Time: now, Text: s}) })
	l.ring.append(batch)
	if l.file == nil {
		return nil
	}
	return l.file.Close()
}
