package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Config is one run.
type Config struct {
	BaseURL        string // e.g. http://127.0.0.1:8000
	Backend        Backend
	Model          string
	APIKey         string
	Prompts        []Prompt
	RequestRate    float64 // requests/s, Poisson; +Inf or 0: all at once
	MaxConcurrency int     // 0: unbounded
	Seed           uint64
	// Progress, when set, is called from one goroutine after each request
	// finishes, with the count done so far.
	Progress func(done, total int)
	// Client overrides the HTTP client (tests); by default one with a
	// connection per concurrent request and no timeouts beyond ctx.
	Client *http.Client
}

// Run sends every prompt and returns the results in prompt order with the
// run's wall time (first send to last finish). A prompt with Turns is a
// conversation: its turns go out one after another, each once the answer
// before it is in, holding one concurrency slot throughout, and each is
// one result (in turn order). Cancelling ctx stops it: requests not yet
// sent come back NotSent and those it cut Cancelled, neither failed.
func Run(ctx context.Context, c Config) ([]Result, time.Duration, error) {
	if c.BaseURL == "" {
		return nil, 0, errors.New("no target: pass --base-url or a profile")
	}
	if len(c.Prompts) == 0 {
		return nil, 0, errors.New("no prompts")
	}
	if c.MaxConcurrency < 0 {
		return nil, 0, fmt.Errorf("--max-concurrency must not be negative, got %d", c.MaxConcurrency)
	}
	if math.IsNaN(c.RequestRate) || c.RequestRate < 0 {
		return nil, 0, fmt.Errorf("--request-rate must be positive or inf, got %g", c.RequestRate)
	}
	// A dataset the endpoint cannot take fails here, not once per request.
	if _, err := c.Backend.Body(c.Model, c.Prompts[0]); err != nil {
		return nil, 0, err
	}
	hc := c.Client
	if hc == nil {
		conns := c.MaxConcurrency
		if conns == 0 {
			conns = len(c.Prompts)
		}
		hc = &http.Client{Transport: &http.Transport{
			MaxIdleConns: conns, MaxIdleConnsPerHost: conns, DisableCompression: true,
			IdleConnTimeout: 90 * time.Second,
		}}
		defer hc.CloseIdleConnections()
	}
	arrive := Arrivals(len(c.Prompts), c.RequestRate, c.Seed)
	results := make([][]Result, len(c.Prompts))
	total := 0
	for _, p := range c.Prompts {
		total += 1 + len(p.Turns)
	}
	var sem chan struct{}
	if c.MaxConcurrency > 0 {
		sem = make(chan struct{}, c.MaxConcurrency)
	}
	// Progress is reported while requests are still being sent: with a
	// concurrency limit most finish before the last one goes out.
	finished := make(chan int, total)
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		n := 0
		for range finished {
			n++
			if c.Progress != nil {
				c.Progress(n, total)
			}
		}
	}()
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.NewTimer(0)
	<-timer.C
	sent := 0
send:
	for i, p := range c.Prompts {
		if wait := time.Until(start.Add(arrive[i])); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break send
			}
		}
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				break send
			}
		}
		if ctx.Err() != nil {
			// A slot and the stop can come together (select picks either):
			// a request the run was stopped before is not sent.
			if sem != nil {
				<-sem
			}
			break
		}
		sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0 // requests of this conversation reported finished
			done := func() { n++; finished <- i }
			defer func() {
				// A client bug must not take the whole run down.
				if v := recover(); v != nil {
					rs := results[i]
					for len(rs) < 1+len(p.Turns) {
						rs = append(rs, Result{Err: fmt.Sprintf("panic: %v", v)})
					}
					results[i] = rs
					for n < 1+len(p.Turns) {
						done()
					}
				}
				if sem != nil {
					<-sem
				}
			}()
			results[i] = converse(ctx, hc, c, p, done)
		}()
	}
	wg.Wait()
	close(finished)
	<-progressDone
	dur := time.Since(start)
	out := make([]Result, 0, total)
	for i, rs := range results {
		if i >= sent {
			rs = nil
			for range 1 + len(c.Prompts[i].Turns) {
				rs = append(rs, Result{Err: "not sent: " + context.Cause(ctx).Error(), NotSent: true, Class: c.Prompts[i].Class})
			}
		}
		out = append(out, rs...)
	}
	return out, dur, nil
}

// converse sends p, then each of its turns with the conversation so far
// (docs: Prompt.Turns), calling done after each request. A failed turn
// ends the conversation: the turns after it fail unsent.
func converse(ctx context.Context, hc *http.Client, c Config, p Prompt, done func()) []Result {
	if len(p.Turns) == 0 {
		r := Do(ctx, hc, c.BaseURL, c.APIKey, c.Backend, c.Model, p)
		done()
		return []Result{r}
	}
	out := make([]Result, 0, 1+len(p.Turns))
	cur := p
	cur.Turns = nil
	msgs := []chatMessage{{Role: "user", Content: p.Text}}
	for t := 0; ; t++ {
		if c.Backend == Chat {
			cur.messages = msgs
		}
		r, ans := do(ctx, hc, c.BaseURL, c.APIKey, c.Backend, c.Model, cur, t < len(p.Turns))
		out = append(out, r)
		done()
		if t == len(p.Turns) {
			return out
		}
		if !r.OK {
			for range p.Turns[t:] {
				nr := Result{Err: fmt.Sprintf("not sent: turn %d of the conversation failed", t), Class: p.Class}
				if ctx.Err() != nil {
					nr.Err, nr.NotSent = "not sent: "+context.Cause(ctx).Error(), true
				}
				out = append(out, nr)
				done()
			}
			return out
		}
		// The next turn: everything so far, the answer, the next question.
		q := p.Turns[t]
		msgs = append(msgs, chatMessage{Role: "assistant", Content: ans.text}, chatMessage{Role: "user", Content: q.Text})
		next := Prompt{OutputLen: q.OutputLen, RoutingKey: p.RoutingKey, Class: p.Class}
		next.Text = cur.Text + ans.text + "\n\n" + q.Text
		if cur.IDs != nil {
			next.IDs = append(append(append(make([]int32, 0, len(cur.IDs)+len(ans.ids)+len(q.IDs)), cur.IDs...), ans.ids...), q.IDs...)
		}
		next.InputLen = len(next.IDs)
		if next.IDs == nil {
			next.InputLen = cur.InputLen + r.OutputTokens + len(strings.Fields(q.Text))
		}
		cur = next
	}
}
