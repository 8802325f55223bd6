package main

// The reliability rows of `make bench` (docs/protocol.md §11.9): two
// decode replicas under many concurrent streams while one of them is
// SIGKILLed again and again, with migration off and on; and a flapping
// decode whose circuit breaker must open and close again. Every figure is
// printed beside its target with pass or fail.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// relOptions size the reliability run.
type relOptions struct {
	streams, kills, tokens int
	tokensPerS             float64
	skip                   bool
}

// relRow is one figure of the reliability table.
type relRow struct {
	Case, Measure, Value, Target string
	Pass                         bool
	Note                         string
}

// relProfile is 1 prefill + decode-0 + decode-1 on paced ts-fake engines
// (streams last long enough to be cut), with extra gateway keys.
func relProfile(name, fake string, l layout, port int, tokensPerS float64, gateway, decode0Env string) string {
	env := ""
	if decode0Env != "" {
		env = ", env: {" + decode0Env + "}"
	}
	return fmt.Sprintf(`name: %s
model: ./model
engine:
  command: [%s]
  args: [--fake-startup, "0", --fake-tokens-per-s, "%g", --fake-eos-id, "-1", --fake-log-requests=false, --max-num-seqs, "1024"]
gateway:
  host: 127.0.0.1
  port: %d
%s
restart:
  backoff: 200ms
  max_backoff: 1s
  budget: 1000 in 10m
  stop_grace: 5s
roles:
  - {name: prefill, kind: prefill, gpus: [0]}
  - {name: decode-0, kind: decode, gpus: [1]%s}
  - {name: decode-1, kind: decode, gpus: [2]}
`, name, l.engineCommand(fake), tokensPerS, port, gateway, env)
}

func startRelDeployment(l layout, tsd, work, name string, profile func(port int) string) (*deployment, error) {
	dir, port, err := writeProfile(work, name, profile)
	if err != nil {
		return nil, err
	}
	srv, err := startServer(dir, l.wrap(l.tsd, upArgv(tsd, "p.yaml")...))
	if err != nil {
		return nil, err
	}
	d := &deployment{srv: srv, dir: dir, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	if err := waitRoles(srv, d.base, "prefill ", "decode-0 ", "decode-1 "); err != nil {
		srv.stop(15 * time.Second)
		return nil, err
	}
	return d, nil
}

// status is the deployment's snapshot (tsd status --json).
func (d *deployment) status(tsd string) (snapshot.Snapshot, error) {
	var s snapshot.Snapshot
	out, err := exec.Command(tsd, "status", "--json", "--socket", filepath.Join(stateDir(d.dir), "run", "tsd.sock")).Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		return s, fmt.Errorf("tsd status: %w", err)
	}
	return s, json.Unmarshal(out, &s)
}

// relOutcome is how one stream ended.
type relOutcome struct {
	ok        bool
	gotTokens int // tokens the client received before the end
	msg       string
}

// relLoad is `streams` clients, each sending streaming /generate requests
// of `tokens` tokens one after another until stop.
type relLoad struct {
	base   string
	tokens int
	hc     *http.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	res    []relOutcome
}

