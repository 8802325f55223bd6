package profiles

// The profile format as tables. Each mapping of the file is a section; its
// rows are the keys it accepts, in the order they are read (a row may use
// what rows above it stored: a role's gpus needs its replicas), each with
// its type, its default, one line of documentation and the reader that
// checks the value and stores it. Unknown-key errors and their "did you
// mean" hints, the defaults (DefaultRestart, DefaultPolicy, …) and the key
// table in docs/profiles.md are all derived from these tables, so a key is
// added in exactly one place.
//
// Adding a key: add a field to the struct (profile.go), one row to the
// section below (strKey, intKey, boolKey, durKey, floatKey, enumKey, envKey or a
// custom row), carry it into the Plan if something downstream needs it,
// then run `go generate ./profiles` to refresh the docs table.

//go:generate go test -run TestDocsKeyTable -update

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/tsd-project/tsd/profiles/parsernames"
)

// row is one key of a section whose values are stored into a T.
type row[T any] struct {
	Key     string
	Type    string // as the docs show it: "string", "integer 1-65535", …
	Default string // YAML text of the default, read through read; "" = none
	// DefaultDoc describes a default that depends on other keys (applied
	// by the section's finish); it is what the docs show instead of Default.
	DefaultDoc string
	Doc        string
	read       func(l *loader, f field, t *T)
	// sub is the section this key opens, for defaults and docs.
	sub         docSection
	subDefaults func(t *T)
	// inherit: the key opens sub but takes no defaults of its own (a
	// role's restart starts from the profile's); docs point at sub.
	inherit bool
	// subPath is the docs' path of sub when it is not the key's own (a
	// mapping of names, each a sub section: slo.roles.<entry>).
	subPath string
}

// section is one mapping of the profile.
type section[T any] struct {
	Path string // key path as the docs write it: "", "engine", "roles[]"
	Rows []row[T]
	// finish applies cross-key rules and derived defaults once every
	// present row was read; m holds the keys as written.
	finish func(l *loader, at field, t *T, m map[string]field)
}

func (s *section[T]) keys() []string {
	out := make([]string, len(s.Rows))
	for i, r := range s.Rows {
		out[i] = r.Key
	}
	return out
}

// setDefaults stores every row's default into t (sub-sections included).
// A default that does not read is a bug in the table; TestSchemaDefaults
// reads each one through defaultsInto to catch it.
func (s *section[T]) setDefaults(t *T) {
	s.defaultsInto(&loader{file: "default", pos: map[string]Pos{}, anchors: map[string]ast.Node{}}, t)
}

func (s *section[T]) defaultsInto(l *loader, t *T) {
	for _, r := range s.Rows {
		switch {
		case r.subDefaults != nil:
			r.subDefaults(t)
		case r.Default != "":
			r.read(l, field{n: defaultNode(r.Default), path: s.Path + "." + r.Key}, t)
		}
	}
}

// read loads the mapping at `at` into t, which already holds the defaults:
// unknown and duplicate keys are errors, every present row is read in table
// order, then finish runs.
func (s *section[T]) read(l *loader, at field, t *T) bool {
	m, ok := l.mapping(at.n, at, s.keys())
	if !ok {
		return false
	}
	for _, r := range s.Rows {
		if f, present := m[r.Key]; present {
			r.read(l, f, t)
		}
	}
	if s.finish != nil {
		s.finish(l, at, t, m)
	}
	return ok
}

var (
	defaultNodesMu sync.Mutex
	defaultNodes   = map[string]ast.Node{}
)

// defaultNode parses a row's default text once, as the value of a key.
func defaultNode(text string) ast.Node {
	defaultNodesMu.Lock()
	defer defaultNodesMu.Unlock()
	if n, ok := defaultNodes[text]; ok {
		return n
	}
	var n ast.Node
	if f, err := parser.ParseBytes([]byte("v: "+text+"\n"), 0); err == nil && len(f.Docs) == 1 {
		switch b := f.Docs[0].Body.(type) {
		case *ast.MappingValueNode:
			n = b.Value
		case *ast.MappingNode:
			if len(b.Values) == 1 {
				n = b.Values[0].Value
			}
		}
	}
	defaultNodes[text] = n
	return n
}

// Row constructors: each names the type the docs show and reads the value
// with the loader's checks. An empty value keeps the default, as a missing
// key does.

func strKey[T any](key, def, doc string, get func(*T) *string) row[T] {
	return row[T]{Key: key, Type: "string", Default: def, Doc: doc, read: func(l *loader, f field, t *T) {
		if s := l.str(f); s != "" {
			*get(t) = s
		}
	}}
}

func intKey[T any](key string, lo, hi int, def, doc string, get func(*T) *int) row[T] {
	return row[T]{Key: key, Type: fmt.Sprintf("integer %d-%d", lo, hi), Default: def, Doc: doc, read: func(l *loader, f field, t *T) {
		if v, ok := l.intv(f, lo, hi); ok {
			*get(t) = v
		}
	}}
}

func boolKey[T any](key, def, doc string, get func(*T) *bool) row[T] {
	return row[T]{Key: key, Type: "true | false", Default: def, Doc: doc, read: func(l *loader, f field, t *T) {
		if v, ok := l.boolv(f); ok {
			*get(t) = v
		}
	}}
}

func durKey[T any](key, def, doc string, get func(*T) *time.Duration) row[T] {
	return row[T]{Key: key, Type: "duration", Default: def, Doc: doc, read: func(l *loader, f field, t *T) {
		if v, ok := l.duration(f); ok {
			*get(t) = v
		}
	}}
}

// floatKey reads a number in (lo, hi].
func floatKey[T any](key string, lo, hi float64, def, doc string, get func(*T) *float64) row[T] {
	return row[T]{Key: key, Type: fmt.Sprintf("number > %g, ≤ %g", lo, hi), Default: def, Doc: doc, read: func(l *loader, f field, t *T) {
		if v, ok := l.floatv(f, lo, hi); ok {
			*get(t) = v
		}
	}}
}

