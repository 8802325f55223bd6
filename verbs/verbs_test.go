package verbs

import (
	"slices"
	"strings"
	"testing"
)

// Pins the `:` grammar: every verb and alias parses into its words, and
// the synopsis of each verb is read from its declaration.
func TestDashboardParses(t *testing.T) {
	for _, c := range []struct {
		line  string
		check func(g *Dashboard) bool
	}{
		{"restart --now --rolling decode", func(g *Dashboard) bool { return g.Restart.Now && g.Restart.Rolling && g.Restart.Role == "decode" }},
		{"r decode-0", func(g *Dashboard) bool { return g.Restart.Role == "decode-0" && !g.Restart.Now }},
		{"stop decode-0 --now", func(g *Dashboard) bool { return g.Stop.Now && g.Stop.Role == "decode-0" }},
		{"scale decode=3 --gpus 4,5", func(g *Dashboard) bool {
			return slices.Equal(g.Scale.Entries, []string{"decode=3"}) && g.Scale.GPUs == "4,5"
		}},
		{"kill decode-0 USR1", func(g *Dashboard) bool { return g.Signal.Role == "decode-0" && g.Signal.Signal == "USR1" }},
		{"apply", func(g *Dashboard) bool { return g.Apply.Profile == "" }},
		{"sort reqs asc", func(g *Dashboard) bool { return g.Sort.Column == "reqs" && g.Sort.Order == "asc" }},
		{"ctx other", func(g *Dashboard) bool { return g.Ctx.Name == "other" }},
		{"d prefill-0", func(g *Dashboard) bool { return g.Describe.Role == "prefill-0" }},
	} {
		var g Dashboard
		k, err := NewDashboard(&g)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.Parse(strings.Fields(c.line)); err != nil || !c.check(&g) {
			t.Errorf("%q: %+v, %v", c.line, g, err)
		}
	}
	var g Dashboard
	k, _ := NewDashboard(&g)
	for verb, want := range map[string]string{
		"restart": "restart [--rolling] [--now] ROLE",
		"scale":   "scale [--gpus G,G] ENTRY=N…",
		"signal":  "signal ROLE [SIGNAL]",
		"quit":    "quit",
	} {
		if got := Usage(Find(k.Model.Node, verb)); got != want {
			t.Errorf("usage of %s: %q, want %q", verb, got, want)
		}
	}
	if Find(k.Model.Node, "l").Name != "logs" || Find(k.Model.Node, "nope") != nil {
		t.Error("aliases")
	}
}

type words map[string][]string

func (w words) Words(kind string) []string { return w[kind] }

// Pins Complete: each positional's kinds ("a|b" either, "a,b" one per
// position of a list), enums, files for an untagged positional, and the
// verb's flags not given yet.
func TestComplete(t *testing.T) {
	var g Dashboard
	k, _ := NewDashboard(&g)
	src := words{KindRole: {"decode-0", "decode"}, KindInstance: {"decode-0"}, KindSignal: Signals, KindEntry: {"decode="},
		KindLog: {"decode-0", "gateway"}, KindDeployment: {"alpha"}}
	for _, c := range []struct {
		words []string
		want  string
		flags string
		files bool
	}{
		{nil, "", "", false},
		{[]string{"restart"}, "decode-0 decode", "--rolling --now", false},
		{[]string{"restart", "--now"}, "decode-0 decode", "--rolling", false},
		{[]string{"restart", "decode-0"}, "", "--rolling --now", false},
		{[]string{"signal", "decode-0"}, strings.Join(Signals, " "), "", false},
		{[]string{"scale", "--gpus", "4"}, "decode=", "", false},
		{[]string{"scale", "decode=2"}, "decode=", "--gpus", false},
		{[]string{"apply"}, "", "", true},
		{[]string{"ctx"}, "alpha", "", false},
		{[]string{"quit"}, "", "", false},
	} {
		got := Complete(k.Model.Node, c.words, src)
		if strings.Join(got.Words, " ") != c.want || strings.Join(got.Flags, " ") != c.flags || got.Files != c.files {
			t.Errorf("%q: %+v, want %q flags %q files %v", c.words, got, c.want, c.flags, c.files)
		}
	}
}
