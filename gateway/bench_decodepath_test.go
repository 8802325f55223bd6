package gateway

// The decode path alone: a token's way from the lane's output reader to
// the HTTP writer (docs/architecture.md §14), with no socket and no HTTP
// connection around it. The lane runs over an in-memory Transport whose
// fake ranks encode each output into one reused buffer, and each request
// is served by the gateway's own handler (front door, dispatch, the
// OpenAI or /generate front end) into a writer that discards what it is
// given. What is left is the gateway's work per token.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/generate"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/openai"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
)

var errMemClosed = errors.New("mem socket closed")

// memTransport binds in-memory sockets; each worker's three sockets are
// driven by one memRank.
type memTransport struct {
	mu    sync.Mutex
	socks []*memSock
	port  int
}

func (t *memTransport) Bind(kind lane.SocketKind, _ string) (lane.Socket, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.port++
	s := &memSock{kind: kind, ep: fmt.Sprintf("tcp://127.0.0.1:%d", t.port), in: make(chan [][]byte, 64), done: make(chan struct{}), attached: make(chan struct{}), events: make(chan lane.PeerEvent)}
	t.socks = append(t.socks, s)
	return s, nil
}

// memSock is one bound socket. Recv takes what a rank pushed (or asks
// produce, the decode rank's step, for the next message); Send hands the
// frames to onSend.
type memSock struct {
	kind    lane.SocketKind
	ep      string
	in      chan [][]byte
	produce atomic.Pointer[func() ([][]byte, error)]
	// attached is closed once produce is set: the lane's reader may be
	// waiting in Recv already (Bind starts it).
	attached chan struct{}
	onSend   atomic.Pointer[func([][]byte)]
	done     chan struct{}
	once     sync.Once
	events   chan lane.PeerEvent
	live     atomic.Int32 // the rank's input connection is up (after its registration)
}

func (s *memSock) Endpoint() string { return s.ep }

func (s *memSock) Recv() ([][]byte, error) {
	for {
		if p := s.produce.Load(); p != nil {
			return (*p)()
		}
		select {
		case f := <-s.in:
			return f, nil
		case <-s.attached:
		case <-s.done:
			return nil, errMemClosed
		}
	}
}

func (s *memSock) Send(frames [][]byte) error {
	if f := s.onSend.Load(); f != nil {
		(*f)(frames)
	}
	return nil
}

func (s *memSock) Live([]byte) int               { return int(s.live.Load()) }
func (s *memSock) Events() <-chan lane.PeerEvent { return s.events }
func (s *memSock) Close() error {
	s.once.Do(func() { close(s.done); close(s.events) })
	return nil
}

// memRank is one engine rank behind a worker's memSocks. A prefill
// answers each request with its one terminal output; a decode steps like
// an unpaced engine: each output message carries perOut tokens for every
// running rid. With lockstep the decode sends a rid's next output only
// after the writer flushed the previous one (C=1: an engine slower than
// the gateway, the steady state), else as fast as the lane reads.
type memRank struct {
	prefill  bool
	perOut   int
	lockstep bool

	mu      sync.Mutex
	cond    *sync.Cond
	closed  bool
	runs    []memRun
	flushes int // writer flushes seen (lockstep)
	want    int // flushes to wait for before the next step

	ob     wire.OutputBatch
	ids    []int32
	buf    []byte
	frames [][]byte
	msgs   atomic.Int64 // output messages sent
}

type memRun struct {
	rid          string
	prompt, done int
	max          int
}

func newMemRank(prefill bool, perOut int, lockstep bool) *memRank {
	r := &memRank{prefill: prefill, perOut: perOut, lockstep: lockstep, frames: make([][]byte, 1)}
	r.cond = sync.NewCond(&r.mu)
	return r
}

func (r *memRank) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cond.Broadcast()
}

// flushed counts one writer flush (lockstep pacing).
func (r *memRank) flushed() {
	r.mu.Lock()
	r.flushes++
	r.mu.Unlock()
	r.cond.Broadcast()
}

