package dispatch

// A real lane (ipc sockets, zmq4) with scripted engine ranks dialled into
// it in-process: the dispatch tests drive the flight through every
// failure an engine can show (die, abort, stay silent) without starting a
// process. Each fake rank hands the test every request it receives; the
// test answers, or kills the rank.

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/routing"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// fakeRank is one engine rank of a role.
type fakeRank struct {
	t    *testing.T
	role string
	id   uint16
	in   zmq4.Socket
	out  zmq4.Socket
	reqs chan wire.GenerateRequest // every ADD it receives
}

// fakeLane is a lane over roles (name → kind), each a DP-1 worker, bound
// and with one fake rank dialled into each, and a Dispatcher over it.
type fakeLane struct {
	t     *testing.T
	lane  *lane.Lane
	ranks map[string]*fakeRank
	// hs is each role's handshake DEALER, kept for the lane's life: a
	// restarted rank sends its HELLO on it again. (A new connection right
	// after the old one closed could find the gateway still holding the
	// old one for that identity and be refused; a libzmq engine would
	// simply reconnect.)
	hs   map[string]zmq4.Socket
	d    *Dispatcher
	m    *Metrics
	shut chan struct{}
}

// newFakeLane builds the deployment; edit (may be nil) adjusts the plan's
// gateway section (retry, breaker) first.
func newFakeLane(t *testing.T, edit func(*profiles.GatewayPlan), roles ...[2]string) *fakeLane {
	t.Helper()
	dir := t.TempDir()
	plan := &profiles.Plan{Name: "t", Gateway: profiles.GatewayPlan{Mode: profiles.ModePD, Policy: profiles.PolicyPlan{Prefill: routing.RoundRobin, Decode: routing.RoundRobin}}}
	for i, r := range roles {
		wp := profiles.WorkerPlan{Role: r[0], Kind: r[1], DP: 1, URL: "ipc://" + filepath.Join(dir, strconv.Itoa(i)), Handshake: "tcp://127.0.0.1:0"}
		if r[1] == profiles.KindPrefill {
			wp.Bootstrap = "127.0.0.1:9" // the fakes transfer nothing
		}
		plan.Gateway.Workers = append(plan.Gateway.Workers, wp)
	}
	if edit != nil {
		edit(&plan.Gateway)
	}
	l, err := lane.New(plan.Gateway.Workers, lane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Bind(); err != nil {
		t.Fatal(err)
	}
	fl := &fakeLane{t: t, lane: l, ranks: map[string]*fakeRank{}, hs: map[string]zmq4.Socket{}, shut: make(chan struct{})}
	t.Cleanup(func() {
		close(fl.shut)
		for _, r := range fl.ranks {
			r.close()
		}
		for _, h := range fl.hs {
			_ = h.Close()
		}
		_ = l.Close()
	})
	fl.m = testMetrics()
	fl.d = New(Config{Plan: plan, Lane: l, Metrics: fl.m, Shutdown: fl.shut,
		Options: Options{RequestTimeout: time.Minute, DrainGrace: time.Second, QueueTimeout: 10 * time.Second}})
	for _, r := range roles {
		fl.dial(r[0])
	}
	return fl
}

// dial starts (or restarts) the role's rank and waits until it is
// registered.
func (fl *fakeLane) dial(role string) *fakeRank {
	t := fl.t
	t.Helper()
	w, ok := fl.lane.Worker(role)
	if !ok {
		t.Fatalf("no worker %s", role)
	}
	_, evs, cancel := fl.lane.SubscribeRanks()
	defer cancel()
	r := &fakeRank{t: t, role: role, id: 0, reqs: make(chan wire.GenerateRequest, 64)}
	ident := zmq4.WithID(zmq4.SocketIdentity(wire.EncodeIdentity(r.id)))
	hs := fl.hs[role]
	if hs == nil {
		hs = zmq4.NewDealer(context.Background(), ident)
		if err := hs.Dial(w.HandshakeEndpoint()); err != nil {
			t.Fatal(err)
		}
		fl.hs[role] = hs
	}
	hello, _ := wire.EncodeHandshake(wire.Hello())
	if err := hs.Send(zmq4.NewMsg(hello)); err != nil {
		t.Fatal(err)
	}
	m, err := hs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	init, err := wire.DecodeInit(m.Frames[len(m.Frames)-1])
	if err != nil {
		t.Fatal(err)
	}
	ready, _ := wire.EncodeHandshake(wire.Ready())
	if err := hs.Send(zmq4.NewMsg(ready)); err != nil {
		t.Fatal(err)
	}
	inEP, _ := init.Input()
	outEP, _ := init.Output()
	r.in, r.out = zmq4.NewDealer(context.Background(), ident), zmq4.NewPush(context.Background())
	if err := r.in.Dial(inEP); err != nil {
		t.Fatal(err)
	}
	reg := wire.DefaultRegistration()
	reg.DataParallelSize, reg.MaxModelLen, reg.Dtype = 1, 4096, "bfloat16"
	payload, _ := wire.EncodeRegistration(reg)
	if err := r.in.Send(zmq4.NewMsg(payload)); err != nil {
		t.Fatal(err)
	}
	if err := r.out.Dial(outEP); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			m, err := r.in.Recv()
			if err != nil {
				return
			}
			in, err := wire.DecodeInputFrames(m.Frames)
			if err == nil && in.Generate != nil {
				r.reqs <- *in.Generate
			}
		}
	}()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-evs:
			if ev.Role == role && ev.Rank.State == snapshot.RankRegistered {
				fl.ranks[role] = r
				return r
			}
		case <-deadline:
			t.Fatalf("%s never registered", role)
		}
	}
}

