package toolcall

import (
	"maps"
	"slices"
	"testing"

	"github.com/tsd-project/tsd/profiles/parsernames"
)

// The profile schema accepts the names of profiles/parsernames: each
// canonical name there is one registered format here and no format is
// missing from it, and every name or alias it lists builds a parser.
func TestRegistryIsTheNameTable(t *testing.T) {
	if got, want := slices.Sorted(maps.Keys(registry)), parsernames.ToolParsers(); !slices.Equal(got, want) {
		t.Fatalf("registered formats %v, the name table's parsers %v", got, want)
	}
	for _, n := range parsernames.ToolNames() {
		if _, err := New(n, Options{}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}