// onInput takes the lane's ADDs and ABORTs.
func (r *memRank) onInput(f [][]byte) {
	if len(f) < 3 || len(f[1]) != 1 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch f[1][0] {
	case 0x00:
		q, err := wire.DecodeGenerateRequest(f[2])
		if err != nil {
			return
		}
		max := 1
		if !r.prefill && q.Sampling.MaxNewTokens != nil {
			max = *q.Sampling.MaxNewTokens
		}
		r.runs = append(r.runs, memRun{rid: q.RID, prompt: len(q.InputIDs), max: max})
	case 0x01:
		ab, err := wire.DecodeAbort(f[2])
		if err != nil {
			return
		}
		for _, rid := range ab.RIDs {
			for i := range r.runs {
				if r.runs[i].rid == rid {
					r.runs = append(r.runs[:i], r.runs[i+1:]...)
					break
				}
			}
		}
	}
	r.cond.Broadcast()
}

// step waits for running rids and sends one output message for all of
// them, encoded into the one reused buffer: the lane's reader is done with
// the previous message before it asks for the next.
func (r *memRank) step() ([][]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for !r.closed && (len(r.runs) == 0 || (r.lockstep && r.flushes < r.want)) {
		r.cond.Wait()
	}
	if r.closed {
		return nil, errMemClosed
	}
	ob := &r.ob
	ob.RIDs, ob.OutputIDs, ob.FinishedReasons = ob.RIDs[:0], ob.OutputIDs[:0], ob.FinishedReasons[:0]
	ob.PromptTokens, ob.CompletionTokens, ob.CachedTokens = ob.PromptTokens[:0], ob.CompletionTokens[:0], ob.CachedTokens[:0]
	if need := len(r.runs) * r.perOut; cap(r.ids) < need {
		r.ids = make([]int32, need)
	}
	ids := r.ids[:0]
	kept := r.runs[:0]
	waiting := false
	for _, run := range r.runs {
		k := min(r.perOut, run.max-run.done)
		start := len(ids)
		for range k {
			run.done++
			ids = append(ids, int32(300+run.done%64))
		}
		fin := ""
		if run.done >= run.max {
			fin = wire.FinishLength
		} else {
			kept = append(kept, run)
			waiting = true
		}
		ob.RIDs = append(ob.RIDs, run.rid)
		ob.OutputIDs = append(ob.OutputIDs, ids[start:len(ids):len(ids)])
		ob.FinishedReasons = append(ob.FinishedReasons, fin)
		ob.PromptTokens = append(ob.PromptTokens, run.prompt)
		ob.CompletionTokens = append(ob.CompletionTokens, run.done)
		ob.CachedTokens = append(ob.CachedTokens, 0)
	}
	r.runs = kept
	if r.lockstep && waiting {
		r.want = r.flushes + 1
	}
	var err error
	if r.buf, err = wire.AppendOutput(r.buf[:0], *ob); err != nil {
		return nil, err
	}
	r.msgs.Add(1)
	r.frames[0] = r.buf
	return r.frames, nil
}

// attach wires rank r to worker w's sockets and runs its handshake and
// registration; the caller waits for the gateway's readiness.
func (r *memRank) attach(tb testing.TB, tr *memTransport, w *lane.Worker, disagg string) {
	tb.Helper()
	var hs, in, out *memSock
	for _, s := range tr.socks {
		switch s.ep {
		case w.HandshakeEndpoint():
			hs = s
		}
		ie, oe := w.Endpoints()
		switch s.ep {
		case ie:
			in = s
		case oe:
			out = s
		}
	}
	if hs == nil || in == nil || out == nil {
		tb.Fatalf("worker %s: sockets not found", w.Role())
	}
	id := wire.EncodeIdentity(0)
	ready, _ := wire.EncodeHandshake(wire.Ready())
	onHS := func(f [][]byte) { // INIT: answer READY, then register
		if len(f) == 2 {
			hs.in <- [][]byte{id, ready}
			reg := wire.DefaultRegistration()
			reg.DisaggregationMode = &disagg
			payload, _ := wire.EncodeRegistration(reg)
			in.live.Store(1)
			in.in <- [][]byte{id, payload}
		}
	}
	hs.onSend.Store(&onHS)
	onIn := r.onInput
	in.onSend.Store(&onIn)
	step := r.step
	out.produce.Store(&step)
	close(out.attached)
	hello, _ := wire.EncodeHandshake(wire.Hello())
	hs.in <- [][]byte{id, hello}
}

