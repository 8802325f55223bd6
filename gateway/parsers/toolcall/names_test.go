package toolcall

import (
	"testing"

	"github.com/tsd-project/tsd/profiles/parsernames"
)

// The profile schema accepts the names of profiles/parsernames: each name
// or alias there is a registered format here (or one of the one-pass
// parsers), every registered format is one of its canonical names, and
// every name builds a parser.
func TestRegistryIsTheNameTable(t *testing.T) {
	for k := range registry {
		if c, ok := parsernames.Tool(k); !ok || c != k {
			t.Errorf("format %q: the name table has it as %q, %v", k, c, ok)
		}
	}
	for _, n := range parsernames.ToolNames() {
		c, _ := parsernames.Tool(n)
		if _, ok := registry[c]; !ok && c != "passthrough" && c != "harmony" && c != "inkling" {
			t.Errorf("%s (%s): no such format", n, c)
		}
		if _, err := New(n, Options{}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}