func startRelLoad(base string, streams, tokens int) *relLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &relLoad{base: base, tokens: tokens, cancel: cancel,
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: streams * 2}}}
	for i := range streams {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for seed := i * 1_000_000; ctx.Err() == nil; seed++ {
				r := l.one(seed)
				l.mu.Lock()
				l.res = append(l.res, r)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// stop lets every client finish its current request.
func (l *relLoad) stop() []relOutcome {
	l.cancel()
	l.wg.Wait()
	return l.res
}

func (l *relLoad) one(seed int) relOutcome {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body := fmt.Sprintf(`{"input_ids":[1,2,3,4,5,6,7,8],"stream":true,"sampling_params":{"max_new_tokens":%d,"min_new_tokens":%d,"ignore_eos":true,"seed":%d}}`, l.tokens, l.tokens, seed)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.base+"/generate", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.hc.Do(req)
	if err != nil {
		return relOutcome{msg: err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return relOutcome{msg: fmt.Sprintf("%d %s", resp.StatusCode, b)}
	}
	br := bufio.NewReader(resp.Body)
	got, finish, errMsg, done := 0, "", "", false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			break
		}
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var ev struct {
			OutputIDs []int `json:"output_ids"`
			MetaInfo  struct {
				FinishReason *struct{ Type, Message string } `json:"finish_reason"`
			} `json:"meta_info"`
			Error *struct{ Message string } `json:"error"`
		}
		if json.Unmarshal([]byte(data), &ev) != nil {
			return relOutcome{gotTokens: got, msg: "malformed event"}
		}
		if ev.Error != nil {
			errMsg = ev.Error.Message
			continue
		}
		got += len(ev.OutputIDs)
		if f := ev.MetaInfo.FinishReason; f != nil {
			finish = f.Type
			if f.Type == "abort" {
				errMsg = "abort: " + f.Message
			}
		}
	}
	switch {
	case errMsg != "":
		return relOutcome{gotTokens: got, msg: errMsg}
	case finish == "length" && got == l.tokens && done:
		return relOutcome{ok: true, gotTokens: got}
	}
	return relOutcome{gotTokens: got, msg: fmt.Sprintf("finish %q after %d of %d tokens, [DONE] %v", finish, got, l.tokens, done)}
}

// metricSum adds every sample of a /metrics series whose labels contain
// each of labels.
func metricSum(base, name string, labels ...string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? (\S+)$`)
scan:
	for sc.Scan() {
		m := re.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(m[1], l) {
				continue scan
			}
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		sum += v
	}
	return sum
}

func gatewayInFlight(s snapshot.Snapshot, role string) int {
	for _, r := range s.Gateway.Roles {
		if r.Role == role {
			return r.InFlight
		}
	}
	return 0
}

func roleOf(s snapshot.Snapshot, name string) (snapshot.RoleStatus, bool) {
	for _, r := range s.Roles {
		if r.Name == name {
			return r, true
		}
	}
	return snapshot.RoleStatus{}, false
}

// killUnderLoad runs the load and SIGKILLs decode-0's process group
// o.kills times, each once it carries streams and after it is ready again.
func killUnderLoad(o relOptions, l layout, tsd, fake, work string, migrate bool) ([]relRow, error) {
	name := "rel-nomigrate"
	if migrate {
		name = "rel-migrate"
	}
	gw := fmt.Sprintf("  retry: {migrate: %v}", migrate)
	d, err := startRelDeployment(l, tsd, work, name, func(port int) string {
		return relProfile(name, fake, l, port, o.tokensPerS, gw, "")
	})
	if err != nil {
		return nil, err
	}
	defer d.srv.stop(30 * time.Second)
	load := startRelLoad(d.base, o.streams, o.tokens)
	kills, carried := 0, 0
	var killErr error
	// Half a stream after decode-0 is (again) ready, its streams are
	// midway: a kill then cuts some that have tokens (migrations) and some
	// that have none yet (retries).
	half := time.Duration(float64(o.tokens) / o.tokensPerS / 2 * float64(time.Second))
	for kills < o.kills && killErr == nil {
		time.Sleep(half) // a driver: the streams' own pace, not an event
		// Kill it while it carries streams, so each kill cuts some.
		deadline := time.Now().Add(30 * time.Second)
		var dec snapshot.RoleStatus
		for {
			s, err := d.status(tsd)
			r, ok := roleOf(s, "decode-0")
			if err == nil && ok && r.State == snapshot.StateReady && r.PID > 0 && gatewayInFlight(s, "decode-0") >= max(1, o.streams/20) {
				dec, carried = r, carried+gatewayInFlight(s, "decode-0")
				break
			}
			if time.Now().After(deadline) {
				killErr = fmt.Errorf("decode-0 carried no streams within 30 s (state %s)", r.State)
				break
			}
			time.Sleep(20 * time.Millisecond) // a driver polling status: "carries streams" is no single event
		}
		if killErr != nil {
			break
		}
		from := d.srv.count()
		if err := syscall.Kill(-dec.PID, syscall.SIGKILL); err != nil {
			killErr = fmt.Errorf("kill decode-0: %w", err)
			break
		}
		kills++
		if _, _, err := d.srv.waitLine(from, 60*time.Second, "decode-0 ", "→ ready"); err != nil {
			killErr = err
		}
	}
	res := load.stop()
	if killErr != nil {
		return nil, killErr
	}
	var before, after int
	var sample []string
	for _, r := range res {
		switch {
		case r.ok:
		case r.gotTokens == 0:
			before++
		default:
			after++
		}
		if !r.ok && len(sample) < 3 {
			sample = append(sample, r.msg)
		}
	}
	retries := metricSum(d.base, "tsd_gateway_attempt_failures_total", `verdict="retry"`)
	migrations := metricSum(d.base, "tsd_gateway_attempt_failures_total", `verdict="migrate"`)
	c := fmt.Sprintf("2 decodes, %d streams × %d tokens, %d SIGKILLs of decode-0, migrate %v", o.streams, o.tokens, kills, migrate)
	note := fmt.Sprintf("%d requests; %d streams in flight on decode-0 at its kills; %.0f retries, %.0f migrations", len(res), carried, retries, migrations)
	if len(sample) > 0 {
		note += "; e.g. " + strings.Join(sample, " | ")
	}
	rows := []relRow{{Case: c, Measure: "client-visible failures of requests that had no token yet", Value: strconv.Itoa(before), Target: "0", Pass: before == 0, Note: note}}
	if migrate {
		rows = append(rows, relRow{Case: c, Measure: "client-visible failures, all (every stream ends with its finish and the tokens asked for)",
			Value: strconv.Itoa(before + after), Target: "0", Pass: before+after == 0})
	} else {
		rows = append(rows, relRow{Case: c, Measure: "failures of streams cut after their first token (migration off: no target)",
			Value: strconv.Itoa(after), Target: "–", Pass: true})
	}
	return rows, nil
}

// flappingBreaker runs sequential requests against a decode that aborts
// its first requests: its breaker must open, and close again after it
// recovered, with no client-visible failure.
func flappingBreaker(o relOptions, l layout, tsd, fake, work string) ([]relRow, error) {
	const aborts = 5
	gw := "  retry: {initial_backoff_ms: 5, max_backoff_ms: 50}\n  circuit_breaker: {failure_threshold: 3, success_threshold: 2, timeout_duration_secs: 1}"
	d, err := startRelDeployment(l, tsd, work, "rel-flap", func(port int) string {
		return relProfile("rel-flap", fake, l, port, 0, gw, fmt.Sprintf(`TS_FAKE_ABORT_REQUESTS: "%d"`, aborts))
	})
	if err != nil {
		return nil, err
	}
	defer d.srv.stop(30 * time.Second)
	load := &relLoad{base: d.base, tokens: 8, hc: &http.Client{}}
	var opened, closed time.Time
	start := time.Now()
	failures, sent := 0, 0
	for closed.IsZero() && time.Since(start) < 60*time.Second {
		if r := load.one(sent); !r.ok {
			failures++
		}
		sent++
		s, err := d.status(tsd)
		if err != nil {
			return nil, err
		}
		for _, b := range s.Gateway.Breakers {
			if b.Role != "decode-0" {
				continue
			}
			switch {
			case opened.IsZero() && b.State != snapshot.BreakerClosed:
				opened = time.Now()
			case !opened.IsZero() && b.State == snapshot.BreakerClosed:
				closed = time.Now()
			}
		}
	}
	c := fmt.Sprintf("decode-0 aborts its first %d requests; breaker failure_threshold 3, success_threshold 2, timeout_duration_secs 1", aborts)
	rows := []relRow{
		{Case: c, Measure: "breaker opened", Value: yesNo(!opened.IsZero()), Target: "yes", Pass: !opened.IsZero(),
			Note: fmt.Sprintf("%.0f closed → open transitions", metricSum(d.base, "smg_worker_cb_transitions_total", `worker="decode-0"`, `to="open"`))},
		{Case: c, Measure: "breaker closed again after the decode recovered", Value: yesNo(!closed.IsZero()), Target: "yes", Pass: !closed.IsZero()},
		{Case: c, Measure: "client-visible failures", Value: strconv.Itoa(failures), Target: "0", Pass: failures == 0, Note: fmt.Sprintf("%d sequential requests", sent)},
	}
	if !opened.IsZero() && !closed.IsZero() {
		rows[1].Note = "open → closed in " + fmtDur(closed.Sub(opened))
	}
	return rows, nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// runReliability is every reliability row; a case that could not run is
// a failed row saying why.
func runReliability(o relOptions, l layout, tsd, fake, work string) []relRow {
	var rows []relRow
	for _, migrate := range []bool{false, true} {
		fmt.Printf("reliability: %d streams, %d SIGKILLs of decode-0, migrate %v\n", o.streams, o.kills, migrate)
		r, err := killUnderLoad(o, l, tsd, fake, work, migrate)
		if err != nil {
			r = []relRow{{Case: fmt.Sprintf("SIGKILLs under load, migrate %v", migrate), Measure: "run", Value: "failed", Target: "runs", Note: firstLine(err.Error())}}
		}
		rows = append(rows, r...)
	}
	fmt.Println("reliability: a flapping decode's circuit breaker")
	r, err := flappingBreaker(o, l, tsd, fake, work)
	if err != nil {
		r = []relRow{{Case: "flapping decode", Measure: "run", Value: "failed", Target: "runs", Note: firstLine(err.Error())}}
	}
	rows = append(rows, r...)
	for _, r := range rows {
		fmt.Printf("  %s: %s = %s (target %s) %s\n", r.Case, r.Measure, r.Value, r.Target, passFail(r.Pass))
	}
	return rows
}

func passFail(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}

// renderReliability is the results file's reliability section.
func renderReliability(rows []relRow, o relOptions) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Reliability: a decode replica SIGKILLed under load, a flapping decode\n\n")
	fmt.Fprintf(&b, "One prefill and two decode ts-fake engines at %g tokens/s per stream, through `tsd up --headless` with the profile's retry and breaker defaults "+
		"(docs/protocol.md §11.9). %d clients stream `/generate` requests of exactly %d tokens one after another; decode-0's whole process group is SIGKILLed %d times, "+
		"each time while it carries streams and once it is ready again. A request failed before its first token if the client saw an error with no token received; "+
		"a stream succeeded if it ended with finish `length`, every token asked for and `[DONE]`. The run is made with `gateway.retry.migrate` off, then on.\n\n",
		o.tokensPerS, o.streams, o.tokens, o.kills)
	b.WriteString("| case | measure | value | target | result | note |\n|---|---|---:|---:|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", cell(r.Case), cell(r.Measure), r.Value, r.Target, passFail(r.Pass), cell(r.Note))
	}
	b.WriteString("\n")
	return b.String()
}