// discardWriter is an http.ResponseWriter and Flusher that keeps nothing
// (SetWriteDeadline too, so the SSE writer's deadline costs nothing).
type discardWriter struct {
	h       http.Header
	status  int
	n       int
	done    bool
	errBody []byte // the start of a failed answer
	onFlush func()
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
}

func (w *discardWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status != http.StatusOK && len(w.errBody) < 512 {
		w.errBody = append(w.errBody, b...)
	}
	w.n += len(b)
	w.done = bytes.HasSuffix(b, []byte("data: [DONE]\n\n"))
	return len(b), nil
}

func (w *discardWriter) Flush() {
	if w.onFlush != nil {
		w.onFlush()
	}
}

func (w *discardWriter) SetWriteDeadline(time.Time) error { return nil }

// decodePath is a gateway over memRanks with both front ends mounted.
type decodePath struct {
	g       *Gateway
	h       http.Handler
	pre     *memRank
	dec     *memRank
	discard net.Listener
}

func newDecodePath(b *testing.B, perOut int, lockstep bool) *decodePath {
	return newDecodePathWith(b, perOut, lockstep, nil)
}

// newDecodePathWith is newDecodePath whose front ends are mounted by
// mount (nil: both, as newDecodePath mounts them).
func newDecodePathWith(b *testing.B, perOut int, lockstep bool, mount func(tokenapi.Engine, *http.ServeMux, *tokenizer.Tokenizer)) *decodePath {
	tok, err := tokenizer.Load("tokenizer/testdata/demo")
	if err != nil {
		b.Fatal(err)
	}
	plan := &profiles.Plan{ServedModelName: "fake", Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", Workers: []profiles.WorkerPlan{
		{Role: "p", Kind: profiles.KindPrefill, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", Bootstrap: "127.0.0.1:8998", DP: 1},
		{Role: "d", Kind: profiles.KindDecode, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 1},
	}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0") // bound, never served: requests go to the handler directly
	if err != nil {
		b.Fatal(err)
	}
	tr := &memTransport{}
	if mount == nil {
		mount = func(e tokenapi.Engine, mux *http.ServeMux, tok *tokenizer.Tokenizer) {
			openai.New(e, tok, openai.Options{}).Register(mux)
			generate.New(e, generate.Options{}).Register(mux)
		}
	}
	g, err := New(plan, Options{Listener: ln, Transport: tr, Mount: func(e tokenapi.Engine, mux *http.ServeMux) { mount(e, mux, tok) }})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Bind(context.Background()); err != nil {
		b.Fatal(err)
	}
	dp := &decodePath{g: g, h: g.srv.Handler, pre: newMemRank(true, 1, false), dec: newMemRank(false, perOut, lockstep), discard: ln}
	pw, _ := g.Lane().Worker("p")
	dw, _ := g.Lane().Worker("d")
	dp.pre.attach(b, tr, pw, "prefill")
	dp.dec.attach(b, tr, dw, "decode")
	waitReady(b, g)
	return dp
}

func (dp *decodePath) close() {
	dp.pre.close()
	dp.dec.close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = dp.g.Shutdown(ctx)
}

// serve runs one request through the gateway's handler into w.
func (dp *decodePath) serve(b *testing.B, path string, body []byte, w *discardWriter) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, path, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.RemoteAddr = "127.0.0.1:1"
	clear(w.h)
	w.status, w.n, w.done, w.errBody = 0, 0, false, w.errBody[:0]
	dp.h.ServeHTTP(w, req)
	if w.status != http.StatusOK || !w.done {
		b.Fatalf("%s: status %d, %d bytes, [DONE] %v: %s", path, w.status, w.n, w.done, w.errBody)
	}
}

