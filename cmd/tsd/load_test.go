package main

// A bounded streaming load for end-to-end and chaos tests: N clients each
// send token-level streaming /generate requests one after another and
// classify how each ended. The verdicts are what a deployment under
// faults owes its clients: every request ends ok or with a clean error,
// none hangs, none is cut short without saying so.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// outcome is how one request ended.
type outcome int

const (
	outOK        outcome = iota // every token, a finish reason, [DONE]
	outCleanErr                 // an HTTP error or an SSE error event, with a message
	outHung                     // no end within the client's deadline
	outTruncated                // the stream stopped without a finish or an error
)

func (o outcome) String() string {
	return [...]string{"ok", "clean error", "hung", "truncated"}[o]
}

type loadResult struct {
	out    outcome
	msg    string
	dur    time.Duration
	maxGap time.Duration // longest wait between two bytes of the response
	start  time.Time
}

// load is a running set of clients.
type load struct {
	base      string
	tokens    int
	deadline  time.Duration
	hc        *http.Client
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	mu        sync.Mutex
	results   []loadResult
	inFlight  int
	firstDone chan struct{}
	once      sync.Once
	ids       string // the prompt's input_ids as JSON (startLoadPrompt)
}

// startLoad runs clients streaming requests of tokens tokens each until
// stop; a request with no end within deadline counts as hung.
func startLoad(base string, clients, tokens int, deadline time.Duration) *load {
	return startLoadPrompt(base, clients, tokens, 8, deadline)
}

// startLoadPrompt is startLoad with prompts of prompt tokens (the SLO
// planner's tests load a prefill with long ones).
func startLoadPrompt(base string, clients, tokens, prompt int, deadline time.Duration) *load {
	ctx, cancel := context.WithCancel(context.Background())
	ids := make([]string, prompt)
	for i := range ids {
		ids[i] = strconv.Itoa(1 + i%8)
	}
	if prompt > 8 {
		ids = ids[3:] // each request's first three tokens are its own (one): no prefix cache hit
	}
	l := &load{base: base, tokens: tokens, deadline: deadline, cancel: cancel, firstDone: make(chan struct{}), ids: "[" + strings.Join(ids, ",") + "]",
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients * 2}}}
	for i := 0; i < clients; i++ {
		l.wg.Add(1)
		go func(i int) {
			defer l.wg.Done()
			for seed := i * 1_000_000; ctx.Err() == nil; seed++ {
				l.mu.Lock()
				l.inFlight++
				l.mu.Unlock()
				r := l.one(ctx, seed)
				l.mu.Lock()
				l.inFlight--
				if ctx.Err() == nil || r.out != outCleanErr || !strings.Contains(r.msg, "context canceled") {
					l.results = append(l.results, r)
				}
				l.mu.Unlock()
				if r.out == outOK {
					l.once.Do(func() { close(l.firstDone) })
				}
				if r.out != outOK && ctx.Err() == nil {
					select { // an error answers at once: do not spin
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
		}(i)
	}
	return l
}

// stop ends the load: every client finishes its current request first,
// so nothing is cut by the test itself.
func (l *load) stop() []loadResult {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]loadResult(nil), l.results...)
}

func (l *load) snapshot() []loadResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]loadResult(nil), l.results...)
}

