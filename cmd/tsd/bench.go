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

	"github.com/tsd-project/tsd/gateway/tokenizer"
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

	BaseURL        string   `name:"base-url" help:"Server base URL, e.g. http://127.0.0.1:8000 (instead of a profile)."`
	Host           string   `name:"host" help:"Server host, with --port (instead of --base-url)."`
	Port           int      `name:"port" help:"Server port, with --host (default host 127.0.0.1)."`
	Backend        string   `name:"backend" default:"chat" help:"chat (/v1/chat/completions), completions (/v1/completions) or generate (/generate, token ids); upstream's names openai-chat, openai, sglang also work."`
	Model          string   `name:"model" help:"Model name sent in requests (default: the server's first in /v1/models)."`
	DatasetName    string   `name:"dataset-name" default:"random" enum:"random,file,generated-shared-prefix,mixed" help:"random, file (with --dataset-path), generated-shared-prefix (--gsp-*: groups of prompts sharing a system prompt; --num-prompts does not apply), or mixed (--mixed-*: short chat turns sharing a system prompt beside long RAG prompts)."`
	DatasetPath    string   `name:"dataset-path" help:"Prompt file: one prompt per line, plain text or JSONL with prompt/text/input_ids (and output_len)."`
	NumPrompts     int      `name:"num-prompts" default:"1000" help:"Requests to send."`
	InputLen       int      `name:"random-input-len" default:"1024" help:"Prompt tokens per random request."`
	OutputLen      int      `name:"random-output-len" default:"128" help:"Output tokens per request (exact: max and min tokens, ignore_eos)."`
	InputLenAlias  *int     `name:"input-len" help:"Same as --random-input-len."`
	OutputLenAlias *int     `name:"output-len" help:"Same as --random-output-len (and the output length of file prompts)."`
	RangeRatio     float64  `name:"random-range-ratio" default:"0" help:"Draw lengths from [len·(1−r), len·(1+r)]."`
	RequestRate    string   `name:"request-rate" default:"inf" help:"Requests per second (Poisson arrivals), inf to send all at once, or a list (1,2,4,8): a sweep, one run per rate, goodput against rate."`
	MaxConcurrency int      `name:"max-concurrency" help:"At most this many requests in flight (0: no limit)."`
	Seed           uint64   `name:"seed" default:"0" help:"Seed of the dataset and the arrivals."`
	NumWarmups     int      `name:"num-warmups" default:"0" help:"Requests sent (with the first prompt, at --max-concurrency) before the measured run; not counted."`
	OutputFile     string   `name:"output-file" help:"Write the results as JSON here."`
	DisableTqdm    bool     `name:"disable-tqdm" help:"No progress bar (plain progress lines are still printed off a terminal)."`
	APIKeyEnv      string   `name:"api-key-env" default:"OPENAI_API_KEY" help:"Environment variable holding a bearer token, if set (a profile's gateway.api_key_env is tried after it)."`
	Goodput        []string `name:"goodput" placeholder:"NAME:MS" help:"Service level objectives in vLLM's words: ttft:MS tpot:MS e2el:MS (space- or comma-separated). Goodput is the requests per second that met every one; it is printed beside throughput."`
	Tokenizer      string   `name:"tokenizer" help:"Tokenizer folder (tokenizer.json) that text prompts are counted in (default: the profile's); without one a word counts as a token."`

	// Layouts compared (bench_layouts.go).
	Layouts       []string      `name:"layouts" placeholder:"A.yaml,B.yaml" help:"Compare serving layouts: profiles brought up one after another on the same GPUs, each started, warmed, measured at every --request-rate and stopped; the report names the layout with the highest goodput and why."`
	FakeGPUs      int           `name:"fake-gpus" help:"With --layouts: start each layout with tsd up --fake-gpus N (simulated GPUs, as make demo)."`
	LayoutTimeout time.Duration `name:"layout-timeout" default:"10m" help:"With --layouts: how long one layout may take to be ready."`
	Plot          string        `name:"plot" placeholder:"FILE.png" help:"Draw goodput and TTFT against request rate, one line per layout (or the target), as a PNG."`

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

	// mixed: short chat turns beside long RAG prompts (loadgen.Mixed).
	MixedLongShare       float64 `name:"mixed-long-share" default:"0.3" help:"mixed: share of the requests that are long RAG prompts."`
	MixedSystemPrompts   int     `name:"mixed-system-prompts" default:"4" help:"mixed: distinct system prompts the chat turns share."`
	MixedSystemPromptLen int     `name:"mixed-system-prompt-len" default:"150" help:"mixed: tokens of each system prompt."`
	MixedChatLen         int     `name:"mixed-chat-len" default:"50" help:"mixed: tokens of a chat question after the system prompt."`
	MixedChatOutputLen   int     `name:"mixed-chat-output-len" default:"128" help:"mixed: output tokens of a chat turn."`
	MixedChatTurns       int     `name:"mixed-chat-turns" default:"1" help:"mixed: turns per chat conversation (each sends the conversation so far); every turn is one of --num-prompts."`
	MixedRAGLen          int     `name:"mixed-rag-len" default:"6000" help:"mixed: tokens of a RAG prompt."`
	MixedRAGOutputLen    int     `name:"mixed-rag-output-len" default:"128" help:"mixed: output tokens of a RAG prompt."`
	MixedRangeRatio      float64 `name:"mixed-range-ratio" default:"1.0" help:"mixed: lengths drawn from [len·r, len] (1: exact)."`
}

