package profiles

import (
	"fmt"
	"sort"
	"strings"
)

// Pos is a place in a profile file (1-based line and column).
type Pos struct {
	Line int `json:"line"`
	Col  int `json:"col"`
}

// Error is one problem with a profile, pinned to the key that causes it.
type Error struct {
	File string // the profile path as the user gave it
	Pos  Pos    // zero when the problem has no place in the file
	Key  string // key path, e.g. roles[1].gpus; empty for file-level problems
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Pos.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Pos.Line, e.Pos.Col)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found, in file order. A nil or empty Errors means
// the profile is fine; use Err to get a plain error value.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Err returns nil when there are no errors, else es itself.
func (es Errors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// sorted orders errors by position so users read them top to bottom; errors
// without a position come last in the order they were found.
func (es Errors) sorted() Errors {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i].Pos, es[j].Pos
		if (a.Line == 0) != (b.Line == 0) {
			return b.Line == 0
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return es
}

// didYouMean returns ` (did you mean "x"?)` when one of the candidates is
// close to got, else "".
func didYouMean(got string, candidates []string) string {
	best, bestD := "", 1<<30
	for _, c := range candidates {
		d := editDistance(strings.ToLower(got), strings.ToLower(c))
		if d < bestD {
			best, bestD = c, d
		}
	}
	limit := 2
	if len(got) <= 3 {
		limit = 1
	}
	if len(got) >= 10 {
		limit = 3
	}
	if best == "" || bestD > limit {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance over bytes; keys are ASCII.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 20 // nothing sensible is that long; keep fuzzing cheap
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// DidYouMean is didYouMean for other packages' names (role names in the
// CLI): ` (did you mean "x"?)` when one candidate is close to got, else "".
func DidYouMean(got string, candidates []string) string { return didYouMean(got, candidates) }
