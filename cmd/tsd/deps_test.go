package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The tsd binary links no go-zeromq/zmq4: the gateway speaks ZMTP through
// its own gateway/zmtp, and zmq4 belongs to ts-fake (its KV event
// publisher, cmd/ts-fake/kvpub) and to tests (docs/architecture.md §2, §13).
func TestTSDLinksNoZMQ4(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain on this host (prebuilt binaries): the import graph cannot be listed")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	const zmq4 = "github.com/go-zeromq/zmq4"
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], zmq4) {
			continue
		}
		for _, imp := range fields[1:] {
			if imp == zmq4 || strings.HasPrefix(imp, zmq4+"/") {
				t.Errorf("%s imports %s, so the tsd binary links it", fields[0], imp)
			}
		}
	}
}
