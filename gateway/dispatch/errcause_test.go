package dispatch

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/front"
)

// A request that ran out of time answers a 504 whose cause is the
// deadline, so errors.Is tells it from the other failures, and the
// client's message names the limit, not the cause.
func TestDeadlineErrorKeepsItsCause(t *testing.T) {
	t.Parallel()
	f := &flight{g: &Dispatcher{opts: Options{RequestTimeout: 3 * time.Second}}}
	ae := f.deadlineErr(" waiting for a decode worker")
	e := front.As(ae.err)
	if e.Status != http.StatusGatewayTimeout || e.Code != "timeout" || !strings.Contains(e.Message, "request deadline of 3s exceeded waiting for a decode worker") {
		t.Fatalf("%+v", *e)
	}
	if !errors.Is(ae.err, context.DeadlineExceeded) {
		t.Fatal("the deadline is not the timeout's cause")
	}
}
