package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tsd-project/tsd/loadgen"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/supervisor"
)

// benchCmd is `tsd bench`: a serving benchmark against a running
// deployment, with the flags and result fields of upstream's `ts bench
// serve` (and SGLang's bench_serving), so their numbers compare directly.
type benchCmd struct {
	ctlTarget
	Target string `arg:"" optional:"" complete:"deployment|file" help:"Profile YAML (its gateway host:port is the target) or the name of the deployment running here; default: --base-url, else the tsd in this directory."`

	BaseURL        string  `name:"base-url" help:"Server base URL, e.g. http://127.0.0.1:8000 (instead of a profile)."`
	Host           string  `name:"host" help:"Server host, with --port (instead of --base-url)."`
	Port           int     `name:"port" help:"Server port, with --host (default host 127.0.0.1)."`
	Backend        string  `name:"backend" default:"chat" help:"chat (/v1/chat/completions), completions (/v1/completions) or generate (/generate, token ids); upstream's names openai-chat, openai, sglang also work."`
	Model          string  `name:"model" help:"Model name sent in requests (default: the server's first in /v1/models)."`
	DatasetName    string  `name:"dataset-name" default:"random" enum:"random,file,generated-shared-prefix" help:"random, file (with --dataset-path), or generated-shared-prefix (--gsp-*: groups of prompts sharing a system prompt; --num-prompts does not apply)."`
	DatasetPath    string  `name:"dataset-path" help:"Prompt file: one prompt per line, plain text or JSONL with prompt/text/input_ids (and output_len)."`
	NumPrompts     int     `name:"num-prompts" default:"1000" help:"Requests to send."`
	InputLen       int     `name:"random-input-len" default:"1024" help:"Prompt tokens per random request."`
	OutputLen      int     `name:"random-output-len" default:"128" help:"Output tokens per request (exact: max and min tokens, ignore_eos)."`
	InputLenAlias  *int    `name:"input-len" help:"Same as --random-input-len."`
	OutputLenAlias *int    `name:"output-len" help:"Same as --random-output-len (and the output length of file prompts)."`
	RangeRatio     float64 `name:"random-range-ratio" default:"0" help:"Draw lengths from [len·(1−r), len·(1+r)]."`
	RequestRate    string  `name:"request-rate" default:"inf" help:"Requests per second (Poisson arrivals), or inf to send all at once."`
	MaxConcurrency int     `name:"max-concurrency" help:"At most this many requests in flight (0: no limit)."`
	Seed           uint64  `name:"seed" default:"0" help:"Seed of the dataset and the arrivals."`
	NumWarmups     int     `name:"num-warmups" default:"0" help:"Requests sent (with the first prompt, at --max-concurrency) before the measured run; not counted."`
	OutputFile     string  `name:"output-file" help:"Write the results as JSON here."`
	DisableTqdm    bool    `name:"disable-tqdm" help:"No progress bar (plain progress lines are still printed off a terminal)."`
	APIKeyEnv      string  `name:"api-key-env" default:"OPENAI_API_KEY" help:"Environment variable holding a bearer token, if set."`

	// generated-shared-prefix, with upstream bench_serving's names and
	// defaults.
	GSPNumGroups       int     `name:"gsp-num-groups" default:"64" help:"generated-shared-prefix: system prompts (groups)."`
	GSPPromptsPerGroup int     `name:"gsp-prompts-per-group" default:"16" help:"generated-shared-prefix: prompts sharing each system prompt."`
	GSPSystemPromptLen int     `name:"gsp-system-prompt-len" default:"2048" help:"generated-shared-prefix: system prompt tokens."`
	GSPQuestionLen     int     `name:"gsp-question-len" default:"128" help:"generated-shared-prefix: question tokens after the system prompt (and per later turn)."`
	GSPOutputLen       int     `name:"gsp-output-len" default:"256" help:"generated-shared-prefix: output tokens per request."`
	GSPRangeRatio      float64 `name:"gsp-range-ratio" default:"1.0" help:"generated-shared-prefix: lengths drawn from [len·r, len] (1: exact)."`
	GSPNumTurns        int     `name:"gsp-num-turns" default:"1" help:"generated-shared-prefix: turns per conversation; each turn sends the conversation so far (questions and answers) plus a new question."`
	GSPOrdered         bool    `name:"gsp-ordered" help:"generated-shared-prefix: keep the prompts in group order (default: shuffled)."`
	GSPSendRoutingKey  bool    `name:"gsp-send-routing-key" help:"generated-shared-prefix: send X-SMG-Routing-Key, one key per group."`
}

