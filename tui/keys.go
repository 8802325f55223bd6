package tui

import "charm.land/bubbles/v2/key"

// KeyMap is the dashboard's one set of key bindings. Pages match keys
// against it and the help bar and the `?` page are generated from it, so
// what the screen says is what the keys do.
type KeyMap struct {
	// Global.
	Quit    key.Binding
	Help    key.Binding
	Back    key.Binding
	Test    key.Binding
	Yes     key.Binding
	No      key.Binding
	Command key.Binding
	Sort    key.Binding
	Events  key.Binding
	Planner key.Binding

	// Answers of a confirm prompt besides Yes and No: each means one
	// thing in every prompt.
	Now     key.Binding // do it without the drain (the CLI's --now)
	Detach  key.Binding // the quit prompt: leave, the deployment keeps running
	StopAll key.Binding // the quit prompt: stop every role and the daemon

	// Moving around.
	Up       key.Binding
	Down     key.Binding
	PageUp   key.Binding
	PageDown key.Binding
	Top      key.Binding
	Bottom   key.Binding

	// Roles (overview and inspector).
	Inspect    key.Binding
	Logs       key.Binding
	MergedLogs key.Binding
	Restart    key.Binding
	StopStart  key.Binding
	RestartAll key.Binding
	Expand     key.Binding
	Collapse   key.Binding
	Describe   key.Binding
	Split      key.Binding
	RoleFilter key.Binding
	// SortReverse flips the order o chose.
	SortReverse key.Binding

	// Logs page.
	Find       key.Binding
	Next       key.Binding
	Prev       key.Binding
	Filter     key.Binding
	Inverse    key.Binding
	Follow     key.Binding
	Wrap       key.Binding
	Save       key.Binding
	Timestamps key.Binding
	Left       key.Binding
	Right      key.Binding
	NextError  key.Binding
	PrevError  key.Binding
	NextSource key.Binding
	PrevSource key.Binding
}

// DefaultKeyMap returns the bindings documented in the help page.
func DefaultKeyMap() KeyMap {
	b := func(keys []string, help, desc string) key.Binding {
		return key.NewBinding(key.WithKeys(keys...), key.WithHelp(help, desc))
	}
	return KeyMap{
		Quit: b([]string{"q", "ctrl+c"}, "q", "quit (stops every role)"),
		Help: b([]string{"?"}, "?", "help"),
		Back: b([]string{"esc"}, "esc", "back"),
		Test: b([]string{"t"}, "t", "test request"),
		Yes:  b([]string{"y", "Y"}, "y", "confirm"),
		No:   b([]string{"n", "N", "esc"}, "n", "cancel"),

		Command: b([]string{":"}, ":", "command line (tab completes, ↑/↓ history)"),
		Sort:    b([]string{"o"}, "o", "sort by the next column"),
		Events:  b([]string{"v"}, "v", "events"),
		Planner: b([]string{"P"}, "P", "SLO planner"),

		Now:     b([]string{"!"}, "!", "now (skip the drain)"),
		Detach:  b([]string{"d", "D"}, "d", "detach (keep running)"),
		StopAll: b([]string{"s", "S"}, "s", "stop every role"),

		Up:       b([]string{"up", "k"}, "↑/k", "up"),
		Down:     b([]string{"down", "j"}, "↓/j", "down"),
		PageUp:   b([]string{"pgup", "ctrl+b"}, "pgup", "page up"),
		PageDown: b([]string{"pgdown", "ctrl+f", "space"}, "pgdn", "page down"),
		Top:      b([]string{"home", "g"}, "g", "top"),
		Bottom:   b([]string{"end", "G"}, "G", "bottom"),

		Inspect:    b([]string{"enter"}, "enter", "inspect ranks"),
		Logs:       b([]string{"l"}, "l", "logs"),
		MergedLogs: b([]string{"L"}, "L", "all logs"),
		Restart:    b([]string{"r"}, "r", "restart role"),
		StopStart:  b([]string{"s"}, "s", "stop/start role"),
		RestartAll: b([]string{"R"}, "R", "rolling restart"),
		Expand:     b([]string{"right"}, "→", "open replicas/ranks"),
		Collapse:   b([]string{"left"}, "←", "close"),
		Describe:   b([]string{"d"}, "d", "describe (argv, env, ports, restart policy)"),
		Split:      b([]string{"x"}, "x", "split (table + live log)"),
		RoleFilter: b([]string{"/"}, "/", "filter roles"),

		SortReverse: b([]string{"O"}, "O", "reverse the sort"),

		Find:       b([]string{"/"}, "/", "find"),
		Next:       b([]string{"n"}, "n", "next match"),
		Prev:       b([]string{"N"}, "N", "prev match"),
		Filter:     b([]string{"&"}, "&", "filter (regex)"),
		Inverse:    b([]string{"!"}, "!", "invert filter"),
		Follow:     b([]string{"f"}, "f", "follow"),
		Wrap:       b([]string{"w"}, "w", "wrap"),
		Save:       b([]string{"S"}, "S", "save full log"),
		Timestamps: b([]string{"T"}, "T", "timestamps"),
		Left:       b([]string{"left"}, "←", "scroll left"),
		Right:      b([]string{"right"}, "→", "scroll right"),
		NextError:  b([]string{"e"}, "e", "next error"),
		PrevError:  b([]string{"E"}, "E", "prev error"),
		NextSource: b([]string{"tab"}, "tab", "next role"),
		PrevSource: b([]string{"shift+tab"}, "shift+tab", "prev role"),
	}
}

// helpSections is the `?` page: one titled column per page, built from the
// same bindings the pages match.
func (k KeyMap) helpSections() []helpSection {
	return []helpSection{
		{"global", []key.Binding{k.Quit, k.Help, k.Back, k.Test, k.Command, k.Yes, k.No, k.Now, k.Detach, k.StopAll}},
		{"overview", []key.Binding{k.Up, k.Down, k.Inspect, k.Expand, k.Collapse, k.Logs, k.MergedLogs, k.Describe, k.Split,
			k.Restart, k.StopStart, k.RestartAll, k.RoleFilter, k.Sort, k.SortReverse, k.Events, k.Planner}},
		{"events", []key.Binding{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom, k.Filter}},
		{"planner", []key.Binding{k.Up, k.Down, k.Top, k.Events}},
		{"inspector", []key.Binding{k.Up, k.Down, k.Logs, k.Describe, k.Restart, k.StopStart, k.RestartAll}},
		{"logs", []key.Binding{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom, k.Find, k.Next, k.Prev,
			k.Filter, k.Inverse, k.Follow, k.Wrap, k.Timestamps, k.Left, k.Right, k.NextError, k.PrevError,
			k.Save, k.NextSource, k.PrevSource, k.MergedLogs}},
	}
}

type helpSection struct {
	title    string
	bindings []key.Binding
}
