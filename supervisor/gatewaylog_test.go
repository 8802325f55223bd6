package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
)

// The gateway is a log source beside the roles — its lines reach
// its 0600 log file and a ring that SubscribeLogs, Logs and SaveLog serve
// under "gateway", while the merged view stays the engines'.
func TestGatewayLogSource(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "logs", "gateway.log")
	src, err := NewLogSource(GatewayLogSource, LogSourceOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	plan := &profiles.Plan{Name: "t", Roles: []profiles.RolePlan{{Name: "decode", Kind: "decode", Local: true}}}
	s, err := New(Options{Plan: plan, NoLogFiles: true, GatewayLog: src})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fmt.Fprintf(src, "level=INFO msg=access method=POST path=/generate status=200\n")
	backlog, batches, cancel, err := s.SubscribeLogs(GatewayLogSource)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	if len(backlog) != 1 || backlog[0].Role != GatewayLogSource || !strings.Contains(backlog[0].Text, "status=200") {
		t.Fatalf("backlog %+v", backlog)
	}
	// Two writes, one of them a line in two pieces.
	_, _ = src.Write([]byte("level=WARN msg=access status=503\nlevel=INFO msg=acc"))
	_, _ = src.Write([]byte("ess status=400\n"))
	var got []LogLine
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case b := <-batches:
			got = append(got, b...)
		case <-deadline:
			t.Fatalf("lines never arrived: %+v", got)
		}
	}
	if got[0].Text != "level=WARN msg=access status=503" || got[1].Text != "level=INFO msg=access status=400" || got[1].Seq != 3 {
		t.Fatalf("lines %+v", got)
	}
	all, err := s.Logs(GatewayLogSource)
	if err != nil || len(all) != 3 {
		t.Fatalf("Logs: %v %d lines", err, len(all))
	}
	merged, _, cancelAll, err := s.SubscribeLogs("")
	if err != nil {
		t.Fatal(err)
	}
	cancelAll()
	for _, l := range merged {
		if l.Role == GatewayLogSource {
			t.Fatalf("the merged view carries the gateway's line %q", l.Text)
		}
	}
	saved, err := s.SaveLog(GatewayLogSource, filepath.Join(dir, "saved", "gw.log"))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(saved); strings.Count(string(b), "msg=access") != 3 {
		t.Fatalf("saved log:\n%s", b)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("gateway log mode %v, want 0600", st.Mode().Perm())
	}
	if b, _ := os.ReadFile(path); strings.Count(string(b), "msg=access") != 3 {
		t.Fatalf("log file:\n%s", b)
	}
}

// Without a gateway log (no gateway, tests) the source exists and is empty.
func TestGatewayLogSourceDefault(t *testing.T) {
	t.Parallel()
	plan := &profiles.Plan{Name: "t", Roles: []profiles.RolePlan{{Name: "decode", Kind: "decode", Local: true}}}
	s, err := New(Options{Plan: plan, NoLogFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := s.Logs(GatewayLogSource); err != nil || len(l) != 0 {
		t.Fatalf("Logs(gateway): %v %v", l, err)
	}
	if _, err := s.Logs("nope"); !errors.Is(err, ErrUnknownRole) {
		t.Fatalf("Logs(nope): %v", err)
	}
}