func (c benchCmd) Run() error {
	base, model, keyEnv, err := c.target()
	if err != nil {
		return err
	}
	backend, err := loadgen.ParseBackend(c.Backend)
	if err != nil {
		return err
	}
	rate, err := parseRate(c.RequestRate)
	if err != nil {
		return err
	}
	in, out := c.InputLen, c.OutputLen
	if c.InputLenAlias != nil {
		in = *c.InputLenAlias
	}
	if c.OutputLenAlias != nil {
		out = *c.OutputLenAlias
	}
	var prompts []loadgen.Prompt
	switch {
	case c.DatasetPath != "":
		prompts, err = loadgen.LoadFile(c.DatasetPath, c.NumPrompts, out)
	case c.DatasetName == "file":
		err = errors.New("--dataset-name file needs --dataset-path")
	case c.DatasetName == "generated-shared-prefix":
		prompts, err = loadgen.GeneratedSharedPrefix(loadgen.SharedPrefixOptions{NumGroups: c.GSPNumGroups, PromptsPerGroup: c.GSPPromptsPerGroup,
			SystemPromptLen: c.GSPSystemPromptLen, QuestionLen: c.GSPQuestionLen, OutputLen: c.GSPOutputLen, RangeRatio: c.GSPRangeRatio,
			NumTurns: c.GSPNumTurns, Ordered: c.GSPOrdered, RoutingKey: c.GSPSendRoutingKey, Seed: c.Seed})
	default:
		prompts, err = loadgen.Random(loadgen.RandomOptions{N: c.NumPrompts, InputLen: in, OutputLen: out, RangeRatio: c.RangeRatio, Seed: c.Seed})
	}
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	apiKey := ""
	if c.APIKeyEnv != "" {
		apiKey = os.Getenv(c.APIKeyEnv)
	}
	if apiKey == "" && keyEnv != "" {
		apiKey = os.Getenv(keyEnv) // the profile's gateway.api_key_env
	}
	if c.Model != "" {
		model = c.Model
	}
	if model == "" {
		if model, err = firstModel(ctx, base, apiKey); err != nil {
			return err
		}
	}
	requests := 0
	for _, p := range prompts {
		requests += 1 + len(p.Turns)
	}
	fmt.Printf("Target %s (%s), model %s, %d prompts, request rate %s, max concurrency %d\n",
		base, backend.Path(), model, len(prompts), c.RequestRate, c.MaxConcurrency)
	if c.DatasetName == "generated-shared-prefix" {
		fmt.Printf("generated-shared-prefix: %d groups × %d prompts, system prompt %d tokens, question %d, output %d, %d turn(s): %d requests\n",
			c.GSPNumGroups, c.GSPPromptsPerGroup, c.GSPSystemPromptLen, c.GSPQuestionLen, c.GSPOutputLen, c.GSPNumTurns, requests)
	}
	if c.NumWarmups > 0 {
		warm := make([]loadgen.Prompt, c.NumWarmups)
		for i := range warm {
			warm[i] = prompts[0]
			warm[i].Turns = nil // one request each
		}
		fmt.Printf("Warming up with %d requests...\n", len(warm))
		rs, _, err := loadgen.Run(ctx, loadgen.Config{BaseURL: base, Backend: backend, Model: model, APIKey: apiKey,
			Prompts: warm, RequestRate: math.Inf(1), MaxConcurrency: c.MaxConcurrency})
		if err != nil {
			return fmt.Errorf("warm up: %w", err)
		}
		for _, r := range rs {
			if !r.OK {
				return fmt.Errorf("warm-up request failed: %s", r.Err)
			}
		}
	}
	prog := newProgress(os.Stderr, isTerminal(os.Stderr) && !c.DisableTqdm)
	rs, dur, err := loadgen.Run(ctx, loadgen.Config{BaseURL: base, Backend: backend, Model: model, APIKey: apiKey,
		Prompts: prompts, RequestRate: rate, MaxConcurrency: c.MaxConcurrency, Seed: c.Seed, Progress: prog.update})
	prog.finish()
	if err != nil {
		return fmt.Errorf("run benchmark: %w", err)
	}
	s := loadgen.Summarize(rs, dur)
	s.Meta(time.Now().UTC().Format("20060102-150405"), string(backend), base, model, requests, rate, c.MaxConcurrency)
	s.WriteTable(os.Stdout)
	if c.OutputFile != "" {
		if err := s.WriteJSON(c.OutputFile); err != nil {
			return err
		}
	}
	if s.Completed == 0 {
		return &exitError{code: 1, msg: "tsd bench: every request failed"}
	}
	return nil
}

