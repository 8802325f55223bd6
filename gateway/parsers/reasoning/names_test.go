package reasoning

import (
	"testing"

	"github.com/tsd-project/tsd/profiles/parsernames"
)

// The profile schema accepts the names of profiles/parsernames: each name
// or alias there is a think-block family here, every family is one of its
// canonical names, and every name builds a parser.
func TestFamiliesAreTheNameTable(t *testing.T) {
	for k := range families {
		if c, ok := parsernames.Reasoning(k); !ok || c != k {
			t.Errorf("family %q: the name table has it as %q, %v", k, c, ok)
		}
	}
	for _, n := range parsernames.ReasoningNames() {
		c, _ := parsernames.Reasoning(n)
		if _, ok := families[c]; !ok && c != "passthrough" {
			t.Errorf("%s (%s): no such family", n, c)
		}
		if _, err := New(n, Options{}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}
