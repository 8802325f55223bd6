// Command testsummary reads `go test -json` events (the file gotestsum's
// --jsonfile writes) and prints every skipped test with its reason, then one
// closing line: "N passed, N failed, N skipped". A run whose parity or
// client tests skipped because a dependency was unreachable therefore says
// so at the end of `make test`, instead of passing quietly.
//
// Usage: go run ./cmd/testsummary FILE.json
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type key struct{ pkg, test string }

// Summary is what one run amounts to.
type Summary struct {
	Passed, Failed int
	Skips          []Skip
}

// Skip is one skipped test and the reason it gave.
type Skip struct {
	Package, Test, Reason string
}

// Read folds a stream of test2json events into a Summary. Only tests count
// (package-level events do not); a test's reason is the text it logged
// besides the runner's own === and --- lines.
func Read(r io.Reader) (Summary, error) {
	var s Summary
	out := map[key][]string{}
	failedIn := map[string]bool{} // packages with a failed test
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			return s, fmt.Errorf("decode test event: %w", err)
		}
		if e.Test == "" {
			// A package that fails with no failed test did not build, or
			// its TestMain failed: that is a failure too.
			if e.Action == "fail" && !failedIn[e.Package] {
				s.Failed++
				failedIn[e.Package] = true
			}
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "output":
			t := strings.TrimSpace(e.Output)
			if t != "" && !strings.HasPrefix(t, "=== ") && !strings.HasPrefix(t, "--- ") {
				out[k] = append(out[k], t)
			}
		case "pass":
			s.Passed++
			delete(out, k)
		case "fail":
			s.Failed++
			failedIn[e.Package] = true
			delete(out, k)
		case "skip":
			s.Skips = append(s.Skips, Skip{Package: e.Package, Test: e.Test, Reason: reason(out[k])})
			delete(out, k)
		}
	}
	if err := sc.Err(); err != nil {
		return s, fmt.Errorf("read test events: %w", err)
	}
	sort.Slice(s.Skips, func(i, j int) bool {
		if s.Skips[i].Package != s.Skips[j].Package {
			return s.Skips[i].Package < s.Skips[j].Package
		}
		return s.Skips[i].Test < s.Skips[j].Test
	})
	return s, nil
}

// reason keeps the last lines a test logged (t.Skip's message is last),
// without the file:line prefix testing adds.
func reason(lines []string) string {
	if len(lines) == 0 {
		return "(no reason given)"
	}
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	for i, l := range lines {
		if c := strings.Index(l, ": "); c > 0 && strings.Contains(l[:c], ".go:") {
			lines[i] = l[c+2:]
		}
	}
	return strings.Join(lines, " / ")
}

// Write prints the skip list and the closing line.
func Write(w io.Writer, s Summary) {
	if len(s.Skips) > 0 {
		fmt.Fprintf(w, "Skipped (%d):\n", len(s.Skips))
		for _, k := range s.Skips {
			fmt.Fprintf(w, "  %s %s: %s\n", strings.TrimPrefix(k.Package, "github.com/tsd-project/tsd/"), k.Test, k.Reason)
		}
	}
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", s.Passed, s.Failed, len(s.Skips))
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: testsummary FILE.json")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	defer f.Close()
	s, err := Read(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	Write(os.Stdout, s)
	if s.Failed > 0 {
		os.Exit(1)
	}
}
