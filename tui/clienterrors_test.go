package tui

import (
	"strings"
	"testing"

	"github.com/tsd-project/tsd/tui/tuitest"
)

// Client 4xx are not the deployment's errors: the header's red count is
// the deployment's (0 here), the client errors are said apart.
func TestHeaderClientErrorsApart(t *testing.T) {
	s := tuitest.Deployment(2, 1, 2, t0)
	s.Gateway.Errors, s.Gateway.ClientErrors = 0, 5
	m, _ := newTestModel(t, 160, 40, s)
	out := plain(m)
	if !strings.Contains(out, "0 errors") || !strings.Contains(out, "5 client errors") {
		t.Fatalf("header lacks 0 errors / 5 client errors:\n%s", out)
	}
}