// numKey reads a number in [lo, hi] (floatKey's range is open below).
func numKey[T any](key string, lo, hi float64, def, doc string, get func(*T) *float64) row[T] {
	typ := fmt.Sprintf("number %g-%g", lo, hi)
	if hi >= 1e6 { // no real upper bound: the docs say so
		typ = fmt.Sprintf("number ≥ %g", lo)
	}
	return row[T]{Key: key, Type: typ, Default: def, Doc: doc, read: func(l *loader, f field, t *T) {
		if !isScalar(f.n) {
			l.errf(f, "must be a number")
			return
		}
		v, err := strconv.ParseFloat(scalarText(f.n), 64)
		switch {
		case err != nil || math.IsNaN(v):
			l.errf(f, "must be a number, got %q", scalarText(f.n))
		case v < lo || v > hi:
			l.errf(f, "must be between %g and %g, got %g", lo, hi, v)
		default:
			*get(t) = v
		}
	}}
}

func enumKey[T any](key string, choices []string, def, doc string, get func(*T) *string) row[T] {
	return row[T]{Key: key, Type: strings.Join(choices, " | "), Default: def, Doc: doc, read: func(l *loader, f field, t *T) {
		s := l.str(f)
		switch {
		case s == "":
		case contains(choices, s):
			*get(t) = s
		default:
			l.errf(f, "must be %s, got %q%s", orList(choices), s, didYouMean(s, choices))
		}
	}}
}

func envKey[T any](key, doc string, get func(*T) *map[string]string) row[T] {
	return row[T]{Key: key, Type: "mapping NAME: value", Doc: doc, read: func(l *loader, f field, t *T) {
		*get(t) = l.stringMap(f)
		l.checkEnv(f, *get(t))
	}}
}

// subKey opens a nested section stored in S.
// parserKey is a reply parser name (gateway/parsers); empty means the
// model family's default, resolved by the planner.
func parserKey[T any](key, def, doc string, get func(*T) *string) row[T] {
	return row[T]{Key: key, Type: "parser name", DefaultDoc: def, Doc: doc, read: func(l *loader, f field, t *T) {
		s := l.str(f)
		var err error
		if key == "tool_call_parser" {
			err = parsernames.Validate(s, "")
		} else {
			err = parsernames.Validate("", s)
		}
		if err != nil {
			l.errf(f, "%v", err)
			return
		}
		*get(t) = s
	}}
}

func subKey[T, S any](key, doc string, sec *section[S], get func(*T) *S) row[T] {
	return row[T]{Key: key, Type: "mapping", Doc: doc, sub: sec,
		read:        func(l *loader, f field, t *T) { sec.read(l, f, get(t)) },
		subDefaults: func(t *T) { sec.setDefaults(get(t)) },
	}
}

// orList writes "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// Accelerator kinds (top-level `accelerator:`).
const (
	AcceleratorNVIDIA = "nvidia"
	AcceleratorAscend = "ascend"
)

// The sections, top to bottom. They refer to one another, so they are
// built in init.
var (
	topSection      section[Profile]
	engineSection   section[Engine]
	mooncakeSection section[Mooncake]
	gatewaySection  section[Gateway]
	policySection   section[PolicyPlan]
	condSection     section[ConditionalPlan]
	retrySection    section[RetryPlan]
	breakerSection  section[CircuitBreakerPlan]
	roleSection     section[Role]
	restartSection  section[Restart]
	healthSection   section[Health]
	slurmSection    section[Slurm]
	sloSection      section[SLO]
	sloRoleSection  section[SLORole]
)

