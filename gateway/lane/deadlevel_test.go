package lane

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/snapshot"
)

// Every planned restart wrote level=WARN msg="engine sent
// ENGINE_CORE_DEAD": the supervisor takes a role out of routing before it
// signals the engine, so a sentinel from an unrouted worker is expected
// and logged at INFO; one from a routed worker (a crash) still warns.
func TestEngineCoreDeadLevel(t *testing.T) {
	t.Parallel()
	_, w, ch, logs := startLane(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	payload, _ := wire.EncodeGenerateRequest(wire.NewGenerateRequest("x", []int32{1}, wire.DefaultSamplingParams()))
	sentinel := func(r *fakeRank, rid string) {
		t.Helper()
		s, err := w.Submit(0, rid, payload)
		if err != nil {
			t.Fatal(err)
		}
		_ = r.out.Send(zmq4.NewMsg([]byte("ENGINE_CORE_DEAD")))
		// The line is written before the worker's streams fail.
		if _, err := s.Recv(ctx); !errors.Is(err, ErrEngineDead) {
			t.Fatalf("after the sentinel: %v", err)
		}
		r.close()
		waitGone(t, w, 0)
	}
	line := func() string {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "ENGINE_CORE_DEAD") {
				return l
			}
		}
		return ""
	}

	r := dialRank(t, w.HandshakeEndpoint(), 0, 1, 0)
	waitRanks(t, ch, "decode", map[int]string{0: snapshot.RankRegistered})
	sentinel(r, "crash")
	if l := line(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "expected=false") {
		t.Fatalf("a routed worker's death: %q", l)
	}

	r = dialRank(t, w.HandshakeEndpoint(), 0, 1, 0)
	waitRanks(t, ch, "decode", map[int]string{0: snapshot.RankRegistered})
	sub, err := w.Submit(0, "planned", payload)
	if err != nil {
		t.Fatal(err)
	}
	w.SetView(snapshot.RoleView{Alive: true, Reason: "stop requested"}) // the supervisor's planned stop: a drain, then SIGTERM
	_ = r.out.Send(zmq4.NewMsg([]byte("ENGINE_CORE_DEAD")))
	if _, err := sub.Recv(ctx); !errors.Is(err, ErrEngineDead) {
		t.Fatalf("after the planned sentinel: %v", err)
	}
	r.close()
	var planned string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "ENGINE_CORE_DEAD") {
			planned = l
		}
	}
	if !strings.Contains(planned, "level=INFO") || !strings.Contains(planned, "expected=true") {
		t.Fatalf("a planned death: %q\n%s", planned, logs)
	}
}