// one sends one streaming request. It is not bound to the load's ctx:
// stopping the load lets requests already sent finish.
func (l *load) one(loadCtx context.Context, seed int) loadResult {
	if loadCtx.Err() != nil {
		return loadResult{out: outCleanErr, msg: "context canceled"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.deadline)
	defer cancel()
	start := time.Now()
	res := loadResult{start: start}
	ids := l.ids
	if ids != "[1,2,3,4,5,6,7,8]" {
		ids = fmt.Sprintf("[%d,%d,%d,%s", 2+seed%997, 2+seed/997%997, 2+seed/994009%997, ids[1:])
	}
	body := fmt.Sprintf(`{"input_ids":%s,"stream":true,"sampling_params":{"max_new_tokens":%d,"ignore_eos":true,"seed":%d}}`, ids, l.tokens, seed)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.base+"/generate", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.hc.Do(req)
	done := func(o outcome, msg string) loadResult {
		res.out, res.msg, res.dur = o, msg, time.Since(start)
		if ctx.Err() != nil && o != outOK {
			res.out, res.msg = outHung, fmt.Sprintf("no end after %s (%s)", l.deadline, msg)
		}
		return res
	}
	if err != nil {
		// The gateway refused or dropped the connection: the client knows.
		return done(outCleanErr, err.Error())
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			return done(outCleanErr, fmt.Sprintf("%d %s", resp.StatusCode, e.Error.Message))
		}
		return done(outTruncated, fmt.Sprintf("%d without an error message: %q", resp.StatusCode, b))
	}
	br := bufio.NewReader(resp.Body)
	last := time.Now()
	got, finished, errMsg, sawDone := 0, "", "", false
	for {
		line, err := br.ReadString('\n')
		now := time.Now()
		res.maxGap = max(res.maxGap, now.Sub(last))
		last = now
		if err != nil {
			break
		}
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			sawDone = true
			continue
		}
		var ev struct {
			OutputIDs []int `json:"output_ids"`
			MetaInfo  struct {
				FinishReason *struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"finish_reason"`
			} `json:"meta_info"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(data), &ev) != nil {
			return done(outTruncated, "malformed event "+data)
		}
		if ev.Error != nil {
			errMsg = ev.Error.Message
			continue
		}
		got += len(ev.OutputIDs)
		if f := ev.MetaInfo.FinishReason; f != nil {
			finished = f.Type
			if f.Type == "abort" {
				errMsg = "abort: " + f.Message
			}
		}
	}
	switch {
	case errMsg != "":
		return done(outCleanErr, errMsg)
	case finished != "" && got == l.tokens && sawDone:
		return done(outOK, "")
	case finished != "":
		return done(outTruncated, fmt.Sprintf("finish %q after %d of %d tokens", finished, got, l.tokens))
	}
	return done(outTruncated, fmt.Sprintf("stream ended after %d of %d tokens with neither a finish nor an error", got, l.tokens))
}

// tally counts outcomes and keeps a few messages of each.
type tally struct {
	sent   int
	n      [4]int
	msgs   map[outcome][]string
	maxGap time.Duration
	maxDur time.Duration
}

func tallyOf(rs []loadResult) tally {
	t := tally{msgs: map[outcome][]string{}}
	for _, r := range rs {
		t.sent++
		t.n[r.out]++
		t.maxGap = max(t.maxGap, r.maxGap)
		t.maxDur = max(t.maxDur, r.dur)
		if r.out != outOK && len(t.msgs[r.out]) < 5 {
			t.msgs[r.out] = append(t.msgs[r.out], r.msg)
		}
	}
	return t
}

func (t tally) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sent %d: ok %d, clean errors %d, hung %d, truncated %d; longest request %s, longest silence %s",
		t.sent, t.n[outOK], t.n[outCleanErr], t.n[outHung], t.n[outTruncated], t.maxDur.Round(time.Millisecond), t.maxGap.Round(time.Millisecond))
	keys := make([]int, 0, len(t.msgs))
	for o := range t.msgs {
		keys = append(keys, int(o))
	}
	sort.Ints(keys)
	for _, o := range keys {
		fmt.Fprintf(&b, "\n  %s e.g.: %s", outcome(o), strings.Join(t.msgs[outcome(o)], " | "))
	}
	return b.String()
}

// prefillExtra gives the prefill the decode's restart block (chaos wants
// the same policy on both); other decode lines stay the decode's.
func prefillExtra(decode string) string {
	for _, l := range strings.Split(decode, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "restart:") {
			return l
		}
	}
	return ""
}

// fake1P2D writes a profile of one prefill with dp 2 and two decode
// replicas on ts-fake, with extra YAML appended, and starts `tsd up
// --headless` on it. It returns the deployment and the gateway URL.
func fake1P2D(t *testing.T, extra string, decodeEnv string) (*deployment, string) {
	t.Helper()
	dir := fakeProfileDir(t, "e2e14")
	port := freeCluster(t) // below the ephemeral range; its neighbours are reserved with it
	prof := fmt.Sprintf(`name: fake-1p2d
model: ./model
engine:
  command: [%s, serve]
  env: {TS_FAKE_TOKENS_PER_S: "100", TS_FAKE_STARTUP: 200ms}
gateway:
  port: %d
roles:
  - name: prefill
    kind: prefill
    dp: 2
    gpus: [0, 1]
%s
  - name: decode
    kind: decode
    replicas: 2
    gpus: [[2], [3]]
%s
restart:
  backoff: 200ms
  max_backoff: 2s
  budget: 1000 in 10m
  stop_grace: 5s
%s`, fakeBin, port, prefillExtra(decodeEnv), decodeEnv, extra)
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runTSD(t, dir, "up", "--headless", "p.yaml")
	for _, r := range []string{"prefill", "decode-0", "decode-1"} {
		d.waitLine(0, r, "→ ready")
	}
	return d, fmt.Sprintf("http://127.0.0.1:%d", port)
}
