// Package lanetest is a minimal test frontend for the direct ZMQ lane: it
// binds one worker's three sockets (handshake ROUTER, input ROUTER, output
// PULL), answers HELLO with INIT, records READY and registrations, sends
// requests and aborts to engine identities, and folds output batches into
// per-rid results. It exists to test engines (ts-fake) against the wire
// protocol; it is not the gateway (gateway/lane is).
package lanetest

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/gateway/wire"
)

// Options choose where the frontend binds. Zero value: tcp on 127.0.0.1
// with ephemeral ports everywhere.
type Options struct {
	// HandshakePort fixes the handshake port (0: ephemeral).
	HandshakePort int
	// IPCDir, when set, puts the data plane on ipc://IPCDir/w-in.sock and
	// -out.sock instead of tcp.
	IPCDir string
	// NoReplyInit makes the frontend record HELLOs without answering INIT.
	NoReplyInit bool
	// InitInput/InitOutput override the addresses sent in INIT ("-" sends
	// an empty list), to test engines against a broken INIT.
	InitInput, InitOutput string
}

// Result is everything the frontend saw for one rid.
type Result struct {
	RID         string
	Tokens      []int32   // concatenation of every message's output_ids
	Logprobs    []float64 // concatenation of logprob values
	Finish      string    // terminal reason ("" while running)
	Prompt      int
	Completion  int // cumulative, from the last message
	Cached      int // cached_tokens of the last message
	Messages    int // output batches that carried this rid
	EngineIndex int // engine_index of the last batch carrying it
	Done        bool
	// Arrivals is when each message carrying this rid was received
	// (inter-token times of a stream, for the performance model's tests).
	Arrivals []time.Time

	// From messages in the full BatchTokenIDOut variant (tsd's design for
	// prompt logprobs): the input logprobs (NaN = None) and their token
	// ids, and the abort message.
	PromptLogprobs   []float64
	PromptLogprobIDs []int32
	AbortMessage     string
	FullMessages     int
	// TopLogprobs and TopLogprobIDs are each token's top-k alternatives
	// (full variant, tsd's design), one entry per token that had them.
	TopLogprobs   [][]float64
	TopLogprobIDs [][]int32
}

// State is a snapshot of what the frontend has seen.
type State struct {
	Hellos        []int // engine indexes in arrival order
	Readys        []int
	Registrations map[int]wire.Registration // by engine index
	Sentinels     int                       // ENGINE_CORE_DEAD frames
	Malformed     int                       // output frames that failed to decode
	Batches       int                       // decoded output batches
	MaxBatchRIDs  int                       // largest batch seen
	Errors        []string                  // protocol violations seen
	Disconnects   int                       // engine connections lost on the output PULL
}

// Frontend is one worker's socket set.
type Frontend struct {
	hs, in, out zmq4.Socket
	ctx         context.Context
	handshake   string // tcp://127.0.0.1:PORT
	inAddr      string
	outAddr     string
	opts        Options
	cancel      context.CancelFunc
	wg          sync.WaitGroup

	mu      sync.Mutex
	state   State
	results map[string]*Result
	changed chan struct{} // closed and replaced on every state change
}

func quiet() zmq4.Option { return zmq4.WithLogger(stdlog.New(io.Discard, "", 0)) }

