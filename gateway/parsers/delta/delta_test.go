package delta

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestHeldPrefix(t *testing.T) {
	for _, c := range []struct {
		s    string
		m    []string
		want int
	}{
		{"abc<tool", []string{"<tool_call>"}, 5},
		{"abc<tool_call>", []string{"<tool_call>"}, 0}, // whole markers are found, not held
		{"abc", []string{"<tool_call>"}, 0},
		{"x<", []string{"<a>", "<bb>"}, 1},
		{"x<b", []string{"<a>", "<bb>"}, 2},
		{"x\xef\xbd", []string{"<｜tool｜>"}, 0},
		{"x<\xef\xbd", []string{"<｜tool｜>"}, 3},
	} {
		if got := HeldPrefix(c.s, c.m...); got != c.want {
			t.Errorf("HeldPrefix(%q, %q) = %d, want %d", c.s, c.m, got, c.want)
		}
	}
}

func TestFirstOf(t *testing.T) {
	if i, m := FirstOf("xx<a><ab>", "<ab>", "<a>"); i != 2 || m != "<a>" {
		t.Errorf("%d %q", i, m)
	}
	if i, m := FirstOf("x<abc", "<a", "<abc"); i != 1 || m != "<abc" {
		t.Errorf("tie goes to the longer marker: %d %q", i, m)
	}
	if i, _ := FirstOf("x", "", "y"); i != -1 {
		t.Error("no marker")
	}
}

// Whitespace decisions do not depend on chunking.
func TestSpacer(t *testing.T) {
	for _, c := range []struct {
		lead   bool
		chunks []string
		keep   bool
		want   string
	}{
		{false, []string{"a ", " b", "  "}, true, "a  b  "},
		{false, []string{"a ", " b", "  "}, false, "a  b"},
		{true, []string{"\n\n", " a", "\n"}, true, "a\n"},
		{true, []string{"  "}, true, ""},
	} {
		w := Spacer{Lead: c.lead}
		got := ""
		for _, ch := range c.chunks {
			got += w.Feed(ch)
		}
		got += w.Flush(c.keep)
		if got != c.want {
			t.Errorf("%+v: %q", c, got)
		}
	}
}

func TestCollectAndMerge(t *testing.T) {
	ds := []Delta{
		{Kind: Reasoning, Text: "r1"}, {Kind: Reasoning, Text: "r2"}, {Kind: Content, Text: ""}, {Kind: Content, Text: "c"},
		{Kind: ToolCall, Call: &CallDelta{Index: 0, ID: "id0", Name: "f"}}, {Kind: ToolCall, Call: &CallDelta{Index: 0, Arguments: `{"a"`}},
		{Kind: ToolCall, Call: &CallDelta{Index: 1, ID: "id1", Name: "g"}}, {Kind: ToolCall, Call: &CallDelta{Index: 0, Arguments: `:1}`}},
	}
	want := Result{Content: "c", Reasoning: "r1r2", Calls: []Call{{0, "id0", "f", `{"a":1}`}, {1, "id1", "g", ""}}}
	if got := Collect(ds); !reflect.DeepEqual(got, want) {
		t.Errorf("Collect = %+v", got)
	}
	m := Merge(ds)
	if len(m) != 6 || m[0].Text != "r1r2" || m[1].Text != "c" {
		t.Errorf("Merge = %+v", m)
	}
	if !reflect.DeepEqual(Collect(m), want) {
		t.Error("Merge changed the result")
	}
}

// The OpenAI shapes: a call's first streaming delta has id, type and
// name; later ones only the argument fragment.
func TestOpenAIShapes(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{CallDelta{Index: 1, ID: "call_x", Name: "f"}.OpenAI(), `{"index":1,"id":"call_x","type":"function","function":{"name":"f","arguments":""}}`},
		{CallDelta{Index: 1, Arguments: `{"a":1}`}.OpenAI(), `{"index":1,"function":{"arguments":"{\"a\":1}"}}`},
		{Call{Index: 0, ID: "call_y", Name: "g", Arguments: "{}"}.OpenAI(), `{"id":"call_y","type":"function","function":{"name":"g","arguments":"{}"}}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("%s, want %s (%v)", b, c.want, err)
		}
	}
}
