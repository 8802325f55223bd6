package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/gateway/openai"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/internal/percentile"
	"github.com/tsd-project/tsd/profiles"
)

// BenchmarkChatSSE measures the whole chat streaming path per token, in one
// process: in-process fake ranks that answer at once (serveRaw: one output
// message per token) → lane → dispatch → the OpenAI front end's chat
// stream → HTTP → a lean client reading the SSE lines off a raw
// connection (so the client's own cost stays small next to the server's).
// The fake ranks step like an engine (serveStepped): one output message per
// step carrying a token for every running rid.
// One op is one streamed request of 64 tokens; C requests run at once.
// cpu-µs/token is the whole process's CPU (fake ranks and client
// included) per streamed token; allocs/token the heap allocations per
// token, request setup included.
func BenchmarkChatSSE(b *testing.B) {
	for _, c := range []int{1, 64} {
		b.Run(fmt.Sprintf("C=%d", c), func(b *testing.B) { benchChatSSE(b, c) })
	}
}

func benchChatSSE(b *testing.B, conc int) {
	const tokens = 64
	tok, err := tokenizer.Load("tokenizer/testdata/demo")
	if err != nil {
		b.Fatal(err)
	}
	plan := &profiles.Plan{ServedModelName: "fake", Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", Workers: []profiles.WorkerPlan{
		{Role: "p", Kind: profiles.KindPrefill, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", Bootstrap: "127.0.0.1:8998", DP: 1},
		{Role: "d", Kind: profiles.KindDecode, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 1},
	}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g, err := New(plan, Options{Listener: ln, Mount: func(e tokenapi.Engine, mux *http.ServeMux) {
		openai.New(e, tok, openai.Options{}).Register(mux)
	}})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Bind(context.Background()); err != nil {
		b.Fatal(err)
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- g.Serve(context.Background()) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
		<-serveDone
	}()
	pw, _ := g.Lane().Worker("p")
	dw, _ := g.Lane().Worker("d")
	pr := dialRawRank(b, pw.HandshakeEndpoint(), "prefill")
	dr := dialRawRank(b, dw.HandshakeEndpoint(), "decode")
	go serveStepped(pr, 1)
	go serveStepped(dr, tokens)
	waitReady(b, g)

	body := fmt.Sprintf(`{"model":"fake","stream":true,"max_tokens":%d,"min_tokens":%d,"ignore_eos":true,"messages":[{"role":"user","content":"hello there, how are you today?"}]}`, tokens, tokens)
	req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	addr := ln.Addr().String()
	clients := make([]*sseClient, conc)
	for i := range clients {
		c, err := dialSSE(addr, req)
		if err != nil {
			b.Fatal(err)
		}
		defer c.conn.Close()
		clients[i] = c
	}
	// Warm: one request per connection.
	for _, c := range clients {
		if n, err := c.stream(); err != nil || n != tokens {
			b.Fatalf("warm-up stream: %d content chunks, %v", n, err)
		}
	}
	for _, c := range clients {
		c.ttfts = make([]time.Duration, 0, 2*b.N/conc+16)
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	var toks atomicInt
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if next.Add(1) > int64(b.N) {
					return
				}
				n, err := c.stream()
				if err == nil && n != tokens {
					err = fmt.Errorf("stream of %d content chunks, want %d", n, tokens)
				}
				if err != nil {
					b.Error(err)
					return
				}
				toks.add(n)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	nt := float64(toks.get())
	if nt == 0 {
		b.Fatal("no tokens streamed")
	}
	var ttfts []time.Duration
	for _, c := range clients {
		ttfts = append(ttfts, c.ttfts...)
	}
	slices.Sort(ttfts)
	// Time to first token as the client sees it: at C=1 this is what the
	// gateway adds (the in-process ranks answer at once), the HTTP
	// round trip included.
	b.ReportMetric(float64(percentile.NearestRank(ttfts, 50).Microseconds()), "ttft-p50-µs")
	b.ReportMetric(nt/el.Seconds(), "tok/s")
	b.ReportMetric(float64(cpu.Microseconds())/nt, "cpu-µs/token")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/nt, "allocs/token")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/nt, "B/token")
}