func (c benchCmd) Run() error {
	backend, err := loadgen.ParseBackend(c.Backend)
	if err != nil {
		return err
	}
	rates, err := parseRates(c.RequestRate)
	if err != nil {
		return err
	}
	slo, err := loadgen.ParseSLO(c.Goodput)
	if err != nil {
		return err
	}
	if len(c.Layouts) > 0 {
		return c.runLayouts(backend, rates, slo)
	}
	if c.FakeGPUs != 0 {
		return errors.New("--fake-gpus goes with --layouts (tsd bench starts those deployments; a running one has its own GPUs)")
	}
	t, err := c.target()
	if err != nil {
		return err
	}
	count, err := c.tokenCounter(t.tokenizer)
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	if err := c.resolveModel(ctx, &t); err != nil {
		return err
	}
	if len(rates) > 1 || c.Plot != "" {
		return c.runSweep(ctx, backend, rates, slo, t, count)
	}
	prompts, err := c.dataset(c.Seed, count)
	if err != nil {
		return err
	}
	requests := countRequests(prompts)
	fmt.Printf("Target %s (%s), model %s, %d prompts, request rate %s, max concurrency %d\n",
		t.base, backend.Path(), t.model, len(prompts), c.RequestRate, c.MaxConcurrency)
	c.describeDataset(requests)
	if err := c.warmUp(ctx, backend, t, prompts, c.NumWarmups); err != nil {
		return err
	}
	prog := newProgress(os.Stderr, isTerminal(os.Stderr) && !c.DisableTqdm)
	rs, dur, err := loadgen.Run(ctx, loadgen.Config{BaseURL: t.base, Backend: backend, Model: t.model, APIKey: t.apiKey,
		Prompts: prompts, RequestRate: rates[0], MaxConcurrency: c.MaxConcurrency, Seed: c.Seed, Progress: prog.update})
	prog.finish()
	if err != nil {
		return fmt.Errorf("run benchmark: %w", err)
	}
	s := loadgen.Summarize(rs, dur)
	s.Meta(time.Now().UTC().Format("20060102-150405"), string(backend), t.base, t.model, requests, rates[0], c.MaxConcurrency)
	s.Judge(rs, slo)
	s.WriteTable(os.Stdout)
	if c.OutputFile != "" {
		if err := s.WriteJSON(c.OutputFile); err != nil {
			return err
		}
	}
	if s.Completed == 0 && s.NotSent+s.Cancelled < requests {
		return &exitError{code: 1, msg: "tsd bench: every request failed"}
	}
	return nil
}

// goodputArgs lets `--goodput` take vLLM's space-separated pairs
// (`--goodput ttft:1000 tpot:50`): the pairs after the flag join its
// value, so kong does not read the second as the bench's target. Only
// words shaped NAME:VALUE with an objective's name are taken.
func goodputArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if a == "--" {
			return append(out, args[i+1:]...)
		}
		if a != "--goodput" && !strings.HasPrefix(a, "--goodput=") {
			continue
		}
		if a == "--goodput" {
			if i+1 >= len(args) {
				break
			}
			i++
			out = append(out, args[i])
		}
		for i+1 < len(args) && isObjective(args[i+1]) {
			i++
			out[len(out)-1] += "," + args[i]
		}
	}
	return out
}