func init() {
	restartSection = section[Restart]{Path: "restart", Rows: []row[Restart]{
		{Key: "policy", Type: "no | on-failure | always", Default: RestartOnFailure, Doc: "when a role that ended is started again", read: readRestartPolicy},
		durKey("backoff", "2s", "first delay; doubles (with jitter) up to max_backoff", func(r *Restart) *time.Duration { return &r.Backoff }),
		durKey("max_backoff", "2m", "cap of the growing delay", func(r *Restart) *time.Duration { return &r.MaxBackoff }),
		durKey("reset_after", "10m", "a run this long resets the backoff", func(r *Restart) *time.Duration { return &r.ResetAfter }),
		{Key: "budget", Type: `"N in DURATION"`, Default: "5 in 10m", Doc: "more restarts than N in the window: the role is failed", read: readBudget},
		durKey("stop_grace", "30s", "SIGTERM, then SIGKILL after this long", func(r *Restart) *time.Duration { return &r.StopGrace }),
		durKey("drain_timeout", "30s", "restart and stop wait this long for in-flight requests to finish, then end them (--now skips it); a stop of the whole deployment waits the longest of its roles' (tsd stop --timeout changes it)", func(r *Restart) *time.Duration { return &r.DrainTimeout }),
	}, finish: func(l *loader, at field, r *Restart, _ map[string]field) {
		if r.Backoff > r.MaxBackoff {
			l.errf(at, "backoff (%s) is longer than max_backoff (%s)", r.Backoff, r.MaxBackoff)
		}
	}}

	slurmSection = section[Slurm]{Path: "slurm", Rows: []row[Slurm]{
		strKey("time", "1:00:00", "#SBATCH --time of `tsd export slurm` (the job's wall-clock limit)", func(s *Slurm) *string { return &s.Time }),
		strKey("partition", "", "#SBATCH --partition; empty: the cluster's default", func(s *Slurm) *string { return &s.Partition }),
		strKey("account", "", "#SBATCH --account; empty: none", func(s *Slurm) *string { return &s.Account }),
	}}

	// The SLO planner's keys (slo.go; docs/profiles.md "The SLO planner").
	sloRoleSection = section[SLORole]{Path: "slo.roles.<entry>", Rows: []row[SLORole]{
		intKey("min", 1, 64, "1", "the planner never leaves the entry fewer replicas (it never empties one: the routing needs every kind it has)", func(r *SLORole) *int { return &r.Min }),
		{Key: "max", Type: "integer 1-64", DefaultDoc: "none: the GPU set bounds it", Doc: "the planner never gives the entry more replicas", read: func(l *loader, f field, r *SLORole) {
			if v, ok := l.intv(f, 1, 64); ok {
				r.Max = v
			}
		}},
	}, finish: finishSLORole}
	sloSection = section[SLO]{Path: "slo", Rows: []row[SLO]{
		{Key: "ttft_p90", Type: "duration", DefaultDoc: "none", Doc: "target of the 90th percentile of time to first token over an interval; judged on prefill and aggregated entries", read: func(l *loader, f field, s *SLO) {
			s.TTFTP90, _ = l.duration(f)
		}},
		{Key: "itl_p90", Type: "duration", DefaultDoc: "none", Doc: "target of the 90th percentile of inter-token latency over an interval; judged on decode and aggregated entries", read: func(l *loader, f field, s *SLO) {
			s.ITLP90, _ = l.duration(f)
		}},
		enumKey("mode", []string{SLOAdvise, SLOAct}, SLOAdvise, "advise: decide and show the proposal, change nothing; act: carry it out through tsd scale's steps (drain, one replica at a time)", func(s *SLO) *string { return &s.Mode }),
		durKey("interval", "30s", "one observation, prediction and decision per interval (at least 1s)", func(s *SLO) *time.Duration { return &s.Interval }),
		durKey("cooldown", "2m", "no second change to one role entry sooner than this after the last", func(s *SLO) *time.Duration { return &s.Cooldown }),
		{Key: "window", Type: "duration", DefaultDoc: "3 × interval", Doc: "the predictor's memory: load is smoothed (level and trend) over about this long", read: func(l *loader, f field, s *SLO) {
			s.Window, _ = l.duration(f)
		}},
		intKey("breach", 1, 100, "2", "consecutive intervals an entry's predicted latency must be over its target before the planner moves a replica to it", func(s *SLO) *int { return &s.Breach }),
		floatKey("headroom", 0, 1, "0.7", "an entry gives a replica away only if its predicted latency with one replica fewer stays below this share of its target (hysteresis: no move back)", func(s *SLO) *float64 { return &s.Headroom }),
		{Key: "gpus", Type: "list of indices or UUIDs", DefaultDoc: "the GPUs the profile's roles hold", Doc: "the GPUs the planner may use: it moves only replicas whose GPUs are all here and adds replicas on ones no role holds", read: readSLOGPUs},
		{Key: "roles", Type: "mapping of entry names", DefaultDoc: "min 1, no max, per entry", Doc: "per profile entry (prefill, decode, aggregated): min and max replicas", sub: &sloRoleSection, subPath: "slo.roles.<entry>", read: readSLORoles},
	}, finish: finishSLO}

	mooncakeSection = section[Mooncake]{Path: "engine.mooncake", Rows: []row[Mooncake]{
		boolKey("intranode_nvlink", "false", "true acknowledges MC_INTRANODE_NVLINK in an env: this platform is known to support Mooncake's forced intra-node NVLink transport", func(m *Mooncake) *bool { return &m.IntranodeNVLink }),
	}}

	engineSection = section[Engine]{Path: "engine", Rows: []row[Engine]{
		{Key: "command", Type: "list of strings", Default: "[ts, serve]", Doc: "the engine program and its subcommand, e.g. [python3, -m, tokenspeed.cli, serve] or [ts-fake, serve]", read: readCommand},
		strKey("transfer_backend", DefaultTransferBackend, "--disaggregation-transfer-backend", func(e *Engine) *string { return &e.TransferBackend }),
		{Key: "ib_device", Type: "string", Doc: "--disaggregation-ib-device when set: RDMA device(s), e.g. mlx5_0,mlx5_1; a role's ib_device overrides it", read: func(l *loader, f field, e *Engine) {
			e.IBDevice = l.str(f)
		}},
		subKey("mooncake", "Mooncake transfer settings", &mooncakeSection, func(e *Engine) *Mooncake { return &e.Mooncake }),
		{Key: "args", Type: "list of strings", Doc: "flags appended to every engine's command", read: func(l *loader, f field, e *Engine) {
			e.Args, _ = l.strList(f)
			l.checkArgs(f)
		}},
		envKey("env", "added to every engine's environment", func(e *Engine) *map[string]string { return &e.Env }),
	}}

	policySection = section[PolicyPlan]{Path: "gateway.policy", Rows: []row[PolicyPlan]{
		policyKey(kindOf(KindPrefill)),
		policyKey(kindOf(KindDecode)),
		policyKey(kindOf(KindEncode)),
		policyKey(kindOf(KindAggregated)),
	}}

	// Dynamo's conditional-disaggregation thresholds and defaults
	// (--router-conditional-disagg), docs/profiles.md "Conditional
	// disaggregation".
	condSection = section[ConditionalPlan]{Path: "gateway.conditional", Rows: []row[ConditionalPlan]{
		intKey("max_uncached_tokens", 0, 1<<30, "2048", "under disaggregation: conditional, a request goes to an aggregated engine when its prompt tokens not cached on the one the aggregated policy picks are at most this many…", func(c *ConditionalPlan) *int { return &c.MaxUncachedTokens }),
		floatKey("max_uncached_ratio", 0, 1, "0.7", "…and at most this share of the prompt", func(c *ConditionalPlan) *float64 { return &c.MaxUncachedRatio }),
		intKey("prefill_busy", 0, 1<<30, "0", "a prefill with more prompt tokens than this queued on it (sent, prefill not done) is busy; when every prefill is busy a request goes aggregated whatever its prompt; 0 = never busy", func(c *ConditionalPlan) *int { return &c.PrefillBusy }),
	}}

	// SMG's retry and circuit-breaker knobs, names and defaults
	// (docs/protocol.md §11.9), with SMG's validation ranges.
	retrySection = section[RetryPlan]{Path: "gateway.retry", Rows: []row[RetryPlan]{
		intKey("max_retries", 1, 100, "5", "attempts per request, counted as SMG counts them: the first try is one (5 = the first try and up to four more; 1 = never again); a retry or a migration each take one", func(r *RetryPlan) *int { return &r.MaxRetries }),
		intKey("initial_backoff_ms", 1, 3_600_000, "50", "delay before the second attempt; each later one is backoff_multiplier times the last", func(r *RetryPlan) *int { return &r.InitialBackoffMS }),
		intKey("max_backoff_ms", 1, 3_600_000, "30000", "cap of the growing delay", func(r *RetryPlan) *int { return &r.MaxBackoffMS }),
		numKey("backoff_multiplier", 1, 100, "1.5", "growth of the delay per attempt", func(r *RetryPlan) *float64 { return &r.BackoffMultiplier }),
		numKey("jitter_factor", 0, 1, "0.2", "each delay is scaled by 1 + a uniform draw in [-jitter_factor, +jitter_factor]", func(r *RetryPlan) *float64 { return &r.JitterFactor }),
		boolKey("migrate", "true", "a stream whose decode dies after tokens were sent continues on another decode (prefilled with the prompt plus the tokens sent), in the same response", func(r *RetryPlan) *bool { return &r.Migrate }),
	}, finish: func(l *loader, at field, r *RetryPlan, _ map[string]field) {
		if r.MaxBackoffMS < r.InitialBackoffMS {
			l.errf(at, "max_backoff_ms (%d) is below initial_backoff_ms (%d)", r.MaxBackoffMS, r.InitialBackoffMS)
		}
	}}

	breakerSection = section[CircuitBreakerPlan]{Path: "gateway.circuit_breaker", Rows: []row[CircuitBreakerPlan]{
		intKey("failure_threshold", 1, 1_000_000, "10", "consecutive failed requests (within window_duration_secs) that open a worker's breaker: it leaves routing", func(c *CircuitBreakerPlan) *int { return &c.FailureThreshold }),
		intKey("success_threshold", 1, 1_000_000, "3", "consecutive successes in half-open that close it again", func(c *CircuitBreakerPlan) *int { return &c.SuccessThreshold }),
		intKey("timeout_duration_secs", 1, 86_400, "60", "seconds an open breaker waits before half-open (requests are admitted again; one failure reopens it)", func(c *CircuitBreakerPlan) *int { return &c.TimeoutDurationSecs }),
		intKey("window_duration_secs", 1, 86_400, "120", "a run of failures older than this from its first is forgotten (SMG accepts the key but does not use it)", func(c *CircuitBreakerPlan) *int { return &c.WindowDurationSecs }),
	}}

	gatewaySection = section[Gateway]{Path: "gateway", Rows: []row[Gateway]{
		strKey("host", DefaultGatewayHost, "HTTP listen address of the OpenAI API", func(g *Gateway) *string { return &g.Host }),
		intKey("port", 1, 65535, strconv.Itoa(DefaultGatewayPort), "HTTP listen port", func(g *Gateway) *int { return &g.Port }),
		enumKey("mode", []string{ModeAuto, ModePD, ModeEPD}, ModeAuto, "auto = epd when an encode role exists", func(g *Gateway) *string { return &g.Mode }),
		subKey("policy", "how the gateway picks a worker of each kind", &policySection, func(g *Gateway) *PolicyPlan { return &g.Policy }),
		{Key: "disaggregation", Type: "always | never | conditional", DefaultDoc: "always with prefill and decode roles only, never with aggregated roles only; a profile with both must say", Doc: "how requests split between prefill → decode and aggregated engines: always prefill → decode, never (always aggregated), or conditional (per request, by gateway.conditional)", read: readDisaggregation},
		subKey("conditional", "when disaggregation: conditional sends a request to an aggregated engine (Dynamo's conditional disaggregation)", &condSection, func(g *Gateway) *ConditionalPlan { return &g.Conditional }),
		subKey("cache_aware", "cache_aware's knobs (and kv_aware's, which falls back to it); see Routing policies", &cacheAwareSection, func(g *Gateway) *CacheAwarePlan { return &g.Routing.CacheAware }),
		subKey("kv_aware", "kv_aware's own knobs (its balance and fallback are cache_aware's)", &kvAwareSection, func(g *Gateway) *KVAwarePlan { return &g.Routing.KVAware }),
		subKey("prefix_hash", "prefix_hash's knobs", &prefixHashSection, func(g *Gateway) *PrefixHashPlan { return &g.Routing.PrefixHash }),
		subKey("manual", "manual's knobs (sticky by the X-SMG-Routing-Key header)", &manualSection, func(g *Gateway) *ManualPlan { return &g.Routing.Manual }),
		subKey("bucket", "bucket's knobs (prefill only)", &bucketSection, func(g *Gateway) *BucketPlan { return &g.Routing.Bucket }),
		{Key: "api_key_env", Type: "env var name", Doc: "name of an env var holding the bearer token; empty = no auth", read: func(l *loader, f field, g *Gateway) {
			g.APIKeyEnv = l.str(f)
			if g.APIKeyEnv != "" && !envName.MatchString(g.APIKeyEnv) {
				l.errf(f, "%q is not an environment variable name", g.APIKeyEnv)
			}
		}},
		enumKey("bootstrap_server", []string{BootstrapEngine, BootstrapTSD}, BootstrapEngine, "who serves each prefill's KV rendezvous", func(g *Gateway) *string { return &g.BootstrapServer }),
		boolKey("image_urls", "false", "true: chat image parts may be http(s) URLs the gateway fetches (20 MiB, 10 s each); data: URLs always work", func(g *Gateway) *bool { return &g.ImageURLs }),
		{Key: "image_url_allow", Type: "list of host | IP | CIDR", Doc: "image URLs may reach these although they are loopback, private, link-local or metadata addresses (refused by default)", read: func(l *loader, f field, g *Gateway) {
			if list, ok := l.strList(f); ok {
				for _, e := range list {
					if err := CheckImageURLAllow(e); err != nil {
						l.errf(f, "%v", err)
					}
				}
				g.ImageURLAllow = list
			}
		}},
		boolKey("metrics_public", "false", "true: /metrics answers without the API key (for a scraper on a trusted network)", func(g *Gateway) *bool { return &g.MetricsPublic }),
		subKey("tracing", "an OpenTelemetry trace per request, sent over OTLP/HTTP (docs/metrics.md, Traces)", &tracingSection, func(g *Gateway) *TracingPlan { return &g.Tracing }),
		parserKey("tool_call_parser", "the model's, as `ts serve` and SMG pick it (by family, else by model name: qwen for Qwen3, qwen_xml for Qwen3.5, ...)", "how replies' tool calls are parsed into tool_calls (SMG's names: qwen, qwen_xml, deepseek31, deepseek_v4, kimik2, kimi_k3, glm45_moe, glm47_moe, llama, json, harmony, inkling, passthrough)", func(g *Gateway) *string { return &g.ToolCallParser }),
		parserKey("reasoning_parser", "the model family's, as `ts serve` picks it (passthrough for most)", "how a think block is split into reasoning_content (SMG's names: qwen3, qwen3_thinking, deepseek_r1, deepseek_v31, glm45, kimi, kimi_k3, harmony, inkling, passthrough); a parser other than passthrough is passed to the engines as --reasoning-parser too", func(g *Gateway) *string { return &g.ReasoningParser }),
		durKey("queue_timeout", "30s", "while no worker of a kind is routable (draining, restarting), a new request waits this long, then gets 503 with Retry-After; also how long a request beyond max_concurrent waits before 429", func(g *Gateway) *time.Duration { return &g.QueueTimeout }),
		intKey("max_concurrent", 0, 1<<20, "0", "generation requests (/generate, /v1/chat/completions, /v1/completions) served at once; more wait up to queue_timeout, then get 429 with Retry-After; 0 = unlimited", func(g *Gateway) *int { return &g.MaxConcurrent }),
		intKey("tokenizer_cache_mb", 0, 1<<20, "64", "MiB the gateway keeps of prompts' token ids, so a repeated prompt (L0; a repeated chat's template render is kept too, in the same budget) or a shared system prompt and chat history (L1, cut after the chat template's special tokens) are tokenized once; least recently used first out; 0 = off", func(g *Gateway) *int { return &g.TokenizerCacheMB }),
		subKey("retry", "how a request whose legs failed is sent again (SMG's knobs), and mid-stream migration", &retrySection, func(g *Gateway) *RetryPlan { return &g.Retry }),
		subKey("circuit_breaker", "when a failing worker leaves routing for a while (SMG's knobs)", &breakerSection, func(g *Gateway) *CircuitBreakerPlan { return &g.CircuitBreaker }),
		subKey("admission", "the queue in front of the engines: what they take at once, what may wait, the rule against starvation (see Admission, priority and API keys)", &admissionSection, func(g *Gateway) *AdmissionPlan { return &g.Admission }),
		{Key: "api_keys", Type: "list of keys", Doc: "bearer keys beside api_key_env, each naming a tenant with its own limits and priority (see Admission, priority and API keys)", sub: &apiKeySection, read: readAPIKeys},
		{Key: "cors_origins", Type: "list of origins", DefaultDoc: "none", Doc: "browser origins (scheme://host[:port], or \"*\" for any) answered with CORS headers, preflight OPTIONS included; empty = no CORS", read: func(l *loader, f field, g *Gateway) {
			if list, ok := l.strList(f); ok {
				for _, o := range list {
					if err := CheckCORSOrigin(o); err != nil {
						l.errf(f, "%v", err)
					}
				}
				g.CORSOrigins = list
			}
		}},
	}}

	healthSection = section[Health]{Path: "health", Rows: []row[Health]{
		enumKey("stall_action", []string{StallRestart, StallWait}, StallRestart, "a stalled role (process stopped, or no output with requests in flight) is restarted, or waited for out of routing", func(h *Health) *string { return &h.StallAction }),
		durKey("stall_timeout", "30s", "a rank with requests in flight that sends nothing this long is stalled (above a long prefill's first output, well under a minute)", func(h *Health) *time.Duration { return &h.StallTimeout }),
	}}

	roleSection = section[Role]{Path: "roles[]", Rows: []row[Role]{
		{Key: "name", Type: "string", Doc: "required; letters, digits, . _ - (\"gateway\" is reserved); names logs and sockets", read: readRoleName},
		{Key: "kind", Type: strings.Join(roleKinds, " | "), DefaultDoc: "the name, when it is a kind", Doc: "what the engine does: --disaggregation-mode encode, prefill or decode, or aggregated (--disaggregation-mode null: TokenSpeed's aggregate serving, prefill and decode in one engine)", read: func(l *loader, f field, r *Role) {
			r.Kind = l.str(f)
			if !contains(roleKinds, r.Kind) {
				l.errf(f, "must be %s, got %q%s", orList(roleKinds), r.Kind, didYouMean(r.Kind, roleKinds))
			}
		}},
		intKey("replicas", 1, 64, "1", "> 1 expands to name-0, name-1, …; gpus is then one list per replica", func(r *Role) *int { return &r.Replicas }),
		intKey("tp", 1, 1024, "1", "--tp (attention TP)", func(r *Role) *int { return &r.TP }),
		intKey("dp", 1, 1024, "1", "--data-parallel-size (attention DP)", func(r *Role) *int { return &r.DP }),
		strKey("host", HostLocal, "anything but local: tsd does not start this role, it prints its command", func(r *Role) *string { return &r.Host }),
		{Key: "engine_index", Type: "integer 0-65535", Default: "0", Doc: "--zmq-engine-index; DP rank r dials as engine_index + r", read: readEngineIndex},
		{Key: "args", Type: "list of strings", Doc: "flags for this role only, after engine.args", read: func(l *loader, f field, r *Role) {
			r.Args, _ = l.strList(f)
			l.checkArgs(f)
		}},
		envKey("env", "env for this role only, over engine.env", func(r *Role) *map[string]string { return &r.Env }),
		{Key: "restart", Type: "mapping", DefaultDoc: "the top-level restart", Doc: "overrides the top-level restart keys for this role", sub: &restartSection, inherit: true,
			read: func(l *loader, f field, r *Role) { restartSection.read(l, f, &r.Restart) }},
		{Key: "bootstrap_host", Type: "string", DefaultDoc: "127.0.0.1, or host for a remote role", Doc: "where decode reaches this prefill's or encode's rendezvous", read: func(l *loader, f field, r *Role) {
			r.BootstrapHost = l.str(f)
			if r.BootstrapHost != "" && !kindOf(r.Kind).Bootstrap {
				l.errf(f, "%s has no bootstrap server; bootstrap_host is for %s roles", anKind(r.Kind), kindsWith(func(k KindSpec) bool { return k.Bootstrap }))
			}
		}},
		{Key: "gpus", Type: "list of indices or UUIDs", Doc: "required; exactly tp × dp devices (GPUs, or NPUs with accelerator: ascend)", read: func(l *loader, f field, r *Role) {
			r.GPUs = l.gpus(f, r.Replicas)
		}},
		floatKey("gpu_memory_utilization", 0, 1, "", "--gpu-memory-utilization; set on every role that shares a GPU to let them share it", func(r *Role) *float64 { return &r.GPUMemoryUtilization }),
		strKey("ib_device", "", "--disaggregation-ib-device for this role, over engine.ib_device", func(r *Role) *string { return &r.IBDevice }),
		{Key: "node", Type: "integer 0-4095", DefaultDoc: "packed by the planner", Doc: "with --launcher slurm: index into the job's node list (every replica runs there)", read: func(l *loader, f field, r *Role) {
			if v, ok := l.intv(f, 0, 4095); ok {
				r.Node = v
			}
		}},
		{Key: "nodes", Type: "list of integers 0-4095", DefaultDoc: "one node (node:)", Doc: "with --launcher slurm: the job's nodes one engine spans (multi-node TP/EP: one step, one task per node, --nnodes/--node-rank, dist-init on the first); tp × dp GPUs split evenly; exclusive with node", read: readNodes},
		{Key: "worker", Type: "ipc://PATH | tcp://HOST:PORT", DefaultDoc: "`ipc://<run_dir>/<name>`", Doc: "where the gateway binds this engine's sockets (one per replica)", read: readWorkers},
		{Key: "dist_init_port", Type: "integer 1-65535", DefaultDoc: "planned", Doc: "--dist-init-addr 127.0.0.1:PORT (one per replica)", read: func(l *loader, f field, r *Role) {
			r.DistInitPorts = perReplicaInts(l, f, r.Replicas, "dist_init_port")
		}},
		{Key: "bootstrap_port", Type: "integer 1-65535", DefaultDoc: "planned (prefill, encode)", Doc: "--disaggregation-bootstrap-port; prefill and encode only (one per replica)", read: func(l *loader, f field, r *Role) {
			if k, known := KindOf(r.Kind); known && !k.Bootstrap {
				l.errf(f, "%s has no bootstrap server; bootstrap_port is for %s roles", anKind(r.Kind), kindsWith(func(k KindSpec) bool { return k.Bootstrap }))
				return
			}
			r.BootstrapPorts = perReplicaInts(l, f, r.Replicas, "bootstrap_port")
		}},
		{Key: "kv_events", Type: "true | false", DefaultDoc: "true when the role's kind's policy (gateway.policy.prefill or .aggregated) is kv_aware", Doc: "the engine publishes its KV cache events (--kv-events-config, docs/protocol.md §16) and the gateway follows them: kv_aware routes on them, the dashboard shows each rank's cached blocks; prefill and aggregated roles only", read: func(l *loader, f field, r *Role) {
			if v, ok := l.boolv(f); ok {
				if v && !kindOf(r.Kind).KVEvents {
					l.errf(f, "kv events are followed from %s engines only; a %s role has no use for them", kindsWith(func(k KindSpec) bool { return k.KVEvents }), r.Kind)
					return
				}
				r.KVEvents = &v
			}
		}},
		{Key: "kv_events_port", Type: "integer 1-65535", DefaultDoc: "planned from 9100", Doc: "first port of the engine's KV event sockets (one per replica): DP rank r publishes on port + r and answers replays on port + dp + r", read: func(l *loader, f field, r *Role) {
			if !kindOf(r.Kind).KVEvents {
				l.errf(f, "kv events are followed from %s engines only; kv_events_port is for %s roles", kindsWith(func(k KindSpec) bool { return k.KVEvents }), kindsWith(func(k KindSpec) bool { return k.KVEvents }))
				return
			}
			r.KVEventsPorts = perReplicaInts(l, f, r.Replicas, "kv_events_port")
		}},
	}, finish: finishRole}

	topSection = section[Profile]{Path: "", Rows: []row[Profile]{
		{Key: "name", Type: "string", DefaultDoc: "the file name without .yaml", Doc: "shown in the dashboard", read: func(l *loader, f field, p *Profile) {
			if s := l.str(f); s != "" {
				p.Name = s
			}
		}},
		{Key: "model", Type: "string", Doc: "required; --model of every engine; the gateway reads the tokenizer and chat template from here", read: func(l *loader, f field, p *Profile) {
			p.Model = l.str(f)
			if p.Model == "" {
				l.errf(f, "must name the model directory or id")
			}
			p.Model = resolvePath(p.Dir, p.Model, false)
		}},
		{Key: "tokenizer", Type: "string", DefaultDoc: "model", Doc: "tokenizer.json and chat template directory", read: func(l *loader, f field, p *Profile) {
			if s := l.str(f); s != "" {
				p.Tokenizer = resolvePath(p.Dir, s, false)
			}
		}},
		{Key: "served_model_name", Type: "string", DefaultDoc: "the model's base name", Doc: "the model id clients send", read: func(l *loader, f field, p *Profile) {
			if s := l.str(f); s != "" {
				p.ServedModelName = s
			}
		}},
		{Key: "accelerator", Type: "nvidia | ascend", DefaultDoc: "nvidia, or ascend on a host with only Ascend NPUs", Doc: "ascend: devices go to ASCEND_RT_VISIBLE_DEVICES and telemetry reads npu-smi", read: func(l *loader, f field, p *Profile) {
			kinds := []string{AcceleratorNVIDIA, AcceleratorAscend}
			s := l.str(f)
			switch {
			case s == "":
			case contains(kinds, s):
				p.Accelerator = s
			default:
				l.errf(f, "must be nvidia or ascend, got %q%s", s, didYouMean(s, kinds))
			}
		}},
		subKey("engine", "applies to every role", &engineSection, func(p *Profile) *Engine { return &p.Engine }),
		subKey("gateway", "the embedded gateway", &gatewaySection, func(p *Profile) *Gateway { return &p.Gateway }),
		subKey("restart", "restart rules for every role", &restartSection, func(p *Profile) *Restart { return &p.Restart }),
		subKey("health", "how a role that stopped working is judged and handled", &healthSection, func(p *Profile) *Health { return &p.Health }),
		{Key: "roles", Type: "list of roles", Doc: "required; one entry per engine (or per group with replicas)", sub: &roleSection, read: readRoles},
		subKey("slurm", "batch settings of `tsd export slurm`", &slurmSection, func(p *Profile) *Slurm { return &p.Slurm }),
		{Key: "slo", Type: "mapping", DefaultDoc: "none: no planner", Doc: "latency targets the SLO planner holds by moving GPUs between role entries", sub: &sloSection, read: readSLO},
		{Key: "run_dir", Type: "path", DefaultDoc: "`.tsd/<name>/run`", Doc: "ipc sockets and the control socket tsd.sock; by default each deployment's own, by its name, so the profiles of one folder run side by side", read: func(l *loader, f field, p *Profile) {
			if s := l.str(f); s != "" {
				p.RunDir = resolvePath(p.Dir, s, true)
			}
		}},
		intKey("log_max_mb", 1, 1<<20, "100", "a log file (each role's, the gateway's) rotates past this many MiB: NAME.log becomes NAME.log.1, the older ones move up", func(p *Profile) *int { return &p.LogMaxMB }),
		intKey("log_keep", 1, 100, "3", "rotated files kept per log (NAME.log.1 … NAME.log.N); the oldest goes", func(p *Profile) *int { return &p.LogKeep }),
		{Key: "log_dir", Type: "path", DefaultDoc: "`.tsd/<name>/logs`", Doc: "`<role>.log` per role instance, plus `gateway.log` and the daemon's `tsd.log`; by default each deployment's own", read: func(l *loader, f field, p *Profile) {
			if s := l.str(f); s != "" {
				p.LogDir = resolvePath(p.Dir, s, true)
			}
		}},
	}, finish: finishTop}
}