// Start binds the data plane first, then the handshake (the order the spec
// requires), and serves until Close.
func Start(opts Options) (*Frontend, error) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Frontend{opts: opts, ctx: ctx, cancel: cancel, results: map[string]*Result{}, changed: make(chan struct{}),
		state: State{Registrations: map[int]wire.Registration{}}}
	f.in = zmq4.NewRouter(ctx, quiet())
	f.out = zmq4.NewPull(ctx, quiet())
	f.hs = zmq4.NewRouter(ctx, quiet())
	inEP, outEP := "tcp://127.0.0.1:0", "tcp://127.0.0.1:0"
	if opts.IPCDir != "" {
		inEP, outEP = "ipc://"+opts.IPCDir+"/w-in.sock", "ipc://"+opts.IPCDir+"/w-out.sock"
	}
	var err error
	if f.inAddr, err = listen(f.in, inEP); err != nil {
		f.Close()
		return nil, fmt.Errorf("bind input ROUTER: %w", err)
	}
	if f.outAddr, err = listen(f.out, outEP); err != nil {
		f.Close()
		return nil, fmt.Errorf("bind output PULL: %w", err)
	}
	if f.handshake, err = listen(f.hs, "tcp://127.0.0.1:"+strconv.Itoa(opts.HandshakePort)); err != nil {
		f.Close()
		return nil, fmt.Errorf("bind handshake ROUTER: %w", err)
	}
	f.wg.Add(3)
	go f.serveHandshake()
	go f.serveInput()
	go f.serveOutput()
	return f, nil
}

func listen(s zmq4.Socket, ep string) (string, error) {
	if err := s.Listen(ep); err != nil {
		return "", err
	}
	if a, ok := s.Addr().(*net.TCPAddr); ok {
		return "tcp://127.0.0.1:" + strconv.Itoa(a.Port), nil
	}
	return ep, nil
}

// HandshakePort is the bound handshake port: what an engine gets as
// --data-parallel-rpc-port (its address is 127.0.0.1).
func (f *Frontend) HandshakePort() int {
	_, p, _ := net.SplitHostPort(f.handshake[len("tcp://"):])
	n, _ := strconv.Atoi(p)
	return n
}

// Close unbinds everything.
func (f *Frontend) Close() {
	f.cancel()
	for _, s := range []zmq4.Socket{f.hs, f.in, f.out} {
		if s != nil {
			_ = s.Close()
		}
	}
	f.wg.Wait()
}

func (f *Frontend) update(fn func()) {
	f.mu.Lock()
	fn()
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *Frontend) violation(format string, args ...any) {
	f.update(func() { f.state.Errors = append(f.state.Errors, fmt.Sprintf(format, args...)) })
}

func (f *Frontend) serveHandshake() {
	defer f.wg.Done()
	for {
		m, err := f.hs.Recv()
		if err != nil {
			return
		}
		if len(m.Frames) != 2 {
			f.violation("handshake message with %d frames", len(m.Frames))
			continue
		}
		idx, err := wire.DecodeIdentity(m.Frames[0])
		if err != nil {
			f.violation("handshake identity: %v", err)
			continue
		}
		h, err := wire.DecodeHandshake(m.Frames[1])
		if err != nil {
			f.violation("handshake payload from %d: %v", idx, err)
			continue
		}
		switch h.Status {
		case wire.StatusHello:
			f.update(func() { f.state.Hellos = append(f.state.Hellos, int(idx)) })
			if f.opts.NoReplyInit {
				continue
			}
			b, _ := wire.EncodeInit(f.initMsg())
			if err := f.hs.Send(zmq4.NewMsgFrom(m.Frames[0], b)); err != nil {
				f.violation("send INIT to %d: %v", idx, err)
			}
		case wire.StatusReady:
			f.update(func() { f.state.Readys = append(f.state.Readys, int(idx)) })
		default:
			f.violation("handshake status %q from %d", h.Status, idx)
		}
	}
}

func (f *Frontend) initMsg() wire.InitMsg {
	pick := func(override, addr string) []string {
		switch override {
		case "":
			return []string{addr}
		case "-":
			return []string{}
		}
		return []string{override}
	}
	m := wire.NewInit(f.inAddr, f.outAddr)
	m.Addresses.Inputs = pick(f.opts.InitInput, f.inAddr)
	m.Addresses.Outputs = pick(f.opts.InitOutput, f.outAddr)
	return m
}

