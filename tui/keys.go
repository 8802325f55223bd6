package tui

import (
	"charm.land/bubbles/v2/key"
)

// KeyMap is the dashboard's one set of key bindings, in groups: what works
// everywhere, what answers a prompt, moving around, the role keys, the
// logs keys. Pages match keys against it and the help bar and the `?`
// page are generated from it, so what the screen says is what the keys
// do. The groups are embedded: keys.Up, keys.Restart.
type KeyMap struct {
	GlobalKeys
	PromptKeys
	MoveKeys
	RoleKeys
	LogKeys
}

// GlobalKeys work on every page (unless a page reads typed text).
type GlobalKeys struct {
	Quit    key.Binding
	Help    key.Binding
	Back    key.Binding
	Test    key.Binding
	Command key.Binding
	Planner key.Binding // the SLO planner's page (planner.go)
}

// PromptKeys answer a confirm prompt. Every key means one thing in every
// prompt (docs/architecture.md §12.3); d and s mean other things on the
// overview, so they are listed under the prompts, never as global.
type PromptKeys struct {
	Yes     key.Binding
	No      key.Binding
	Now     key.Binding // do it without the drain (the CLI's --now)
	Detach  key.Binding // the quit prompt: leave, the deployment keeps running
	StopAll key.Binding // the quit prompt: stop every role and the daemon
}

// MoveKeys move a selection or scroll, on every page.
type MoveKeys struct {
	Up       key.Binding
	Down     key.Binding
	PageUp   key.Binding
	PageDown key.Binding
	Top      key.Binding
	Bottom   key.Binding
}

// RoleKeys act on the selected role (overview, inspector, describe).
type RoleKeys struct {
	Inspect    key.Binding
	Logs       key.Binding
	MergedLogs key.Binding
	Restart    key.Binding
	StopStart  key.Binding
	RestartAll key.Binding
	Signal     key.Binding
	Expand     key.Binding
	Collapse   key.Binding
	Describe   key.Binding
	Split      key.Binding
	RoleFilter key.Binding
	Sort       key.Binding
	// SortReverse flips the order Sort chose.
	SortReverse key.Binding
	Events      key.Binding
}

// LogKeys are the logs page's.
type LogKeys struct {
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
		GlobalKeys: GlobalKeys{
			Quit:    b([]string{"q", "ctrl+c"}, "q", "quit (stops every role)"),
			Help:    b([]string{"?"}, "?", "help"),
			Back:    b([]string{"esc"}, "esc", "back"),
			Test:    b([]string{"t"}, "t", "test request"),
			Command: b([]string{":"}, ":", "command line (tab, ↑/↓ history)"),
			Planner: b([]string{"P"}, "P", "SLO planner (again: back)"),
		},
		PromptKeys: PromptKeys{
			Yes:     b([]string{"y", "Y"}, "y", "confirm"),
			No:      b([]string{"n", "N", "esc"}, "n", "cancel"),
			Now:     b([]string{"!"}, "!", "now (skip the drain)"),
			Detach:  b([]string{"d", "D"}, "d", "detach (keep running)"),
			StopAll: b([]string{"s", "S"}, "s", "stop every role"),
		},
		MoveKeys: MoveKeys{
			Up:       b([]string{"up", "k"}, "↑/k", "up"),
			Down:     b([]string{"down", "j"}, "↓/j", "down"),
			PageUp:   b([]string{"pgup", "ctrl+b"}, "pgup", "page up"),
			PageDown: b([]string{"pgdown", "ctrl+f", "space"}, "pgdn", "page down"),
			Top:      b([]string{"home", "g"}, "g", "top"),
			Bottom:   b([]string{"end", "G"}, "G", "bottom"),
		},
		RoleKeys: RoleKeys{
			Inspect:     b([]string{"enter"}, "enter", "inspect ranks"),
			Logs:        b([]string{"l"}, "l", "logs"),
			MergedLogs:  b([]string{"L"}, "L", "all logs"),
			Restart:     b([]string{"r"}, "r", "restart role"),
			StopStart:   b([]string{"s"}, "s", "stop/start role"),
			RestartAll:  b([]string{"R"}, "R", "rolling restart"),
			Signal:      b([]string{"K"}, "K", "send a signal (asks first)"),
			Expand:      b([]string{"right"}, "→", "open replicas/ranks"),
			Collapse:    b([]string{"left"}, "←", "close"),
			Describe:    b([]string{"d"}, "d", "describe (argv, env, ports)"),
			Split:       b([]string{"x"}, "x", "split (table + live log)"),
			RoleFilter:  b([]string{"/"}, "/", "filter roles"),
			Sort:        b([]string{"o"}, "o", "sort by the next column"),
			SortReverse: b([]string{"O"}, "O", "reverse the sort"),
			Events:      b([]string{"v"}, "v", "events"),
		},
		LogKeys: LogKeys{
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
		},
	}
}

// controlKeys are the keys that act on the deployment: off on a
// read-only dashboard, where pressing one says why.
func (k *KeyMap) controlKeys() []*key.Binding {
	return []*key.Binding{&k.Restart, &k.StopStart, &k.RestartAll, &k.Signal}
}

// helpSection is one titled column of the `?` page.
type helpSection struct {
	title    string
	bindings []key.Binding
}

// helpSections is the `?` page's keys: one section per page (and one for
// the prompts), from the same bindings the pages match. Moving keys work
// on every page and are listed once.
func helpSections(k KeyMap) []helpSection {
	return []helpSection{
		{"global", []key.Binding{k.Quit, k.Help, k.Back, k.Test, k.Command, k.Planner}},
		{"moving (every page)", []key.Binding{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom}},
		{"answering a prompt", []key.Binding{k.Yes, k.No, k.Now, k.Detach, k.StopAll}},
		{"overview", []key.Binding{k.Inspect, k.Expand, k.Collapse, k.Logs, k.MergedLogs, k.Describe, k.Split,
			k.Restart, k.StopStart, k.RestartAll, k.Signal, k.RoleFilter, k.Sort, k.SortReverse, k.Events}},
		{"inspector · describe", []key.Binding{k.Logs, k.Describe, k.Inspect, k.Restart, k.StopStart, k.RestartAll, k.Signal}},
		{"events", []key.Binding{k.Filter}},
		{"logs", []key.Binding{k.Find, k.Next, k.Prev, k.Filter, k.Inverse, k.Follow, k.Wrap, k.Timestamps,
			k.Left, k.Right, k.NextError, k.PrevError, k.Save, k.NextSource, k.PrevSource, k.MergedLogs}},
	}
}
