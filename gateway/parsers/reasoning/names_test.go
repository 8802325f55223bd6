package reasoning

import (
	"maps"
	"slices"
	"testing"

	"github.com/tsd-project/tsd/profiles/parsernames"
)

// The profile schema accepts the names of profiles/parsernames: each
// canonical name there is one think-block family here and no family is
// missing from it, and every name or alias it lists builds a parser.
func TestFamiliesAreTheNameTable(t *testing.T) {
	if got, want := slices.Sorted(maps.Keys(families)), parsernames.ReasoningParsers(); !slices.Equal(got, want) {
		t.Fatalf("families %v, the name table's parsers %v", got, want)
	}
	for _, n := range parsernames.ReasoningNames() {
		if _, err := New(n, Options{}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}
