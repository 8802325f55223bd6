// Package verbs declares, once, the words of the verbs that act on a
// running deployment: kong grammars that the CLI (cmd/tsd) and the
// dashboard's `:` line (tui) both parse, the kind of word each positional
// takes (a role, a deployment, a profile entry…), and the completion both
// offer from those declarations (a shell's Tab through `tsd _complete`,
// the `:` line's Tab). The CLI's verb types embed the shared ones below and
// add what only a command line has (which deployment, --wait); the
// dashboard's grammar (Dashboard) is built from the same types, so a flag
// or an argument added here reaches both, and their completion, at once.
package verbs

// Kinds of positional word, named in a positional's `complete:"…"` tag. A
// tag may join kinds with "|" (either fits); a slice positional lists one
// kind per position, separated by commas. What each kind's words are is
// the Source's to say (the daemon for a shell, the snapshot for the
// dashboard); KindFile means file names.
const (
	KindRole       = "role"       // a role instance or a replica group
	KindInstance   = "instance"   // one role instance
	KindLog        = "log"        // a log source: a role, or the gateway's access log
	KindEntry      = "entry"      // a profile entry, as ENTRY=N
	KindDeployment = "deployment" // a running (or dead) deployment's name
	KindFile       = "file"       // a file: a profile
	KindColumn     = "column"     // a roles-table column (the dashboard's :sort)
	KindOrder      = "order"      // asc or desc
	KindSignal     = "signal"     // a signal name (TERM, INT, …)
)

// Restart is what `tsd restart` and `:restart` take.
type Restart struct {
	Rolling bool   `help:"Restart the instances of ROLE (an instance, a replica group or a kind) one at a time, each ready again before the next; waits until done."`
	Now     bool   `help:"Skip the drain: requests in flight on the role end at once with an error."`
	Role    string `arg:"" complete:"role" help:"Role instance to restart (e.g. decode, decode-1)."`
}

// Start is what `tsd start` and `:start` take.
type Start struct {
	Role string `arg:"" complete:"instance" help:"Role instance to start (a stopped, failed or backing-off one)."`
}

// StopFlags are the flags `tsd stop` and `:stop` share (the CLI's ROLE is
// optional, the whole deployment stopping without one; the dashboard's is
// not).
type StopFlags struct {
	Now bool `help:"Skip the drain: requests in flight on the role end at once with an error."`
}

// ScaleFlags are the flags `tsd scale` and `:scale` share.
type ScaleFlags struct {
	GPUs string `name:"gpus" placeholder:"G,G" help:"GPUs for the new replicas, comma-separated, tp × dp of them per replica in order (default: GPUs no role uses)."`
}

// Signals are the signals `:signal` may send, by the names `kill -l`
// prints; the first is the default.
var Signals = []string{"TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "CONT", "STOP", "KILL"}
