package verbs

import (
	"io"

	"github.com/alecthomas/kong"
)

// Dashboard is the grammar of the dashboard's `:` line. The verbs it
// shares with the CLI are the same types the CLI's verbs embed; the rest
// (inspect, sort, split, …) move around the dashboard and have no CLI
// form. Aliases are the short forms typed on the line (`:r decode`).
type Dashboard struct {
	Restart  Restart  `cmd:"" aliases:"r" help:"restart a role (a group: rolling)"`
	Stop     StopRole `cmd:"" help:"stop a role; --now skips the drain"`
	Start    Start    `cmd:"" help:"start a stopped role"`
	Scale    Scale    `cmd:"" help:"set a profile entry's replicas"`
	Apply    Apply    `cmd:"" help:"apply the profile file, diff first"`
	Signal   Signal   `cmd:"" aliases:"kill" help:"signal a role's process group (K)"`
	Logs     Logs     `cmd:"" aliases:"l,log" help:"a role's log, the gateway's, or all"`
	Inspect  Inspect  `cmd:"" aliases:"i" help:"rank inspector of a role"`
	Describe Inspect  `cmd:"" aliases:"d,desc" help:"a role's plan: argv, env, ports"`
	Sort     Sort     `cmd:"" help:"sort the roles table (none: plan)"`
	Split    NoArgs   `cmd:"" help:"the table with the role's log (x)"`
	Events   NoArgs   `cmd:"" aliases:"ev" help:"every event kept, filterable (v)"`
	Planner  NoArgs   `cmd:"" aliases:"slo" help:"the SLO planner: targets, proposal, why (P)"`
	Ctx      Ctx      `cmd:"" aliases:"context" help:"switch deployment (none: list them)"`
	Help     NoArgs   `cmd:"" aliases:"h,?" help:"this page (?)"`
	Quit     NoArgs   `cmd:"" aliases:"q" help:"quit the dashboard (q)"`
}

// StopRole is `:stop`: one role (the whole deployment stops from q).
type StopRole struct {
	StopFlags
	Role string `arg:"" complete:"instance" help:"Role instance to stop."`
}

// Scale is `:scale ENTRY=N [--gpus G,G]`.
type Scale struct {
	ScaleFlags
	Entries []string `arg:"" placeholder:"ENTRY=N" complete:"entry" help:"Replicas per profile entry: decode=3."`
}

// Apply is `:apply [PROFILE]`.
type Apply struct {
	Profile string `arg:"" optional:"" complete:"file" help:"The edited profile (default: the file the deployment runs)."`
}

// Signal is `:signal ROLE [SIGNAL]`.
type Signal struct {
	Role   string `arg:"" complete:"instance" help:"Role instance whose process group gets the signal."`
	Signal string `arg:"" optional:"" complete:"signal" help:"TERM (default), INT, HUP, QUIT, USR1, USR2, CONT, STOP or KILL."`
}

// Logs is `:logs [ROLE]`.
type Logs struct {
	Role string `arg:"" optional:"" complete:"log" help:"A role, gateway (one access line per request) or all."`
}

// Inspect is a verb that takes one role instance.
type Inspect struct {
	Role string `arg:"" complete:"instance" help:"Role instance."`
}

// Sort is `:sort [COLUMN [asc|desc]]`.
type Sort struct {
	Column string `arg:"" optional:"" complete:"column" help:"A roles-table column, or plan."`
	Order  string `arg:"" optional:"" complete:"order" help:"asc or desc (default: the column's own)."`
}

// Ctx is `:ctx [NAME]`.
type Ctx struct {
	Name string `arg:"" optional:"" complete:"deployment" help:"The deployment to switch to."`
}

// NoArgs is a verb that takes nothing.
type NoArgs struct{}

// NewDashboard builds a parser of the `:` grammar into g. It never exits
// the process or writes anywhere (a `:` line has no --help: `:help` is a
// verb).
func NewDashboard(g *Dashboard) (*kong.Kong, error) {
	return kong.New(g,
		kong.Name(":"),
		kong.NoDefaultHelp(),
		kong.Exit(func(int) {}),
		kong.Writers(io.Discard, io.Discard),
	)
}