var roleKinds = KindNames()

// anKind is "a decode role", "an aggregated role".
func anKind(kind string) string {
	if kind != "" && strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind + " role"
	}
	return "a " + kind + " role"
}

// kindsWith lists the kinds whose row passes ok: "prefill and aggregated".
func kindsWith(ok func(KindSpec) bool) string {
	var names []string
	for _, k := range Kinds {
		if ok(k) {
			names = append(names, k.Kind)
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// readDisaggregation reads gateway.disaggregation as written; validate
// resolves the default, which depends on the role kinds.
func readDisaggregation(l *loader, f field, g *Gateway) {
	choices := []string{DisaggAlways, DisaggNever, DisaggConditional}
	s := l.str(f)
	switch {
	case s == "":
	case contains(choices, s):
		g.Disaggregation = s
	default:
		l.errf(f, "must be %s, got %q%s", orList(choices), s, didYouMean(s, choices))
	}
}

func policyKey(k KindSpec) row[PolicyPlan] {
	kind, choices, get := k.Kind, k.Policies, k.policy
	return row[PolicyPlan]{Key: kind, Type: "policy name", Default: k.DefaultPolicy, Doc: strings.Join(choices, " "), read: func(l *loader, f field, p *PolicyPlan) {
		s := l.str(f)
		if s == "" {
			return
		}
		if !contains(choices, s) {
			l.errf(f, "unknown %s policy %q%s; one of %s", kind, s, didYouMean(s, choices), strings.Join(choices, ", "))
			return
		}
		*get(p) = s
	}}
}

// finishTop derives the defaults that depend on other keys and reports
// the required keys that are missing.
func finishTop(l *loader, _ field, p *Profile, m map[string]field) {
	if _, ok := m["name"]; !ok || p.Name == "" {
		p.Name = strings.TrimSuffix(filepath.Base(p.Path), filepath.Ext(p.Path))
	}
	if _, ok := m["model"]; !ok {
		l.errAt(Pos{1, 1}, "model", "missing: every profile names its model (a local directory or a model id)")
	}
	if p.Tokenizer == "" {
		p.Tokenizer = p.Model
	}
	if p.ServedModelName == "" {
		p.ServedModelName = filepath.Base(strings.TrimRight(p.Model, "/"))
	}
	if _, ok := m["roles"]; !ok {
		l.errAt(Pos{1, 1}, "roles", "missing: a profile needs aggregated roles, or at least one prefill and one decode role")
	}
}

func readCommand(l *loader, f field, e *Engine) {
	if sc := f.n; isScalar(sc) {
		s := scalarText(sc)
		if strings.ContainsAny(s, " \t") {
			l.errf(f, "must be a list, e.g. [%s]", strings.Join(strings.Fields(s), ", "))
		} else if s != "" {
			e.Command = []string{s}
		}
		return
	}
	if cmd, ok := l.strList(f); ok {
		if len(cmd) == 0 || cmd[0] == "" {
			l.errf(f, "must name a program, e.g. [ts, serve]")
		} else {
			e.Command = cmd
		}
	}
}

func readRestartPolicy(l *loader, f field, r *Restart) {
	s := l.str(f)
	switch s {
	case RestartNo, RestartOnFailure, RestartAlways:
		r.Policy = s
		return
	}
	if b, ok := f.n.(*ast.BoolNode); ok && !b.Value {
		r.Policy = RestartNo // YAML 1.1 reads a bare `no` as false
		return
	}
	all := []string{RestartNo, RestartOnFailure, RestartAlways}
	l.errf(f, "must be no, on-failure or always, got %q%s", s, didYouMean(s, all))
}

func readBudget(l *loader, f field, r *Restart) {
	s := l.str(f)
	sm := budgetRe.FindStringSubmatch(s)
	var n int
	var w time.Duration
	var err error
	if sm != nil {
		n, err = strconv.Atoi(sm[1])
		if err == nil {
			w, err = time.ParseDuration(sm[2])
		}
	}
	if sm == nil || err != nil || w <= 0 || n > 1_000_000 {
		l.errf(f, "must read like \"5 in 10m\" (at most N restarts in a window), got %q", s)
		return
	}
	r.BudgetCount, r.BudgetWindow = n, w
}

func readRoles(l *loader, at field, p *Profile) {
	if isNull(at.n) {
		l.errf(at, "needs aggregated roles, or at least one prefill and one decode role")
		return
	}
	seq, ok := at.n.(*ast.SequenceNode)
	if !ok {
		l.errf(at, "must be a list of roles (each starting with `- name:`)")
		return
	}
	for i, it := range seq.Values {
		path := fmt.Sprintf("roles[%d]", i)
		it = l.deref(it)
		rf := field{n: it, pos: nodePos(it), path: path}
		l.pos[path] = rf.pos
		var r Role
		roleSection.setDefaults(&r)
		r.Node = -1 // unset: the planner packs it (--launcher slurm)
		r.Restart = p.Restart
		l.role(&r, rf)
		p.Roles = append(p.Roles, r)
	}
}

// role reads one entry of roles:, pointing errors about the entry as a
// whole at its first key rather than at the dash.
func (l *loader) role(r *Role, at field) {
	m, ok := l.mapping(at.n, at, roleSection.keys())
	if !ok {
		return
	}
	if len(m) > 0 {
		first := Pos{1 << 30, 0}
		for _, f := range m {
			if f.pos.Line < first.Line || (f.pos.Line == first.Line && f.pos.Col < first.Col) {
				first = f.pos
			}
		}
		l.pos[at.path] = first
		at.pos = first
	}
	for _, rw := range roleSection.Rows {
		if f, present := m[rw.Key]; present {
			rw.read(l, f, r)
		}
	}
	roleSection.finish(l, at, r, m)
}

func readRoleName(l *loader, f field, r *Role) {
	r.Name = l.str(f)
	if contains(roleKinds, r.Name) {
		r.Kind = r.Name // a role named like a kind is that kind, unless kind: says otherwise
	}
	if r.Name != "" && !instanceName.MatchString(r.Name) {
		l.errf(f, "%q: use letters, digits, '.', '_' and '-' (it names log files and sockets)", r.Name)
	} else if r.Name == GatewayLogName {
		l.errf(f, "%q is reserved for the gateway's log; pick another name", r.Name)
	}
}

func readEngineIndex(l *loader, f field, r *Role) {
	if v, ok := l.intv(f, 0, 65535); ok {
		r.EngineIndex = v
		if v+r.DP-1 > 65535 {
			l.errf(f, "engine_index + dp - 1 = %d exceeds 65535 (ranks dial as engine_index + dp_rank)", v+r.DP-1)
		}
	}
}

func readWorkers(l *loader, f field, r *Role) {
	r.Workers = make([]string, r.Replicas)
	vals := l.perReplica(f, r.Replicas, "worker", func(f field) (any, bool) {
		s := l.str(f)
		return s, s != ""
	})
	for i, v := range vals {
		if v != nil {
			r.Workers[i] = v.(string)
			l.checkWorker(field{pos: f.pos, path: replicaKey(f.path, i, r.Replicas)}, r, r.Workers[i])
		}
	}
}

func perReplicaInts(l *loader, f field, replicas int, key string) []int {
	out := make([]int, replicas)
	for i, v := range l.perReplica(f, replicas, key, l.portValue) {
		if v != nil {
			out[i] = v.(int)
		}
	}
	return out
}

// finishRole reports the role's missing required keys, derives its kind
// from its name, and sizes the per-replica lists the planner indexes.
func finishRole(l *loader, at field, r *Role, m map[string]field) {
	if _, ok := m["name"]; !ok {
		l.errf(at, "missing name")
	}
	if _, ok := m["kind"]; !ok && !contains(roleKinds, r.Name) {
		l.errf(at, "missing kind (%s)", orList(roleKinds))
	}
	if _, ok := m["gpus"]; !ok {
		l.errf(at, "missing gpus: list the %d GPU(s) this role uses (tp × dp)", r.TP*r.DP)
	}
	for _, s := range []*[]int{&r.DistInitPorts, &r.BootstrapPorts, &r.KVEventsPorts} {
		if len(*s) != r.Replicas {
			*s = make([]int, r.Replicas)
		}
	}
	if pf, ok := m["kv_events_port"]; ok && r.KVEvents != nil && !*r.KVEvents {
		l.errf(pf, "kv_events is false: no KV event sockets to place (drop kv_events_port, or set kv_events: true)")
	}
	if len(r.Workers) != r.Replicas {
		r.Workers = make([]string, r.Replicas)
	}
	if r.GPUMemoryUtilization > 0 {
		l.checkArgOwned(m["args"], "--gpu-memory-utilization", "set by the role's gpu_memory_utilization:")
	}
	if nf, ok := m["nodes"]; ok {
		if _, both := m["node"]; both {
			l.errf(nf, "node and nodes are exclusive: node: places the role on one node, nodes: spans several")
		}
		if n := len(r.Nodes); n > 0 && (r.TP*r.DP)%n != 0 {
			l.errf(nf, "%d node(s) cannot split tp × dp = %d × %d = %d GPUs evenly", n, r.TP, r.DP, r.TP*r.DP)
		}
	}
}

// readNodes reads nodes: distinct node indices, kept ascending (Slurm
// numbers a step's nodes in the job's order, whatever order they are
// listed in, and the first is where the role's dist-init lives).
func readNodes(l *loader, f field, r *Role) {
	seq, ok := f.n.(*ast.SequenceNode)
	if !ok || len(seq.Values) == 0 {
		l.errf(f, "must be a non-empty list of node indices, e.g. [0, 1]")
		return
	}
	seen := map[int]bool{}
	var out []int
	for i, it := range seq.Values {
		ef := field{n: l.deref(it), pos: nodePos(it), path: fmt.Sprintf("%s[%d]", f.path, i)}
		v, ok := l.intv(ef, 0, 4095)
		if !ok {
			return
		}
		if seen[v] {
			l.errf(ef, "node %d is listed twice", v)
			return
		}
		seen[v] = true
		out = append(out, v)
	}
	sort.Ints(out)
	r.Nodes = out
}

// docSection is a section seen without its type, for the docs table.
type docSection interface {
	docRows(prefix string, seen map[docSection]bool) []DocRow
}

// DocRow is one line of the key table in docs/profiles.md.
type DocRow struct {
	Key, Type, Default, Doc string
}

func (s *section[T]) docRows(prefix string, seen map[docSection]bool) []DocRow {
	seen[s] = true
	var out []DocRow
	for _, r := range s.Rows {
		key := r.Key
		if prefix != "" {
			key = prefix + "." + r.Key
		}
		def := r.DefaultDoc
		if def == "" && r.Default != "" {
			def = "`" + r.Default + "`"
		}
		doc := r.Doc
		if r.inherit && r.sub != nil {
			doc += " (same keys as `restart`)"
		}
		out = append(out, DocRow{Key: key, Type: r.Type, Default: def, Doc: doc})
		if r.sub != nil && !seen[r.sub] && !r.inherit {
			sub := key
			if r.Type == "list of roles" || r.Type == "list of keys" { // a list of mappings: one entry's keys
				sub += "[]"
			}
			if r.subPath != "" {
				sub = r.subPath
			}
			out = append(out, r.sub.docRows(sub, seen)...)
		}
	}
	return out
}