func (f *Frontend) serveInput() {
	defer f.wg.Done()
	for {
		m, err := f.in.Recv()
		if err != nil {
			return
		}
		if len(m.Frames) != 2 {
			f.violation("input message with %d frames", len(m.Frames))
			continue
		}
		idx, err := wire.DecodeIdentity(m.Frames[0])
		if err != nil {
			f.violation("input identity: %v", err)
			continue
		}
		g, err := wire.DecodeRegistration(m.Frames[1])
		if err != nil {
			f.violation("registration from %d: %v", idx, err)
			continue
		}
		f.update(func() { f.state.Registrations[int(idx)] = g })
	}
}

func (f *Frontend) serveOutput() {
	defer f.wg.Done()
	for {
		m, err := f.out.Recv()
		if err != nil {
			// zmq4's PULL reports one peer's lost connection as a Recv
			// error and keeps serving the others.
			if f.ctx.Err() != nil {
				return
			}
			f.update(func() { f.state.Disconnects++ })
			continue
		}
		if len(m.Frames) == 0 {
			f.update(func() { f.state.Malformed++ })
			continue
		}
		if wire.IsShutdownSentinel(m.Frames[0]) {
			f.update(func() { f.state.Sentinels++ })
			continue
		}
		ao, err := wire.DecodeAnyOutput(m.Frames[0])
		if err != nil {
			f.update(func() { f.state.Malformed++ })
			continue
		}
		o := ao.Batch
		at := time.Now()
		f.update(func() {
			f.state.Batches++
			f.state.MaxBatchRIDs = max(f.state.MaxBatchRIDs, len(o.RIDs))
			for i, rid := range o.RIDs {
				r := f.results[rid]
				if r == nil {
					r = &Result{RID: rid}
					f.results[rid] = r
				}
				if r.Done {
					f.state.Errors = append(f.state.Errors, "output after terminal message for "+rid)
				}
				r.Tokens = append(r.Tokens, o.OutputIDs[i]...)
				if len(o.OutputTokenLogprobsVal) > i {
					r.Logprobs = append(r.Logprobs, o.OutputTokenLogprobsVal[i]...)
				}
				r.Prompt, r.Completion, r.EngineIndex = o.PromptTokens[i], o.CompletionTokens[i], o.EngineIndex
				if len(o.CachedTokens) > i {
					r.Cached = o.CachedTokens[i]
				}
				r.Messages++
				r.Arrivals = append(r.Arrivals, at)
				if ao.Full != nil {
					r.FullMessages++
					if v, ids, ok, err := ao.PromptLogprobs(i); err != nil {
						f.state.Errors = append(f.state.Errors, "input logprobs of "+rid+": "+err.Error())
					} else if ok {
						r.PromptLogprobs = append(r.PromptLogprobs, v...)
						r.PromptLogprobIDs = append(r.PromptLogprobIDs, ids...)
					}
					if msg := ao.AbortMessage(i); msg != "" {
						r.AbortMessage = msg
					}
					if v, ids, ok, err := ao.TopLogprobs(i); err != nil {
						f.state.Errors = append(f.state.Errors, "top logprobs of "+rid+": "+err.Error())
					} else if ok {
						r.TopLogprobs = append(r.TopLogprobs, v...)
						r.TopLogprobIDs = append(r.TopLogprobIDs, ids...)
					}
				}
				if o.FinishedReasons[i] != wire.FinishRunning {
					r.Finish, r.Done = o.FinishedReasons[i], true
				}
			}
		})
	}
}

// Snapshot returns a copy of the current state.
func (f *Frontend) Snapshot() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.copyState()
}

func (f *Frontend) copyState() State {
	s := f.state
	s.Hellos = append([]int(nil), s.Hellos...)
	s.Readys = append([]int(nil), s.Readys...)
	s.Errors = append([]string(nil), s.Errors...)
	s.Registrations = make(map[int]wire.Registration, len(f.state.Registrations))
	for k, v := range f.state.Registrations {
		s.Registrations[k] = v
	}
	return s
}