// isObjective: s reads as one --goodput pair (ttft:1000).
func isObjective(s string) bool {
	name, val, ok := strings.Cut(s, ":")
	if !ok || val == "" {
		return false
	}
	switch strings.ToLower(name) {
	case loadgen.SLOTTFT, loadgen.SLOTPOT, loadgen.SLOE2EL:
		return true
	}
	return false
}

// benchTarget is the server a run drives.
type benchTarget struct {
	base, model string
	apiKey      string
	keyEnv      string // the variable apiKey came from ("" when none was set)
	profKeyEnv  string // the profile's gateway.api_key_env, if known
	tokenizer   string // the served model's tokenizer folder, if known
}

// resolveModel fills in the API key (--api-key-env, else the profile's
// gateway.api_key_env) and the model (--model, the profile's served
// name, else the server's first in /v1/models).
func (c benchCmd) resolveModel(ctx context.Context, t *benchTarget) error {
	if c.APIKeyEnv != "" {
		if t.apiKey = os.Getenv(c.APIKeyEnv); t.apiKey != "" {
			t.keyEnv = c.APIKeyEnv
		}
	}
	if t.apiKey == "" && t.profKeyEnv != "" {
		if t.apiKey = os.Getenv(t.profKeyEnv); t.apiKey != "" {
			t.keyEnv = t.profKeyEnv
		}
	}
	if c.Model != "" {
		t.model = c.Model
	}
	if t.model != "" {
		return nil
	}
	m, err := firstModel(ctx, t.base, t.apiKey, keyHint(c.APIKeyEnv, t.profKeyEnv, t.keyEnv))
	if err != nil {
		return err
	}
	t.model = m
	return nil
}

// keyHint says which variables an API key was looked for in, for the
// error a keyed gateway's refusal gets.
func keyHint(flagEnv, profEnv, used string) string {
	if used != "" {
		return fmt.Sprintf("the key in $%s was refused; name the variable that holds the gateway's key with --api-key-env", used)
	}
	vars := "$" + flagEnv
	if flagEnv == "" {
		vars = "no variable"
	}
	if profEnv != "" && profEnv != flagEnv {
		vars += " or $" + profEnv
	}
	return fmt.Sprintf("the gateway wants an API key and %s holds none: set it, or name the variable that holds it with --api-key-env", vars)
}

// dataset builds the prompts of one run from seed: the dataset the flags
// name, its text counted in count's tokens where given.
func (c benchCmd) dataset(seed uint64, count loadgen.TokenCounter) ([]loadgen.Prompt, error) {
	in, out := c.InputLen, c.OutputLen
	if c.InputLenAlias != nil {
		in = *c.InputLenAlias
	}
	if c.OutputLenAlias != nil {
		out = *c.OutputLenAlias
	}
	switch {
	case c.DatasetPath != "":
		return loadgen.LoadFile(c.DatasetPath, c.NumPrompts, out)
	case c.DatasetName == "file":
		return nil, errors.New("--dataset-name file needs --dataset-path")
	case c.DatasetName == "generated-shared-prefix":
		return loadgen.GeneratedSharedPrefix(loadgen.SharedPrefixOptions{NumGroups: c.GSPNumGroups, PromptsPerGroup: c.GSPPromptsPerGroup,
			SystemPromptLen: c.GSPSystemPromptLen, QuestionLen: c.GSPQuestionLen, OutputLen: c.GSPOutputLen, RangeRatio: c.GSPRangeRatio,
			NumTurns: c.GSPNumTurns, Ordered: c.GSPOrdered, RoutingKey: c.GSPSendRoutingKey, Seed: seed, Count: count})
	case c.DatasetName == "mixed":
		return loadgen.Mixed(loadgen.MixedOptions{N: c.NumPrompts, LongShare: c.MixedLongShare, SystemPrompts: c.MixedSystemPrompts,
			SystemPromptLen: c.MixedSystemPromptLen, ChatLen: c.MixedChatLen, ChatOutputLen: c.MixedChatOutputLen, ChatTurns: c.MixedChatTurns,
			RAGLen: c.MixedRAGLen, RAGOutputLen: c.MixedRAGOutputLen, RangeRatio: c.MixedRangeRatio, Seed: seed, Count: count})
	}
	return loadgen.Random(loadgen.RandomOptions{N: c.NumPrompts, InputLen: in, OutputLen: out, RangeRatio: c.RangeRatio, Seed: seed, Count: count})
}