// serveStepped is a rank that steps like an unpaced engine: each step
// takes every request already queued, then sends ONE output message with
// one token for each running rid (the ones reaching tokens finish), as a
// decode step's BatchTokenIDOutSlim does (docs/protocol.md).
func serveStepped(r *rawRank, tokens int) {
	type run struct {
		rid    string
		prompt int
		done   int
	}
	var active []run
	add := func(f [][]byte) {
		if f[0][0] != 0x00 {
			return
		}
		q, err := wire.DecodeGenerateRequest(f[1])
		if err == nil {
			active = append(active, run{rid: q.RID, prompt: len(q.InputIDs)})
		}
	}
	var ob wire.OutputBatch
	var buf []byte
	for {
		if len(active) == 0 {
			f, ok := <-r.frames
			if !ok {
				return
			}
			add(f)
		}
	drain:
		for {
			select {
			case f, ok := <-r.frames:
				if !ok {
					return
				}
				add(f)
			default:
				break drain
			}
		}
		n := len(active)
		ob.RIDs, ob.OutputIDs, ob.FinishedReasons = ob.RIDs[:0], ob.OutputIDs[:0], ob.FinishedReasons[:0]
		ob.PromptTokens, ob.CompletionTokens, ob.CachedTokens = ob.PromptTokens[:0], ob.CompletionTokens[:0], ob.CachedTokens[:0]
		ids := make([]int32, n)
		kept := active[:0]
		for i := range active {
			a := &active[i]
			a.done++
			ids[i] = int32(256 + a.done)
			fin := ""
			if a.done == tokens {
				fin = wire.FinishLength
			}
			ob.RIDs = append(ob.RIDs, a.rid)
			ob.OutputIDs = append(ob.OutputIDs, ids[i:i+1])
			ob.FinishedReasons = append(ob.FinishedReasons, fin)
			ob.PromptTokens = append(ob.PromptTokens, a.prompt)
			ob.CompletionTokens = append(ob.CompletionTokens, a.done)
			ob.CachedTokens = append(ob.CachedTokens, 0)
			if fin == "" {
				kept = append(kept, *a)
			}
		}
		active = kept
		buf, _ = wire.AppendOutput(buf[:0], ob)
		// SendMulti: zmq4 then writes header and body in one writev, as
		// libzmq does; Send writes them separately (two syscalls a message
		// that a real engine does not pay, counted in this process's CPU).
		if err := r.out.SendMulti(zmq4.NewMsg(bytes.Clone(buf))); err != nil {
			return
		}
	}
}

// sseClient is one keep-alive connection that sends the same request and
// counts the content chunks of the answer.
type sseClient struct {
	conn  net.Conn
	br    *bufio.Reader
	body  *bufio.Reader   // the decoded body, reused
	ttfts []time.Duration // request written → first content chunk read, per stream
	req   []byte
}

func dialSSE(addr, req string) (*sseClient, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &sseClient{conn: c, br: bufio.NewReaderSize(c, 64<<10), req: []byte(req)}, nil
}

var (
	dataContent = []byte(`"delta":{"content":"`)
	dataDone    = []byte("data: [DONE]")
)

// stream sends the request and reads the chunked SSE answer up to
// [DONE], counting chunks whose delta carries content. The transfer
// chunking is decoded first: the server coalesces events that are ready
// together, and a burst larger than its write buffer is split into
// chunks anywhere, mid-line too.
func (c *sseClient) stream() (int, error) {
	start := time.Now()
	if _, err := c.conn.Write(c.req); err != nil {
		return 0, err
	}
	// Status line and headers.
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200")) {
		return 0, fmt.Errorf("status %q", strings.TrimSpace(string(line)))
	}
	for {
		line, err = c.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			break
		}
	}
	if c.body == nil {
		c.body = bufio.NewReaderSize(nil, 64<<10)
	}
	c.body.Reset(httputil.NewChunkedReader(c.br))
	n, done := 0, false
	for {
		line, err = c.body.ReadSlice('\n')
		if err == io.EOF && len(line) == 0 {
			break
		}
		if err != nil {
			return n, err
		}
		switch {
		case bytes.HasPrefix(line, dataDone):
			done = true
		case bytes.HasPrefix(line, []byte("data: ")) && bytes.Contains(line, dataContent) && !bytes.Contains(line, []byte(`"content":""`)):
			if n == 0 {
				c.ttfts = append(c.ttfts, time.Since(start))
			}
			n++
		}
	}
	if !done {
		return n, errors.New("stream ended without [DONE]")
	}
	// The CRLF after the last (empty) chunk.
	_, err = c.br.ReadSlice('\n')
	return n, err
}