// target resolves the server: --base-url, --host/--port, a profile's
// gateway (with its served model and API key variable), or the gateway of
// the tsd running here (by name, or the only one).
func (c benchCmd) target() (base, model, keyEnv string, err error) {
	switch {
	case c.BaseURL != "":
		return strings.TrimRight(c.BaseURL, "/"), "", "", nil
	case c.Port != 0 || c.Host != "":
		if c.Port <= 0 || c.Port > 65535 {
			return "", "", "", fmt.Errorf("--port %d: want 1-65535 (with --host)", c.Port)
		}
		host := c.Host
		if host == "" {
			host = "127.0.0.1"
		}
		return "http://" + net.JoinHostPort(host, strconv.Itoa(c.Port)), "", "", nil
	case c.Target != "" && isProfileArg(c.Target):
		_, plan, errs := profiles.LoadPlan(c.Target, profiles.LocalHostFacts())
		if plan == nil {
			return "", "", "", profileErrors(errs)
		}
		return "http://" + dialable(plan.Gateway.Listen), plan.ServedModelName, plan.Gateway.APIKeyEnv, nil
	}
	path, err := c.resolve(c.Target)
	if err != nil {
		return "", "", "", fmt.Errorf("find the deployment to benchmark: %w", err)
	}
	ctx, cancel := ctlContext()
	defer cancel()
	s, err := supervisor.NewControlClient(path).Status(ctx)
	if err != nil {
		return "", "", "", fmt.Errorf("ask tsd for its gateway: %w", err)
	}
	if s.Gateway.URL == "" {
		return "", "", "", fmt.Errorf("the tsd at %s runs no gateway", path)
	}
	return strings.TrimRight(s.Gateway.URL, "/"), "", "", nil
}

// dialable turns a listen address into one a client can dial (a wildcard
// host means this machine).
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func parseRate(s string) (float64, error) {
	if strings.EqualFold(s, "inf") {
		return math.Inf(1), nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 || math.IsNaN(v) {
		return 0, fmt.Errorf("--request-rate %q: want a positive number or inf", s)
	}
	return v, nil
}

// firstModel asks the server's /v1/models, as upstream's bench does when
// no --model is given.
func firstModel(ctx context.Context, base, apiKey string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", fmt.Errorf("ask %s for its model: %w", base, err)
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("ask %s for its model (pass --model to skip): %w", base, err)
	}
	defer resp.Body.Close()
	var v struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v); err != nil || resp.StatusCode != http.StatusOK || len(v.Data) == 0 {
		return "", fmt.Errorf("GET %s/v1/models: %s, no model listed (pass --model)", base, resp.Status)
	}
	return v.Data[0].ID, nil
}

// progress draws a bar on a terminal and prints a plain line every 10%
// (and at most every 5 s) otherwise. update is called from one goroutine.
type progress struct {
	w     io.Writer
	tty   bool
	start time.Time
	mu    sync.Mutex
	last  time.Time
	step  int
	done  int
	total int
}

func newProgress(w io.Writer, tty bool) *progress {
	return &progress{w: w, tty: tty, start: time.Now()}
}

func (p *progress) update(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.total = done, total
	now := time.Now()
	el := now.Sub(p.start).Seconds()
	if p.tty {
		if now.Sub(p.last) < 100*time.Millisecond && done < total {
			return
		}
		p.last = now
		const width = 40
		fill := width * done / max(total, 1)
		fmt.Fprintf(p.w, "\r%3d%%|%s%s| %d/%d [%.1fs, %.1f req/s]", 100*done/max(total, 1),
			strings.Repeat("█", fill), strings.Repeat(" ", width-fill), done, total, el, float64(done)/max(el, 1e-9))
		return
	}
	step := 10 * done / max(total, 1)
	if step > p.step || (now.Sub(p.last) >= 5*time.Second && done < total) {
		p.step, p.last = step, now
		fmt.Fprintf(p.w, "progress: %d/%d requests (%.1fs)\n", done, total, el)
	}
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.done > 0 {
		fmt.Fprintln(p.w)
	}
}
