package main

import (
	"strings"
	"testing"
)

// Pins: passes, failures and skips are counted per test (not per package),
// and a skip's reason is the message it logged, without file:line.
func TestReadCountsAndReasons(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"run","Package":"p","Test":"TestB"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"=== RUN   TestB\n"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:12: skipping: npm pack x failed (registry unreachable?)\n"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestB"}`,
		`{"Action":"fail","Package":"q","Test":"TestC/sub"}`,
		`{"Action":"fail","Package":"q"}`,
		`{"Action":"fail","Package":"r"}`,
		`not json: build output`,
	}, "\n")
	s, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	// q's package failure is its test's; r failed without a test (build).
	if s.Passed != 1 || s.Failed != 2 || len(s.Skips) != 1 {
		t.Fatalf("summary %+v", s)
	}
	if got := s.Skips[0].Reason; got != "skipping: npm pack x failed (registry unreachable?)" {
		t.Fatalf("reason %q", got)
	}
	var b strings.Builder
	Write(&b, s)
	if !strings.HasSuffix(b.String(), "\n1 passed, 2 failed, 1 skipped\n") || !strings.Contains(b.String(), "  p TestB: skipping: npm pack") {
		t.Fatalf("output:\n%s", b.String())
	}
}
