package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const ms1 = time.Millisecond

// ParseSLO reads vLLM's --goodput vocabulary, one pair an argument or
// several in one, and names the pair it refuses.
func TestParseSLO(t *testing.T) {
	for _, c := range []struct {
		in      []string
		want    SLO
		wantErr string
	}{
		{nil, SLO{}, ""},
		{[]string{"ttft:1000", "tpot:50"}, SLO{TTFT: 1000 * ms1, TPOT: 50 * ms1}, ""},
		{[]string{"ttft:1000 tpot:50 e2el:20000"}, SLO{TTFT: 1000 * ms1, TPOT: 50 * ms1, E2EL: 20000 * ms1}, ""},
		{[]string{"TTFT:250,tpot:12.5"}, SLO{TTFT: 250 * ms1, TPOT: 12500 * time.Microsecond}, ""},
		{[]string{"ttft"}, SLO{}, `"ttft": want NAME:MS`},
		{[]string{"itl:50"}, SLO{}, `"itl" is not an objective`},
		{[]string{"ttft:-1"}, SLO{}, "0 or more"},
		{[]string{"ttft:abc"}, SLO{}, "0 or more"},
		{[]string{"ttft:0"}, SLO{}, "can never be met"},
		{[]string{"ttft:1", "ttft:2"}, SLO{}, "given twice"},
	} {
		got, err := ParseSLO(c.in)
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParseSLO(%q) = %v, want error with %q", c.in, err, c.wantErr)
			}
		case err != nil:
			t.Errorf("ParseSLO(%q): %v", c.in, err)
		case got != c.want:
			t.Errorf("ParseSLO(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
	s := SLO{TTFT: 1000 * ms1, TPOT: 50 * ms1}
	if s.String() != "ttft<=1000ms tpot<=50ms" || s.Pairs() != "ttft:1000 tpot:50" {
		t.Errorf("String %q, Pairs %q", s.String(), s.Pairs())
	}
}

// Check names every objective a completed request broke; TPOT is vLLM's
// (time after the first token over the tokens after it, 0 for one token).
func TestSLOCheck(t *testing.T) {
	slo := SLO{TTFT: 100 * ms1, TPOT: 10 * ms1, E2EL: 1000 * ms1}
	for _, c := range []struct {
		name string
		r    Result
		want []string
	}{
		{"meets all", Result{OK: true, TTFT: 50 * ms1, Latency: 140 * ms1, OutputTokens: 10}, nil},
		{"at the limits", Result{OK: true, TTFT: 100 * ms1, Latency: 190 * ms1, OutputTokens: 10}, nil},
		{"slow first token", Result{OK: true, TTFT: 101 * ms1, Latency: 150 * ms1, OutputTokens: 10}, []string{"ttft"}},
		{"slow stream", Result{OK: true, TTFT: 50 * ms1, Latency: 150 * ms1, OutputTokens: 10}, []string{"tpot"}}, // 100/9 ms
		{"one token: tpot 0", Result{OK: true, TTFT: 90 * ms1, Latency: 900 * ms1, OutputTokens: 1}, nil},
		{"everything", Result{OK: true, TTFT: 200 * ms1, Latency: 2000 * ms1, OutputTokens: 2}, []string{"ttft", "tpot", "e2el"}},
	} {
		if got := slo.Check(c.r); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Check = %v, want %v", c.name, got, c.want)
		}
	}
	if got := (SLO{TTFT: 100 * ms1}).Check(Result{OK: true, TTFT: 50 * ms1, Latency: time.Hour, OutputTokens: 2}); got != nil {
		t.Errorf("an objective not given was judged: %v", got)
	}
}