// describeDataset prints the line that says what a structured dataset is.
func (c benchCmd) describeDataset(requests int) {
	switch c.DatasetName {
	case "generated-shared-prefix":
		fmt.Printf("generated-shared-prefix: %d groups × %d prompts, system prompt %d tokens, question %d, output %d, %d turn(s): %d requests\n",
			c.GSPNumGroups, c.GSPPromptsPerGroup, c.GSPSystemPromptLen, c.GSPQuestionLen, c.GSPOutputLen, c.GSPNumTurns, requests)
	case "mixed":
		fmt.Println(c.workloadText(requests))
	}
}

// workloadText is the workload in one line (the layouts report's heading).
func (c benchCmd) workloadText(requests int) string {
	if c.DatasetName == "mixed" {
		return fmt.Sprintf("mixed: %d requests, %.0f%% RAG prompts of %d tokens (output %d), the rest chat turns of %d+%d tokens after %d shared system prompts (output %d, %d turn(s) a conversation)",
			requests, 100*c.MixedLongShare, c.MixedRAGLen, c.MixedRAGOutputLen, c.MixedSystemPromptLen, c.MixedChatLen,
			c.MixedSystemPrompts, c.MixedChatOutputLen, c.MixedChatTurns)
	}
	if c.DatasetName == "generated-shared-prefix" {
		return fmt.Sprintf("generated-shared-prefix: %d groups × %d prompts, system prompt %d tokens, question %d, output %d, %d turn(s): %d requests",
			c.GSPNumGroups, c.GSPPromptsPerGroup, c.GSPSystemPromptLen, c.GSPQuestionLen, c.GSPOutputLen, c.GSPNumTurns, requests)
	}
	if c.DatasetPath != "" {
		return fmt.Sprintf("%s: %d requests", c.DatasetPath, requests)
	}
	in, out := c.InputLen, c.OutputLen
	if c.InputLenAlias != nil {
		in = *c.InputLenAlias
	}
	if c.OutputLenAlias != nil {
		out = *c.OutputLenAlias
	}
	return fmt.Sprintf("random: %d requests of %d prompt and %d output tokens", requests, in, out)
}

func countRequests(ps []loadgen.Prompt) int {
	n := 0
	for _, p := range ps {
		n += 1 + len(p.Turns)
	}
	return n
}

// warmUp sends n requests (the first prompts, one turn each, at
// --max-concurrency) that are not measured; a failure stops the run.
func (c benchCmd) warmUp(ctx context.Context, backend loadgen.Backend, t benchTarget, prompts []loadgen.Prompt, n int) error {
	if n <= 0 {
		return nil
	}
	warm := make([]loadgen.Prompt, n)
	for i := range warm {
		warm[i] = prompts[i%len(prompts)]
		warm[i].Turns = nil // one request each
	}
	fmt.Printf("Warming up with %d requests...\n", len(warm))
	rs, _, err := loadgen.Run(ctx, loadgen.Config{BaseURL: t.base, Backend: backend, Model: t.model, APIKey: t.apiKey,
		Prompts: warm, RequestRate: math.Inf(1), MaxConcurrency: c.MaxConcurrency})
	if err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	for _, r := range rs {
		if !r.OK {
			return fmt.Errorf("warm-up request failed: %s", r.Err)
		}
	}
	return nil
}