func (r *fakeRank) close() { _ = r.in.Close(); _ = r.out.Close() }

// kill closes the rank's sockets, as SIGKILL does: the lane sees its
// input connection go and fails its streams.
func (fl *fakeLane) kill(role string) {
	fl.t.Helper()
	_, evs, cancel := fl.lane.SubscribeRanks()
	defer cancel()
	fl.ranks[role].close()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-evs:
			if ev.Role == role && ev.Rank.State == snapshot.RankDisconnected {
				return
			}
		case <-deadline:
			fl.t.Fatalf("%s never seen disconnected", role)
		}
	}
}

// next is the next request the rank receives.
func (r *fakeRank) next() wire.GenerateRequest {
	r.t.Helper()
	select {
	case q := <-r.reqs:
		return q
	case <-time.After(10 * time.Second):
		r.t.Fatalf("%s received no request", r.role)
		return wire.GenerateRequest{}
	}
}

// none asserts the rank received nothing (more).
func (r *fakeRank) none() {
	r.t.Helper()
	select {
	case q := <-r.reqs:
		r.t.Fatalf("%s received %s (prompt %v), want nothing", r.role, q.RID, q.InputIDs)
	default:
	}
}

// emit sends one output for rid: tokens (with logprobs when lps is not
// nil), its finish reason ("" running), and the cumulative count done.
func (r *fakeRank) emit(rid string, prompt int, toks []int32, lps []float64, fin string, done int) {
	r.t.Helper()
	b := wire.OutputBatch{RIDs: []string{rid}, OutputIDs: [][]int32{toks}, FinishedReasons: []string{fin}, PromptTokens: []int{prompt},
		CompletionTokens: []int{done}, CachedTokens: []int{0}, OutputTokenLogprobsVal: [][]float64{{}}, OutputTokenLogprobsIdx: [][]int32{{}}, EngineIndex: int(r.id)}
	if lps != nil {
		b.OutputTokenLogprobsVal, b.OutputTokenLogprobsIdx = [][]float64{lps}, [][]int32{toks}
	}
	payload, err := wire.EncodeOutput(b)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.out.Send(zmq4.NewMsg(payload)); err != nil {
		r.t.Fatal(err)
	}
}

// prefillDone answers a prefill leg: its one terminal output with the
// first token.
func (r *fakeRank) prefillDone(q wire.GenerateRequest) {
	r.emit(q.RID, len(q.InputIDs), []int32{1}, nil, wire.FinishLength, 1)
}

// collect reads a generation's events to its end.
func collect(t *testing.T, events <-chan tokenapi.Event) (toks []int32, lps []float64, last tokenapi.Event, errs []error) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			toks = append(toks, ev.TokenIDs...)
			lps = append(lps, ev.Logprobs...)
			if ev.Err != nil {
				errs = append(errs, ev.Err)
			}
			last = ev
		case <-deadline:
			t.Fatal("the generation never ended")
		}
	}
}

// event is the next event, which must come.
func event(t *testing.T, events <-chan tokenapi.Event) tokenapi.Event {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("events closed early")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	return tokenapi.Event{}
}

func request(maxTokens, minTokens int, logprobs bool) tokenapi.Request {
	s := tokenapi.Sampling{MaxNewTokens: &maxTokens, MinNewTokens: minTokens, IgnoreEOS: true}
	return tokenapi.Request{RID: "req", InputIDs: []int32{11, 12, 13, 14}, Sampling: s, Stream: true, ReturnLogprob: logprobs, LogprobStartLen: -1}
}

// decodeOf waits for the decode leg of a request: it lands on one of
// the decodes; it returns that rank and the request.
func (fl *fakeLane) decodeOf(names ...string) (*fakeRank, wire.GenerateRequest) {
	fl.t.Helper()
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(10 * time.Second))}}
	for _, n := range names {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(fl.ranks[n].reqs)})
	}
	i, v, _ := reflect.Select(cases)
	if i == 0 {
		fl.t.Fatalf("no decode of %v received the request", names)
	}
	return fl.ranks[names[i-1]], v.Interface().(wire.GenerateRequest)
}

func roomOf(q wire.GenerateRequest) string {
	if q.BootstrapRoom == nil {
		return "nil"
	}
	return fmt.Sprint(*q.BootstrapRoom)
}
