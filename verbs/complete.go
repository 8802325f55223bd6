package verbs

import (
	"strings"

	"github.com/alecthomas/kong"
)

// Source says which words of a kind fit now: a shell asks the running
// daemon and the profile beside it, the dashboard its snapshot.
type Source interface {
	Words(kind string) []string
}

// Completion is what fits where a word is being typed.
type Completion struct {
	// Words are the positional words that fit, from the Source or the
	// positional's enum, in order, each once.
	Words []string
	// Flags are the verb's flags not given yet ("--now"): the `:` line
	// offers them beside the words; a shell script completes flags itself.
	Flags []string
	// Files: file names fit too.
	Files bool
}

// Complete says what fits after words (the words typed before the one
// being completed, the verb first) in the grammar app. Flags and their
// values are skipped; the verb itself (no words yet) is Verbs' to list.
func Complete(app *kong.Node, words []string, src Source) Completion {
	node := app
	var pos []string // positional words typed for the verb
	given := map[string]bool{}
	valueFlags := map[string]bool{}
	addFlags := func(n *kong.Node) {
		for _, f := range n.Flags {
			if !f.IsBool() && !f.IsCounter() {
				valueFlags["--"+f.Name] = true
				if f.Short != 0 {
					valueFlags["-"+string(f.Short)] = true
				}
			}
		}
	}
	addFlags(node)
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case w == "=": // bash splits --since=10m at the '='
			i++
			continue
		case strings.HasPrefix(w, "-"):
			name, _, _ := strings.Cut(w, "=")
			given[name] = true
			if valueFlags[w] && !strings.Contains(w, "=") && (i+1 >= len(words) || words[i+1] != "=") {
				i++ // the flag's value
			}
			continue
		}
		if child := childCommand(node, w); child != nil && len(pos) == 0 {
			node = child
			addFlags(node)
			continue
		}
		pos = append(pos, w)
	}
	if node == app {
		return Completion{}
	}
	var out Completion
	for _, f := range node.Flags {
		if !f.Hidden && !given["--"+f.Name] && (f.Short == 0 || !given["-"+string(f.Short)]) {
			out.Flags = append(out.Flags, "--"+f.Name)
		}
	}
	if subs := visibleChildren(node); len(subs) > 0 {
		if len(pos) == 0 {
			out.Words = subs
		}
		return out
	}
	arg, kinds, ok := positionalAt(node, len(pos))
	if !ok {
		return out
	}
	if len(kinds) == 0 {
		if e := arg.EnumSlice(); len(e) > 0 && arg.Enum != "" {
			out.Words = e
			return out
		}
		out.Files = true // a positional that names no kind takes a file
		return out
	}
	seen := map[string]bool{}
	for _, k := range kinds {
		if k == KindFile {
			out.Files = true
			continue
		}
		for _, w := range src.Words(k) {
			if !seen[w] {
				seen[w] = true
				out.Words = append(out.Words, w)
			}
		}
	}
	return out
}

// positionalAt is the positional that the p-th positional word fills and
// the kinds its `complete` tag names there; ok is false past the last.
func positionalAt(n *kong.Node, p int) (*kong.Positional, []string, bool) {
	i := 0
	for _, arg := range n.Positional {
		per := strings.Split(arg.Tag.Get("complete"), ",")
		if arg.Tag.Get("complete") == "" {
			per = nil
		}
		if !arg.IsSlice() {
			if i == p {
				return arg, kindsOf(per, 0), true
			}
			i++
			continue
		}
		// A slice takes the rest: one kind per position when several are
		// listed (and nothing past them), else its one kind for them all.
		k := p - i
		if len(per) > 1 && k >= len(per) {
			return nil, nil, false
		}
		return arg, kindsOf(per, min(k, max(len(per)-1, 0))), true
	}
	return nil, nil, false
}

func kindsOf(per []string, i int) []string {
	if i >= len(per) {
		return nil
	}
	return strings.Split(per[i], "|")
}

// Verbs are the grammar's visible verbs, in declaration order.
func Verbs(app *kong.Node) []string { return visibleChildren(app) }

// Find is the verb that name (or one of its aliases) selects in app.
func Find(app *kong.Node, name string) *kong.Node { return childCommand(app, name) }

func childCommand(n *kong.Node, name string) *kong.Node {
	for _, c := range n.Children {
		if c.Type != kong.CommandNode {
			continue
		}
		if c.Name == name {
			return c
		}
		for _, a := range c.Aliases {
			if a == name {
				return c
			}
		}
	}
	return nil
}

func visibleChildren(n *kong.Node) []string {
	var out []string
	for _, c := range n.Children {
		if c.Type == kong.CommandNode && !c.Hidden {
			out = append(out, c.Name)
		}
	}
	return out
}

// Usage is a verb's one-line synopsis from its grammar, as the `:` line's
// help shows it: "restart [--rolling] [--now] ROLE".
func Usage(n *kong.Node) string {
	parts := []string{n.Name}
	for _, f := range n.Flags {
		if f.Hidden {
			continue
		}
		if f.IsBool() {
			parts = append(parts, "[--"+f.Name+"]")
		} else {
			parts = append(parts, "[--"+f.Name+" "+strings.ToUpper(f.FormatPlaceHolder())+"]")
		}
	}
	for _, a := range n.Positional {
		w := Placeholder(a)
		if !a.Required {
			w = "[" + w + "]"
		}
		parts = append(parts, w)
	}
	return strings.Join(parts, " ")
}

// Placeholder is how a synopsis names a positional: its placeholder tag
// (ENTRY=N), else its name in capitals, "…" after a list.
func Placeholder(a *kong.Positional) string {
	w := a.Tag.PlaceHolder
	if w == "" {
		w = strings.ToUpper(a.Name)
	}
	if a.IsSlice() {
		w += "…"
	}
	return w
}