// Wait blocks until cond holds for the state or ctx ends.
func (f *Frontend) Wait(ctx context.Context, cond func(State) bool) (State, error) {
	for {
		f.mu.Lock()
		s := f.copyState()
		ch := f.changed
		f.mu.Unlock()
		if cond(s) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("lanetest wait: %w", ctx.Err())
		case <-ch:
		}
	}
}

// WaitRegistered waits for n distinct registrations and returns them.
func (f *Frontend) WaitRegistered(ctx context.Context, n int) (map[int]wire.Registration, error) {
	s, err := f.Wait(ctx, func(s State) bool { return len(s.Registrations) >= n })
	return s.Registrations, err
}

// Submit sends an ADD to engine index idx.
func (f *Frontend) Submit(idx int, q wire.GenerateRequest) error {
	b, err := wire.EncodeGenerateRequest(q)
	if err != nil {
		return fmt.Errorf("encode request %s: %w", q.RID, err)
	}
	return f.SendRaw(idx, []byte{wire.TypeAdd}, b)
}

// SubmitEncode sends an EncodeRequest to engine index idx the way tsd's
// gateway does (an ADD frame whose payload has the EncodeRequest tag),
// followed by aux as out-of-band tensor frames.
func (f *Frontend) SubmitEncode(idx int, q wire.EncodeRequest, aux ...[]byte) error {
	b, err := wire.EncodeEncodeRequest(q)
	if err != nil {
		return fmt.Errorf("encode EncodeRequest %s: %w", q.RID, err)
	}
	return f.SendRaw(idx, append([][]byte{{wire.TypeAdd}, b}, aux...)...)
}

// Abort sends an ABORT for rids to engine index idx.
func (f *Frontend) Abort(idx int, rids ...string) error {
	b, err := wire.EncodeAbort(wire.AbortRequest{RIDs: rids})
	if err != nil {
		return fmt.Errorf("encode abort: %w", err)
	}
	return f.SendRaw(idx, []byte{wire.TypeAbort}, b)
}

// SendRaw sends arbitrary frames (after the identity) to engine index idx.
func (f *Frontend) SendRaw(idx int, frames ...[]byte) error {
	all := append([][]byte{wire.EncodeIdentity(uint16(idx))}, frames...)
	if err := f.in.Send(zmq4.NewMsgFrom(all...)); err != nil {
		return fmt.Errorf("send to engine %d: %w", idx, err)
	}
	return nil
}

// Peek returns what has been seen for rid so far.
func (f *Frontend) Peek(rid string) (Result, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.results[rid]
	if !ok {
		return Result{}, false
	}
	return r.clone(), true
}

func (r *Result) clone() Result {
	c := *r
	c.Tokens = append([]int32(nil), r.Tokens...)
	c.Logprobs = append([]float64(nil), r.Logprobs...)
	c.PromptLogprobs = append([]float64(nil), r.PromptLogprobs...)
	c.PromptLogprobIDs = append([]int32(nil), r.PromptLogprobIDs...)
	c.TopLogprobs = append([][]float64(nil), r.TopLogprobs...)
	c.TopLogprobIDs = append([][]int32(nil), r.TopLogprobIDs...)
	c.Arrivals = append([]time.Time(nil), r.Arrivals...)
	return c
}

// Result waits until rid's terminal message arrived.
func (f *Frontend) Result(ctx context.Context, rid string) (Result, error) {
	m, err := f.Results(ctx, rid)
	return m[rid], err
}

// Results waits until every rid's terminal message arrived; on timeout it
// returns what it has and an error naming how many are missing.
func (f *Frontend) Results(ctx context.Context, rids ...string) (map[string]Result, error) {
	for {
		f.mu.Lock()
		out := make(map[string]Result, len(rids))
		missing := 0
		for _, rid := range rids {
			if r, ok := f.results[rid]; ok {
				out[rid] = r.clone()
				if r.Done {
					continue
				}
			}
			missing++
		}
		ch := f.changed
		f.mu.Unlock()
		if missing == 0 {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("lanetest: %d of %d results missing: %w", missing, len(rids), ctx.Err())
		case <-ch:
		}
	}
}