// tokenCounter loads the tokenizer text prompts are counted in:
// --tokenizer, else the target's; nil (a word counts as a token) when
// neither is known.
func (c benchCmd) tokenCounter(dir string) (loadgen.TokenCounter, error) {
	if c.Tokenizer != "" {
		dir = c.Tokenizer
	}
	if dir == "" {
		return nil, nil
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		if c.Tokenizer != "" {
			return nil, fmt.Errorf("--tokenizer %s: %w", c.Tokenizer, err)
		}
		// The profile's model folder need not be readable here (a remote
		// gateway's path): fall back to words, and say so.
		fmt.Fprintf(os.Stderr, "tsd bench: prompt lengths are counted in words, not tokens: the tokenizer at %s does not load (%v); pass --tokenizer\n", dir, err)
		return nil, nil
	}
	return func(text string) int {
		ids, err := tok.Encode(text, false)
		if err != nil {
			return len(strings.Fields(text))
		}
		return len(ids)
	}, nil
}

// target resolves the server: --base-url, --host/--port, a profile's
// gateway (with its served model, API key variable and tokenizer), or the
// gateway of the tsd running here (by name, or the only one; its profile
// gives the rest).
func (c benchCmd) target() (benchTarget, error) {
	switch {
	case c.BaseURL != "":
		return benchTarget{base: strings.TrimRight(c.BaseURL, "/")}, nil
	case c.Port != 0 || c.Host != "":
		if c.Port <= 0 || c.Port > 65535 {
			return benchTarget{}, fmt.Errorf("--port %d: want 1-65535 (with --host)", c.Port)
		}
		host := c.Host
		if host == "" {
			host = "127.0.0.1"
		}
		return benchTarget{base: "http://" + net.JoinHostPort(host, strconv.Itoa(c.Port))}, nil
	case c.Target != "" && isProfileArg(c.Target):
		_, plan, errs := profiles.LoadPlan(c.Target, profiles.LocalHostFacts())
		if plan == nil {
			return benchTarget{}, profileErrors(errs)
		}
		return planTarget(plan, "http://"+dialable(plan.Gateway.Listen)), nil
	}
	path, err := c.resolve(c.Target)
	if err != nil {
		return benchTarget{}, fmt.Errorf("find the deployment to benchmark: %w", err)
	}
	ctx, cancel := ctlContext()
	defer cancel()
	s, err := supervisor.NewControlClient(path).Status(ctx)
	if err != nil {
		return benchTarget{}, fmt.Errorf("ask tsd for its gateway: %w", err)
	}
	if s.Gateway.URL == "" {
		return benchTarget{}, fmt.Errorf("the tsd at %s runs no gateway", path)
	}
	t := benchTarget{base: strings.TrimRight(s.Gateway.URL, "/")}
	if s.Profile != "" {
		// The running profile names the model, the key's variable and the
		// tokenizer; the gateway's own URL stays the target.
		if _, plan, _ := profiles.LoadPlan(s.Profile, profiles.StaticHostFacts()); plan != nil {
			t = planTarget(plan, t.base)
		}
	}
	return t, nil
}

// planTarget is a plan's gateway at base, with what the plan says of it.
func planTarget(plan *profiles.Plan, base string) benchTarget {
	return benchTarget{base: base, model: plan.ServedModelName, profKeyEnv: plan.Gateway.APIKeyEnv, tokenizer: plan.Tokenizer}
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

// parseRates reads --request-rate: one rate, inf, or a comma-separated
// list (a sweep), each positive.
func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if strings.EqualFold(f, "inf") {
			out = append(out, math.Inf(1))
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 || math.IsNaN(v) {
			return nil, fmt.Errorf("--request-rate %q: want a positive number, inf, or a list of them (1,2,4,8)", s)
		}
		out = append(out, v)
	}
	return out, nil
}

// firstModel asks the server's /v1/models, as upstream's bench does when
// no --model is given. A refusal for want of a key says which variable
// the key was looked for in (keyHint), not that no model is listed.
func firstModel(ctx context.Context, base, apiKey, keyHint string) (string, error) {
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
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return "", fmt.Errorf("GET %s/v1/models: %s: %s", base, resp.Status, keyHint)
	}
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

// note prints a line of its own (a sweep's phase): on a terminal it
// replaces the bar's line, which the next update draws again below it.
func (p *progress) note(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[K%s\n", line)
		p.last = time.Time{}
		return
	}
	fmt.Fprintln(p.w, line)
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.done > 0 {
		fmt.Fprintln(p.w)
	}
}