// BenchmarkDecodePathChat is a chat stream's decode path per token
// (docs/architecture.md §14): lane output reader → dispatch → the chat
// SSE writer, one op one streamed request of 64 tokens. C=1 is paced
// (the rank sends the next output once the previous one was flushed);
// C=64 steps unpaced, one output message a step for every running rid.
// tok=K is K tokens per wire output. ns/token and cpu-µs/token are the
// 64-token requests'; allocs/token is the steady state (what a request
// of 64 tokens costs more than one of 16, per extra token, so request
// setup is left out), allocs/req that setup, allocs/msg the steady
// allocations per output message the lane read.
func BenchmarkDecodePathChat(b *testing.B) {
	benchDecodePath(b, func(tokens int) (string, []byte) {
		return "/v1/chat/completions", fmt.Appendf(nil, `{"model":"fake","stream":true,"max_tokens":%d,"min_tokens":%d,"ignore_eos":true,"messages":[{"role":"user","content":"hello there, how are you today?"}]}`, tokens, tokens)
	})
}

// BenchmarkDecodePathGenerate is BenchmarkDecodePathChat for /generate's
// SSE stream (token ids in, token ids out: no detokenizing).
func BenchmarkDecodePathGenerate(b *testing.B) {
	benchDecodePath(b, func(tokens int) (string, []byte) {
		return "/generate", fmt.Appendf(nil, `{"input_ids":[11,12,13,14,15,16,17,18],"stream":true,"sampling_params":{"max_new_tokens":%d,"ignore_eos":true}}`, tokens)
	})
}

func benchDecodePath(b *testing.B, body func(tokens int) (string, []byte)) {
	for _, c := range []struct{ conc, perOut int }{{1, 1}, {1, 8}, {64, 1}} {
		b.Run(fmt.Sprintf("C=%d/tok=%d", c.conc, c.perOut), func(b *testing.B) { benchDecodePathCase(b, c.conc, c.perOut, body) })
	}
}

func benchDecodePathCase(b *testing.B, conc, perOut int, body func(tokens int) (string, []byte)) {
	const long, short = 64, 16
	dp := newDecodePath(b, perOut, conc == 1)
	defer dp.close()
	writers := make([]*discardWriter, conc)
	for i := range writers {
		writers[i] = &discardWriter{h: http.Header{}, onFlush: dp.dec.flushed}
	}
	// run serves n requests of tokens each over conc clients.
	run := func(n, tokens int) {
		path, bd := body(tokens)
		var next atomic.Int64
		var wg sync.WaitGroup
		for _, w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					dp.serve(b, path, bd, w)
				}
			}()
		}
		wg.Wait()
	}
	// Warm: pools, free lists, buffers, the tokenizer's caches. Eight
	// rounds of conc requests, not two: at C=64 the free lists of stream
	// queues and SSE buffers were still filling after two, and the long
	// requests, measured first, counted that per token.
	run(8*conc, long)
	run(8*conc, short)
	var ms0, ms1, ms2 runtime.MemStats
	msgs0 := dp.dec.msgs.Load()
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	run(b.N, long)
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	msgsLong := dp.dec.msgs.Load() - msgs0
	run(b.N, short)
	runtime.ReadMemStats(&ms2)
	msgsShort := dp.dec.msgs.Load() - msgs0 - msgsLong

	nt := float64(b.N * long)
	aLong := float64(ms1.Mallocs - ms0.Mallocs)
	aShort := float64(ms2.Mallocs - ms1.Mallocs)
	perTok := (aLong - aShort) / float64(b.N*(long-short))
	b.ReportMetric(float64(el.Nanoseconds())/nt, "ns/token")
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/nt, "cpu-µs/token")
	b.ReportMetric(max(perTok, 0), "allocs/token")
	b.ReportMetric(aShort/float64(b.N)-float64(short)*perTok, "allocs/req")
	if dm := float64(msgsLong - msgsShort); dm > 0 {
		b.ReportMetric((aLong-aShort)/dm, "allocs/msg")
	}
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/nt, "B/token")
}