// Judge: goodput is good requests over the run's seconds; failed
// requests are judged (never good), requests the stop kept back are not;
// shares per objective and per class.
func TestJudge(t *testing.T) {
	slo := SLO{TTFT: 100 * ms1, TPOT: 10 * ms1}
	good := Result{OK: true, TTFT: 50 * ms1, Latency: 100 * ms1, OutputTokens: 6, Class: ClassChat}
	slowFirst := Result{OK: true, TTFT: 500 * ms1, Latency: 550 * ms1, OutputTokens: 6, Class: ClassRAG}
	slowStream := Result{OK: true, TTFT: 50 * ms1, Latency: 1000 * ms1, OutputTokens: 6, Class: ClassChat}
	for _, c := range []struct {
		name string
		rs   []Result
		dur  time.Duration
		want Goodput
	}{
		{"empty", nil, time.Second, Goodput{SLO: slo.String()}},
		{"all good", []Result{good, good}, 2 * time.Second, Goodput{SLO: slo.String(), Goodput: 1, Good: 2, Judged: 2, Attainment: 1,
			ByClass: map[string]ClassGoodput{ClassChat: {Judged: 2, Good: 2, Attainment: 1}}}},
		{"mixed", []Result{good, slowFirst, slowStream, {Err: "boom", Class: ClassRAG}, {NotSent: true, Class: ClassChat}, {Cancelled: true}}, 4 * time.Second,
			Goodput{SLO: slo.String(), Goodput: 0.25, Good: 1, Judged: 4, Attainment: 0.25, FailedShare: 0.25,
				Broke: map[string]float64{"ttft": 0.25, "tpot": 0.25},
				ByClass: map[string]ClassGoodput{
					ClassChat: {Judged: 2, Good: 1, Attainment: 0.5, Broke: map[string]float64{"tpot": 0.5}},
					ClassRAG:  {Judged: 2, Good: 0, Attainment: 0, Broke: map[string]float64{"ttft": 0.5}},
				}}},
	} {
		got := Judge(c.rs, c.dur, slo)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
	g := Judge([]Result{slowStream, slowStream, slowFirst}, time.Second, slo)
	if name, share := g.Worst(); name != "tpot" || math.Abs(share-2.0/3) > 1e-9 {
		t.Errorf("Worst = %s %g, want tpot 2/3", name, share)
	}
}

// The summary table prints goodput beside throughput, the SLO and its
// attainment, and P90 beside P99; the JSON has vLLM's request_goodput.
func TestSummaryGoodputRows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	rs := []Result{
		{OK: true, Start: t0, TTFT: 10 * ms1, Latency: 20 * ms1, OutputTokens: 2},
		{OK: true, Start: t0, TTFT: 300 * ms1, Latency: 310 * ms1, OutputTokens: 2},
	}
	s := Summarize(rs, 2*time.Second)
	s.Judge(rs, SLO{TTFT: 100 * ms1})
	if s.RequestGoodput == nil || *s.RequestGoodput != 0.5 {
		t.Fatalf("request_goodput %v, want 0.5", s.RequestGoodput)
	}
	var b bytes.Buffer
	s.WriteTable(&b)
	for _, want := range []string{
		"Request goodput (req/s):                 0.50",
		"SLO (--goodput):                         ttft<=100ms",
		"SLO attainment:                          50.0% (1 of 2)",
		"P90 TTFT (ms):", "P90 ITL (ms):",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	plain := Summarize(rs, 2*time.Second)
	plain.Judge(rs, SLO{})
	b.Reset()
	plain.WriteTable(&b)
	if strings.Contains(b.String(), "goodput") || plain.Goodput != nil {
		t.Errorf("goodput printed without an SLO:\n%s", b.String())
	}
}

// The peak of requests in flight is an instant's count, which never
// exceeds the concurrency limit; upstream's 1 s-bin figure is printed
// under a label that says what it counts (it used to read "Peak
// concurrent requests: 109" beside "Maximum request concurrency: 8").
func TestPeakInFlightIsDefined(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var rs []Result
	// 20 requests of 10 ms one after another on each of 2 connections:
	// 40 requests overlap the first second, never more than 2 at once.
	for c := range 2 {
		for i := range 20 {
			rs = append(rs, Result{OK: true, Start: t0.Add(time.Duration(i*10)*ms1 + time.Duration(c)*ms1), TTFT: ms1, Latency: 10 * ms1, OutputTokens: 1})
		}
	}
	s := Summarize(rs, time.Second)
	if s.MaxInFlight != 2 || s.MaxConcurrentReqs != 40 {
		t.Fatalf("in flight %d (want 2), per 1 s bin %d (want 40)", s.MaxInFlight, s.MaxConcurrentReqs)
	}
	var b bytes.Buffer
	s.WriteTable(&b)
	for _, want := range []string{"Peak requests in flight at once:         2", "Peak requests active in one 1 s bin:     40"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "Peak concurrent requests:") {
		t.Errorf("the undefined label is back:\n%s", b.String())
	}
}

// A run stopped midway (Ctrl-C, SIGTERM): the requests it never sent and
// those it cut in flight are not failures (they used to be counted
// failed), and goodput does not judge them.
func TestStoppedRunIsNotFailures(t *testing.T) {
	third, end := make(chan struct{}), make(chan struct{})
	var started atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := started.Add(1); n > 2 {
			// The third is held until the client goes away.
			if n == 3 {
				close(third)
			}
			select {
			case <-r.Context().Done():
			case <-end:
			}
			return
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	defer close(end)
	ps, _ := Random(RandomOptions{N: 10, InputLen: 3, OutputLen: 1, Seed: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-third: // the third request is in flight: stop the run
		case <-time.After(30 * time.Second):
		}
		cancel()
	}()
	rs, dur, err := Run(ctx, Config{BaseURL: srv.URL, Backend: Chat, Prompts: ps, MaxConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(rs, dur)
	if s.Completed != 2 || s.Failed != 0 || s.Cancelled != 1 || s.NotSent != 7 {
		t.Fatalf("completed %d failed %d cancelled %d not sent %d; want 2, 0, 1, 7\n%+v", s.Completed, s.Failed, s.Cancelled, s.NotSent, s.Errors)
	}
	if g := Judge(rs, dur, SLO{TTFT: time.Hour}); g.Judged != 2 || g.Good != 2 {
		t.Fatalf("judged %d good %d, want 2 and 2", g.Judged, g.Good)
	}
	var b bytes.Buffer
	s.WriteTable(&b)
	if !strings.Contains(b.String(), "Not sent (the run was stopped):          7") || !strings.Contains(b.String(), "Failed requests:                         0") {
		t.Fatalf("table:\n%s", b.String())
	}
}
