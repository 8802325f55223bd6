package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
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
// run's wall time (first send to last finish). Cancelling ctx stops it:
// requests not yet sent count as failed.
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
	results := make([]Result, len(c.Prompts))
	var sem chan struct{}
	if c.MaxConcurrency > 0 {
		sem = make(chan struct{}, c.MaxConcurrency)
	}
	// Progress is reported while requests are still being sent: with a
	// concurrency limit most finish before the last one goes out.
	finished := make(chan int, len(c.Prompts))
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		n := 0
		for range finished {
			n++
			if c.Progress != nil {
				c.Progress(n, len(c.Prompts))
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
		sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				// A client bug must not take the whole run down.
				if v := recover(); v != nil {
					results[i] = Result{Err: fmt.Sprintf("panic: %v", v)}
				}
				if sem != nil {
					<-sem
				}
				finished <- i
			}()
			results[i] = Do(ctx, hc, c.BaseURL, c.APIKey, c.Backend, c.Model, p)
		}()
	}
	wg.Wait()
	close(finished)
	<-progressDone
	dur := time.Since(start)
	for i := sent; i < len(results); i++ {
		results[i] = Result{Err: "not sent: " + context.Cause(ctx).Error()}
	}
	return results, dur, nil
}
