package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tsd-project/tsd/cmd/ts-fake/perfmodel"
	"github.com/tsd-project/tsd/gateway/kvevents"
)

// flagKind says how a flag consumes argv.
type flagKind int

const (
	kValue flagKind = iota // --flag V or --flag=V
	kBool                  // --flag (or --flag=true/false)
	kList                  // --flag V1 V2 ... (argparse nargs='+')
)

type flagSpec struct {
	name  string // without leading dashes
	kind  flagKind
	used  bool   // ts-fake acts on it (else accepted and ignored)
	help  string // one line
	alias string // canonical name this one is an alias of
}

// engineFlags are every `ts serve --headless` flag tsd emits plus every
// TokenSpeed engine flag named in docs/protocol.md §10 (docs/architecture.md §D9).
var engineFlags = []flagSpec{
	{name: "headless", kind: kBool, used: true, help: "required: ts-fake only implements the headless engine"},
	{name: "model", kind: kValue, used: true, help: "model path or id (also the positional argument)"},
	{name: "model-path", kind: kValue, used: true, alias: "model", help: "alias of --model"},
	{name: "served-model-name", kind: kValue, used: true, help: "becomes instance_id in the registration"},
	{name: "tp", kind: kValue, used: true, help: "attention TP size (alias of --attn-tp-size)"},
	{name: "tensor-parallel-size", kind: kValue, used: true, alias: "tp", help: "alias of --tp"},
	{name: "attn-tp-size", kind: kValue, used: true, help: "attention TP size (cannot be combined with --tp)"},
	{name: "world-size", kind: kValue, used: true, help: "world size (default tp x dp)"},
	{name: "data-parallel-size", kind: kValue, used: true, help: "attention-DP size: one dialing rank per DP group"},
	{name: "dp", kind: kValue, used: true, alias: "data-parallel-size", help: "alias of --data-parallel-size"},
	{name: "data-parallel-address", kind: kValue, used: true, help: "gateway handshake host (default 127.0.0.1)"},
	{name: "data-parallel-rpc-port", kind: kValue, used: true, help: "gateway handshake port (default 30500)"},
	{name: "zmq-engine-index", kind: kValue, used: true, help: "base ZMQ identity; rank r dials as index+r"},
	{name: "disaggregation-mode", kind: kValue, used: true, help: "null | prefill | decode | encode"},
	{name: "disaggregation-bootstrap-port", kind: kValue, used: true, help: "rendezvous port (prefill/encode; default 8998)"},
	{name: "disaggregation-transfer-backend", kind: kValue, help: "mooncake (only choice)"},
	{name: "disaggregation-ib-device", kind: kValue, help: "RDMA devices"},
	{name: "disaggregation-layerwise-interval", kind: kValue, help: "layerwise transfer interval"},
	{name: "load-balance-method", kind: kValue, used: true, help: "validated: prefill with DP>1 needs round_robin"},
	{name: "dist-init-addr", kind: kValue, used: true, help: "HOST:PORT; HOST is where a prefill registers its ranks"},
	{name: "max-model-len", kind: kValue, used: true, help: "context length (default 32768)"},
	{name: "max-num-seqs", kind: kValue, used: true, help: "running-request cap, split across DP ranks (default 160); with --fake-perf the batch of continuous batching"},
	{name: "chunked-prefill-size", kind: kValue, used: true, help: "reported as max_num_batched_tokens (default 8192); with --fake-perf the prefill tokens one step computes (<= 0: whole prompts)"},
	{name: "prefix-granularity", kind: kValue, used: true, help: "reported in the registration (default 64)"},
	{name: "block-size", kind: kValue, used: true, alias: "prefix-granularity", help: "alias of --prefix-granularity"},
	{name: "dtype", kind: kValue, used: true, help: "auto | bfloat16 | float16 | float32 (auto reports bfloat16)"},
	{name: "enable-output-logprobs", kind: kBool, used: true, help: "allow return_logprob requests"},
	{name: "stream-interval", kind: kValue, used: true, help: "streaming emission interval (default 1)"},
	{name: "enable-log-requests", kind: kBool, help: "request logging"},
	{name: "enable-log-request-stats", kind: kBool, help: "request stats logging"},
	{name: "log-requests-level", kind: kValue, help: "0|1|2"},
	{name: "log-level", kind: kValue, help: "log level"},
	{name: "tokenizer", kind: kValue, used: true, help: "tokenizer path (its tokenizer.json spells --fake-replies and json_schema replies; default the model's)"},
	{name: "revision", kind: kValue, help: "model revision"},
	{name: "download-dir", kind: kValue, help: "download dir"},
	{name: "load-format", kind: kValue, help: "auto | dummy | ..."},
	{name: "quantization", kind: kValue, help: "quantization"},
	{name: "kv-cache-dtype", kind: kValue, help: "KV cache dtype"},
	{name: "trust-remote-code", kind: kBool, help: "trust remote code"},
	{name: "no-trust-remote-code", kind: kBool, help: "do not trust remote code"},
	{name: "language-model-only", kind: kBool, help: "text-only multimodal checkpoint"},
	{name: "enable-metrics", kind: kBool, help: "metrics"},
	{name: "grammar-backend", kind: kValue, help: "xgrammar | none"},
	{name: "reasoning-parser", kind: kValue, help: "reasoning parser"},
	{name: "zmq-msgpack", kind: kBool, help: "forced on by --headless"},
	{name: "skip-tokenizer-init", kind: kBool, help: "forced on by --headless"},
	{name: "dense-tp-size", kind: kValue, help: "dense TP size"},
	{name: "ep-size", kind: kValue, help: "expert parallel size"},
	{name: "expert-parallel-size", kind: kValue, help: "expert parallel size"},
	{name: "enable-expert-parallel", kind: kBool, help: "EP = world size"},
	{name: "moe-tp-size", kind: kValue, help: "MoE TP size"},
	{name: "nprocs-per-node", kind: kValue, help: "processes per node"},
	{name: "nnodes", kind: kValue, used: true, help: "nodes the engine spans: this launcher runs world/nnodes ranks; node 0 serves the rendezvous on --dist-init-addr"},
	{name: "node-rank", kind: kValue, used: true, help: "this node's index 0..nnodes-1: it runs global ranks [rank*ppn, (rank+1)*ppn)"},
	{name: "mm-encoder-tp-mode", kind: kValue, help: "weights | data"},
	{name: "base-gpu-id", kind: kValue, used: true, help: "first CUDA device (fake GPU memory holder)"},
	{name: "gpu-id-step", kind: kValue, help: "ignored upstream on this path"},
	{name: "gpu-memory-utilization", kind: kValue, used: true, help: "fraction of GPU memory for weights + KV; with --fake-perf it sizes the KV pool when --max-total-tokens is not given (default by world size, as TokenSpeed: 1: 0.88, 2-3: 0.87, 4-7: 0.95, 8-15: 0.81, 16+: 0.79)"},
	{name: "max-total-tokens", kind: kValue, used: true, help: "KV pool of each DP rank in tokens: the prefix cache's capacity, least recently used pages evicted beyond it; with --fake-perf also what running requests may hold, new ones waiting when it is full (default 262144, or with --fake-perf sized from the preset's GPU memory)"},
	{name: "max-prefill-tokens", kind: kValue, help: "max prefill tokens"},
	{name: "max-cudagraph-capture-size", kind: kValue, help: "decode graph sizes"},
	{name: "cudagraph-capture-sizes", kind: kList, help: "decode graph sizes"},
	{name: "prefill-graph-capture-sizes", kind: kList, help: "prefill graph sizes"},
	{name: "disable-prefill-graph", kind: kBool, help: "prefill graphs off"},
	{name: "enforce-eager", kind: kBool, help: "no CUDA graphs"},
	{name: "enable-prefix-caching", kind: kBool, used: true, help: "prefix caching on (the default)"},
	{name: "no-enable-prefix-caching", kind: kBool, used: true, help: "prefix caching off: cached_tokens stays 0, no KV events"},
	{name: "disable-prefix-caching", kind: kBool, used: true, help: "newer TokenSpeed's spelling of --no-enable-prefix-caching"},
	{name: "disable-kvstore", kind: kBool, help: "host-RAM KV store off"},
	{name: "kvstore-ratio", kind: kValue, help: "KV store size ratio"},
	{name: "kvstore-size", kind: kValue, help: "KV store size GB"},
	{name: "pdlb-url", kind: kValue, help: "unused by tsd"},
	{name: "host", kind: kValue, help: "unused in headless mode"},
	{name: "port", kind: kValue, help: "unused in headless mode"},
	{name: "kv-events-config", kind: kValue, used: true, help: "JSON: with enable_kv_cache_events true, each DP rank publishes its KV cache events on a ZMQ PUB at endpoint (port + dp rank) with a replay ROUTER at replay_endpoint (docs/protocol.md §16)"},
	{name: "rl-control-port", kind: kValue, help: "RL control port"},
	{name: "attention-backend", kind: kValue, help: "attention backend"},
	{name: "moe-backend", kind: kValue, help: "MoE backend"},
	{name: "comm-fusion-max-num-tokens", kind: kValue, help: "comm fusion"},
	{name: "engram-host-table", kind: kBool, help: "newer TokenSpeed only"},
	{name: "speculative-algorithm", kind: kValue, help: "speculative decoding"},
	{name: "speculative-draft-model-path", kind: kValue, help: "draft model"},
	{name: "speculative-num-steps", kind: kValue, help: "speculative steps"},
	{name: "speculative-eagle-topk", kind: kValue, help: "eagle top-k"},
	{name: "speculative-num-draft-tokens", kind: kValue, help: "draft tokens"},
	{name: "drafter-attention-backend", kind: kValue, help: "drafter attention backend"},
	{name: "disable-tf32", kind: kBool, help: "TF32 off"},
	{name: "disable-pdl", kind: kBool, help: "PDL off"},
	{name: "disable-symm-mem", kind: kBool, help: "symmetric memory off"},
	{name: "disable-nccl-nvls", kind: kBool, help: "NCCL NVLS off"},
	{name: "enable-dp-attention", kind: kBool, help: "SGLang habit; accepted"},
}

// orchestratorOnly are refused with --headless, as `ts serve` does.
var orchestratorOnly = map[string]bool{
	"engine-startup-timeout": true, "gateway-startup-timeout": true, "drain-timeout": true, "control-port": true,
}

// fakeFlags are ts-fake's own knobs. Each also reads env TS_FAKE_<NAME>
// (upper case, dashes as underscores); a flag beats its env var.
var fakeFlags = []flagSpec{
	{name: "fake-startup", kind: kValue, used: true, help: "total startup delay split across the milestone phases (default 300ms)"},
	{name: "fake-bootstrap", kind: kValue, used: true, help: "engine (default): the engine hosts the rendezvous on --disaggregation-bootstrap-port and reports it in its registration; external: register with the server already listening there"},
	{name: "fake-vocab", kind: kValue, used: true, help: "token ids are drawn from [0, N) (default 1000)"},
	{name: "fake-eos-id", kind: kValue, used: true, help: "EOS token id; -1 for none (default 2)"},
	{name: "fake-token-min", kind: kValue, used: true, help: "generated ids start at N (e.g. 256: skip a byte-level vocab's raw bytes); default 0"},
	{name: "fake-tokens-per-s", kind: kValue, used: true, help: "tokens per second per request = engine steps per second; 0: unpaced (default 50)"},
	{name: "fake-kv-timeout", kind: kValue, used: true, help: "decode: how long to wait for the prefill's KV before aborting (default $TOKENSPEED_DISAGGREGATION_WAITING_TIMEOUT or 300s)"},
	{name: "fake-send-timeout", kind: kValue, used: true, help: "prefill: how long to wait for the decode to fetch the KV before aborting (default $TOKENSPEED_DISAGGREGATION_BOOTSTRAP_TIMEOUT or 120s)"},
	{name: "fake-embed-timeout", kind: kValue, used: true, help: "EPD prefill: how long to wait for an image's embedding from the encode server before aborting (default $TOKENSPEED_DISAGGREGATION_WAITING_TIMEOUT or 300s)"},
	{name: "fake-prompt-logprobs", kind: kBool, used: true, help: "prefill and aggregated engines compute prompt logprobs for return_logprob with logprob_start_len >= 0 (default true; a prefill on its terminal output, an aggregated engine on its first); false: abort such requests with a message, as an engine without support"},
	{name: "fake-top-logprobs", kind: kBool, used: true, help: "answer return_logprob with top_logprobs_num > 0 with the top-k alternatives in the full output variant (default true); false: answer slim without them, as upstream's engine does"},
	{name: "fake-log-requests", kind: kBool, used: true, help: "log a `Req: <rid> Finish!` line per request (default true)"},
	{name: "fake-exit-code", kind: kValue, used: true, help: "exit code for --fake-exit-after / --fake-exit-after-requests (default 1)"},
	{name: "fake-exit-after", kind: kValue, used: true, help: "the engine exits with --fake-exit-code this long after start"},
	{name: "fake-exit-after-requests", kind: kValue, used: true, help: "the engine exits with --fake-exit-code when a rank received its K-th request"},
	{name: "fake-hang-after", kind: kValue, used: true, help: "ranks stop reading and stepping this long after their handshake"},
	{name: "fake-hang-after-requests", kind: kValue, used: true, help: "a rank stops reading and stepping after its K-th request"},
	{name: "fake-abort-requests", kind: kValue, used: true, help: "a rank finishes its first K requests with abort at once, no tokens (a worker failing for a while, then well again)"},
	{name: "fake-crash-rank", kind: kValue, used: true, help: "DP rank that crashes (default -1: none)"},
	{name: "fake-crash-after", kind: kValue, used: true, help: "when that rank crashes, counted from its handshake (default 0)"},
	{name: "fake-crash-mode", kind: kValue, used: true, help: "exception (log, sentinel, exit 1; default) | kill (SIGKILL itself, no sentinel)"},
	{name: "fake-handshake-delay", kind: kValue, used: true, help: "wait this long between INIT and READY (slow handshake)"},
	{name: "fake-refuse-registration", kind: kBool, used: true, help: "send READY but never the registration; stay alive"},
	{name: "fake-malformed-output", kind: kValue, used: true, help: "garbage | ragged | tag | unknown-rid: inject one bad output frame"},
	{name: "fake-malformed-at", kind: kValue, used: true, help: "inject it before the N-th output batch (default 1)"},
	{name: "fake-ignore-sigterm", kind: kBool, used: true, help: "launcher and ranks ignore SIGTERM (only SIGKILL stops them)"},
	{name: "fake-replies", kind: kValue, used: true, help: "FILE of prompt-substring -> reply rules (JSON array of {match, reply}, JSON object, or MATCH<TAB>REPLY lines): a matching prompt's completion spells the reply, then EOS"},
	{name: "fake-gpu-mem-mb", kind: kValue, used: true, help: "each rank holds N MB on its CUDA device through a python3+torch child (skipped with a log line without torch/GPU)"},
	{name: "fake-prefill-us-per-token", kind: kValue, used: true, help: "simulated prefill time per uncached prompt token, microseconds; a rank computes one prompt at a time (default 0: free)"},
	{name: "fake-perf", kind: kValue, used: true, help: "PRESET|FILE: time every engine step with the performance model (docs/perf-model.md): continuous batching, prefill by uncached tokens in chunks, decode by batch and KV read, KV transfer, TP efficiency; PRESET is a shipped one (llama-3.1-8b-bf16-h200), FILE a YAML or JSON preset. Off by default; while on, --fake-tokens-per-s and --fake-prefill-us-per-token are not used. Its figures are simulated"},
	{name: "fake-kv-events-drop", kind: kValue, used: true, help: "each rank's N-th KV event batch is buffered for replay but not sent on its PUB, as a PUB past its high-water mark drops it (default 0: none)"},
	{name: "fake-kv-clear-after-requests", kind: kValue, used: true, help: "a rank clears its prefix cache (one AllBlocksCleared event) when it receives its K-th request (default 0: never)"},
}

type parsedArgs struct {
	values   map[string]string   // canonical name -> last value ("true" for bools)
	lists    map[string][]string // kList values
	unknown  []string            // flags not in either table
	position []string            // positional arguments
	orch     []string            // orchestrator-only flags seen
	help     bool
}

var specByName = func() map[string]flagSpec {
	m := map[string]flagSpec{}
	for _, f := range append(append([]flagSpec{}, engineFlags...), fakeFlags...) {
		m[f.name] = f
	}
	return m
}()

// parseArgs reads argparse-style arguments (no abbreviations). Unknown
// flags are kept (with a value when the next token is not a flag) so the
// caller can warn about them instead of failing (docs/architecture.md §D9).
func parseArgs(args []string) parsedArgs {
	p := parsedArgs{values: map[string]string{}, lists: map[string][]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-h" || a == "--help" {
			p.help = true
			continue
		}
		if !strings.HasPrefix(a, "--") || a == "--" {
			p.position = append(p.position, a)
			continue
		}
		name, val, hasVal := strings.Cut(a[2:], "=")
		if orchestratorOnly[name] {
			p.orch = append(p.orch, "--"+name)
			if !hasVal && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				i++
			}
			continue
		}
		spec, ok := specByName[name]
		if !ok {
			p.unknown = append(p.unknown, "--"+name)
			if !hasVal && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				i++
			}
			continue
		}
		canon := name
		if spec.alias != "" {
			canon = spec.alias
		}
		switch spec.kind {
		case kBool:
			if !hasVal {
				val = "true"
			}
			p.values[canon] = val
		case kValue:
			if !hasVal {
				if i+1 < len(args) {
					i++
					val = args[i]
				}
			}
			p.values[canon] = val
		case kList:
			var vs []string
			if hasVal {
				vs = append(vs, val)
			}
			for i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				i++
				vs = append(vs, args[i])
			}
			p.lists[canon] = vs
		}
	}
	return p
}

// config is everything ts-fake acts on, resolved from flags and env.
type config struct {
	model, servedName    string
	tp, dp, world        int
	tpGiven, attnTPGiven bool
	worldGiven           bool
	dpAddr               string
	dpPort               int
	engineIndex          int
	mode                 string // null | prefill | decode | encode
	bootstrapPort        int
	bootstrapPortGiven   bool
	loadBalance          string
	distInitAddr         string
	maxModelLen          int
	maxNumSeqs           int
	chunkedPrefill       int
	prefixGranularity    int
	dtype                string
	logprobs             bool
	streamInterval       int
	baseGPU              int
	nnodes, nodeRank     int

	startup          time.Duration
	bootstrapMode    string // engine | external
	vocab            int
	eos              int
	tokenMin         int
	tokensPerS       float64
	kvTimeout        time.Duration
	sendTimeout      time.Duration
	heartbeat        time.Duration
	embedTimeout     time.Duration
	promptLogprobs   bool
	topLogprobs      bool
	logRequests      bool
	exitCode         int
	exitAfter        time.Duration
	exitAfterReqs    int
	hangAfter        time.Duration
	hangAfterReqs    int
	abortReqs        int
	crashRank        int
	crashAfter       time.Duration
	crashMode        string
	handshakeDelay   time.Duration
	refuseRegistrate bool
	malformed        string
	malformedAt      int
	ignoreSigterm    bool
	gpuMemMB         int
	tokenizer        string
	replies          []replyRule

	maxTotalTokens    int              // KV pool per DP rank, tokens
	gpuMemUtil        float64          // --gpu-memory-utilization, or TokenSpeed's default for the world size
	perf              *perfmodel.Model // --fake-perf: the performance model on this engine's TP; nil: off
	prefixCaching     bool             // the prefix cache is on
	kvEvents          *kvevents.Config // --kv-events-config when it enables publishing
	prefillUsPerToken float64          // simulated prefill cost per uncached prompt token
	kvDropAt          int              // the N-th event batch is not sent
	kvClearAfter      int              // clear the cache at the K-th request

	unknown []string
}

// usageError is an argument error: exit code 2, like argparse.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// valueError is a ServerArgs validation failure: exit code 1 with a
// traceback-like line, like TokenSpeed.
type valueError struct{ msg string }

func (e valueError) Error() string { return e.msg }

type lookup struct {
	p      parsedArgs
	getenv func(string) string
	err    error
}

func envName(flag string) string {
	return "TS_FAKE_" + strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(flag, "fake-"), "-", "_"))
}

func (l *lookup) raw(name string) (string, bool) {
	if v, ok := l.p.values[name]; ok {
		return v, true
	}
	if strings.HasPrefix(name, "fake-") {
		if v := l.getenv(envName(name)); v != "" {
			return v, true
		}
	}
	return "", false
}

func (l *lookup) str(name, def string) string {
	if v, ok := l.raw(name); ok {
		return v
	}
	return def
}

func (l *lookup) int(name string, def int) int {
	v, ok := l.raw(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil && l.err == nil {
		l.err = usageError{fmt.Sprintf("argument --%s: invalid int value: %q", name, v)}
	}
	return n
}

func (l *lookup) float(name string, def float64) float64 {
	v, ok := l.raw(name)
	if !ok {
		return def
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil && l.err == nil {
		l.err = usageError{fmt.Sprintf("argument --%s: invalid float value: %q", name, v)}
	}
	return n
}

func (l *lookup) bool(name string, def bool) bool {
	v, ok := l.raw(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil && l.err == nil {
		l.err = usageError{fmt.Sprintf("argument --%s: invalid bool value: %q", name, v)}
	}
	return b
}

// dur accepts Go durations ("3s") and plain seconds ("2.5").
func (l *lookup) dur(name string, def time.Duration) time.Duration {
	v, ok := l.raw(name)
	if !ok {
		return def
	}
	if d, err := time.ParseDuration(v); err == nil {
		return d
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(f * float64(time.Second))
	}
	if l.err == nil {
		l.err = usageError{fmt.Sprintf("argument --%s: invalid duration: %q", name, v)}
	}
	return def
}

func envSeconds(getenv func(string) string, name string, def time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(getenv(name), 64); err == nil && f > 0 {
		return time.Duration(f * float64(time.Second))
	}
	return def
}

// resolveConfig turns parsed arguments into a config and applies the
// TokenSpeed validation rules ts-fake mirrors (docs/protocol.md §10.9).
func resolveConfig(p parsedArgs, getenv func(string) string) (config, error) {
	l := &lookup{p: p, getenv: getenv}
	var c config
	if len(p.orch) > 0 {
		return c, valueError{fmt.Sprintf("%s cannot be used with --headless", strings.Join(p.orch, ", "))}
	}
	if _, ok := p.values["headless"]; !ok {
		return c, usageError{"ts-fake implements only `serve --headless`"}
	}
	c.model = l.str("model", "")
	if len(p.position) > 1 {
		return c, usageError{fmt.Sprintf("unrecognized arguments: %s", strings.Join(p.position[1:], " "))}
	}
	if len(p.position) == 1 {
		if c.model != "" {
			return c, valueError{"model given both positionally and by --model"}
		}
		c.model = p.position[0]
	}
	if c.model == "" {
		return c, valueError{"a model is required (--model or positional)"}
	}
	c.servedName = l.str("served-model-name", c.model)
	_, c.tpGiven = p.values["tp"]
	_, c.attnTPGiven = p.values["attn-tp-size"]
	if c.tpGiven && c.attnTPGiven {
		return c, valueError{"--tp and --attn-tp-size cannot be given together"}
	}
	c.tp = l.int("tp", l.int("attn-tp-size", 0))
	c.dp = l.int("data-parallel-size", 1)
	c.world = l.int("world-size", 0)
	_, c.worldGiven = p.values["world-size"]
	switch {
	case c.tp == 0 && c.world > 0:
		c.tp = c.world / max(c.dp, 1)
	case c.tp == 0:
		c.tp = 1
	}
	if c.world == 0 {
		c.world = c.tp * c.dp
	}
	if c.tp < 1 || c.dp < 1 || c.world != c.tp*c.dp {
		return c, valueError{fmt.Sprintf("world_size %d does not equal attn_tp %d x attn_dp %d", c.world, c.tp, c.dp)}
	}
	c.dpAddr = l.str("data-parallel-address", "127.0.0.1")
	if c.dpAddr == "" {
		return c, valueError{"--data-parallel-address must be non-empty"}
	}
	c.dpPort = l.int("data-parallel-rpc-port", 30500)
	c.engineIndex = l.int("zmq-engine-index", 0)
	if c.engineIndex < 0 || c.engineIndex > 65535 {
		return c, usageError{fmt.Sprintf("argument --zmq-engine-index: %d outside 0..65535", c.engineIndex)}
	}
	c.mode = l.str("disaggregation-mode", "null")
	switch c.mode {
	case "null", "prefill", "decode", "encode":
	default:
		return c, usageError{fmt.Sprintf("argument --disaggregation-mode: invalid choice: %q", c.mode)}
	}
	_, c.bootstrapPortGiven = p.values["disaggregation-bootstrap-port"]
	c.bootstrapPort = l.int("disaggregation-bootstrap-port", 8998)
	c.loadBalance = l.str("load-balance-method", "shortest_queue")
	c.distInitAddr = l.str("dist-init-addr", "")
	c.maxModelLen = l.int("max-model-len", 32768)
	c.maxNumSeqs = l.int("max-num-seqs", 160)
	c.chunkedPrefill = l.int("chunked-prefill-size", 8192)
	c.prefixGranularity = l.int("prefix-granularity", 64)
	c.dtype = l.str("dtype", "auto")
	switch c.dtype {
	case "auto":
		c.dtype = "bfloat16"
	case "bfloat16", "float16", "float32":
	case "half":
		c.dtype = "float16"
	case "float":
		c.dtype = "float32"
	default:
		return c, valueError{fmt.Sprintf("dtype %q is not supported by the msgpack lane (bfloat16, float16, float32)", c.dtype)}
	}
	_, totalGiven := p.values["max-total-tokens"]
	c.maxTotalTokens = l.int("max-total-tokens", kvCacheTokens)
	if c.maxTotalTokens < 1 {
		return c, valueError{fmt.Sprintf("--max-total-tokens %d must be positive", c.maxTotalTokens)}
	}
	c.gpuMemUtil = l.float("gpu-memory-utilization", defaultMemUtil(c.world))
	if c.gpuMemUtil <= 0 || c.gpuMemUtil > 1 {
		return c, valueError{fmt.Sprintf("--gpu-memory-utilization %g must be in (0, 1]", c.gpuMemUtil)}
	}
	if name := l.str("fake-perf", ""); name != "" {
		preset, err := perfmodel.Load(name)
		if err != nil {
			return c, usageError{"argument --fake-perf: " + err.Error()}
		}
		m := preset.For(c.tp)
		c.perf = &m
		if !totalGiven {
			if c.maxTotalTokens, err = m.KVCapacity(c.gpuMemUtil); err != nil {
				return c, valueError{fmt.Sprintf("--fake-perf %s: the KV pool at --gpu-memory-utilization %g: %v", preset.Name, c.gpuMemUtil, err)}
			}
		}
	}
	c.prefixCaching = !l.bool("no-enable-prefix-caching", false) && !l.bool("disable-prefix-caching", false)
	if cfg, ok := l.raw("kv-events-config"); ok && cfg != "" {
		kc, err := kvevents.ParseConfig(cfg)
		if err != nil {
			return c, valueError{err.Error()}
		}
		if kc.Enabled() {
			c.kvEvents = &kc
		}
	}
	c.logprobs = l.bool("enable-output-logprobs", false)
	c.streamInterval = l.int("stream-interval", 1)
	c.baseGPU = l.int("base-gpu-id", 0)
	c.nnodes = l.int("nnodes", 1)
	c.nodeRank = l.int("node-rank", 0)
	switch {
	case c.nnodes < 1:
		return c, valueError{fmt.Sprintf("--nnodes %d must be >= 1", c.nnodes)}
	case c.nodeRank < 0 || c.nodeRank >= c.nnodes:
		return c, valueError{fmt.Sprintf("--node-rank %d must be in [0, %d)", c.nodeRank, c.nnodes)}
	case c.world%c.nnodes != 0:
		return c, valueError{fmt.Sprintf("world_size %d is not divisible by nnodes %d", c.world, c.nnodes)}
	case c.nnodes > 1 && c.distInitAddr == "":
		return c, valueError{"--dist-init-addr is required with --nnodes > 1"}
	}
	switch {
	case c.mode == "encode" && c.dp > 1:
		return c, valueError{"encode mode does not support attention data parallelism (--data-parallel-size > 1)"}
	case c.mode == "prefill" && c.dp > 1 && c.loadBalance != "round_robin":
		return c, valueError{"prefill with --data-parallel-size > 1 requires --load-balance-method round_robin"}
	case c.dp > 1 && c.distInitAddr == "":
		return c, valueError{"--dist-init-addr is required with --data-parallel-size > 1 on one node"}
	case c.maxNumSeqs < c.dp:
		return c, valueError{fmt.Sprintf("--max-num-seqs %d must be >= --data-parallel-size %d", c.maxNumSeqs, c.dp)}
	}

	c.startup = l.dur("fake-startup", 300*time.Millisecond)
	c.bootstrapMode = l.str("fake-bootstrap", "engine")
	if c.bootstrapMode != "engine" && c.bootstrapMode != "external" {
		return c, usageError{fmt.Sprintf("argument --fake-bootstrap: invalid choice %q (engine, external)", c.bootstrapMode)}
	}
	c.vocab = l.int("fake-vocab", 1000)
	c.eos = l.int("fake-eos-id", 2)
	c.tokenMin = l.int("fake-token-min", 0)
	c.tokensPerS = l.float("fake-tokens-per-s", 50)
	c.kvTimeout = l.dur("fake-kv-timeout", envSeconds(getenv, "TOKENSPEED_DISAGGREGATION_WAITING_TIMEOUT", 300*time.Second))
	c.sendTimeout = l.dur("fake-send-timeout", envSeconds(getenv, "TOKENSPEED_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 120*time.Second))
	c.embedTimeout = l.dur("fake-embed-timeout", envSeconds(getenv, "TOKENSPEED_DISAGGREGATION_WAITING_TIMEOUT", 300*time.Second))
	c.promptLogprobs = l.bool("fake-prompt-logprobs", true)
	c.topLogprobs = l.bool("fake-top-logprobs", true)
	c.heartbeat = envSeconds(getenv, "TOKENSPEED_DISAGGREGATION_HEARTBEAT_INTERVAL", 5*time.Second)
	c.logRequests = l.bool("fake-log-requests", true)
	c.exitCode = l.int("fake-exit-code", 1)
	c.exitAfter = l.dur("fake-exit-after", 0)
	c.exitAfterReqs = l.int("fake-exit-after-requests", 0)
	c.hangAfter = l.dur("fake-hang-after", 0)
	c.hangAfterReqs = l.int("fake-hang-after-requests", 0)
	c.abortReqs = l.int("fake-abort-requests", 0)
	c.crashRank = l.int("fake-crash-rank", -1)
	c.crashAfter = l.dur("fake-crash-after", 0)
	c.crashMode = l.str("fake-crash-mode", "exception")
	if c.crashMode != "exception" && c.crashMode != "kill" {
		return c, usageError{fmt.Sprintf("argument --fake-crash-mode: invalid choice %q (exception, kill)", c.crashMode)}
	}
	c.handshakeDelay = l.dur("fake-handshake-delay", 0)
	c.refuseRegistrate = l.bool("fake-refuse-registration", false)
	c.malformed = l.str("fake-malformed-output", "")
	switch c.malformed {
	case "", "garbage", "ragged", "tag", "unknown-rid":
	default:
		return c, usageError{fmt.Sprintf("argument --fake-malformed-output: invalid choice %q (garbage, ragged, tag, unknown-rid)", c.malformed)}
	}
	c.malformedAt = l.int("fake-malformed-at", 1)
	c.ignoreSigterm = l.bool("fake-ignore-sigterm", false)
	c.gpuMemMB = l.int("fake-gpu-mem-mb", 0)
	c.prefillUsPerToken = l.float("fake-prefill-us-per-token", 0)
	if c.prefillUsPerToken < 0 {
		return c, usageError{"--fake-prefill-us-per-token must not be negative"}
	}
	c.kvDropAt = l.int("fake-kv-events-drop", 0)
	c.kvClearAfter = l.int("fake-kv-clear-after-requests", 0)
	c.tokenizer = l.str("tokenizer", "")
	if f := l.str("fake-replies", ""); f != "" {
		rules, err := loadReplies(f)
		if err != nil {
			return c, usageError{err.Error()}
		}
		c.replies = rules
	}
	if c.vocab < 1 {
		return c, usageError{"--fake-vocab must be >= 1"}
	}
	c.unknown = p.unknown
	return c, l.err
}

// defaultMemUtil is TokenSpeed's --gpu-memory-utilization default for a
// world size (docs/protocol.md §10.6 lists the flag; the table is
// upstream's server args).
func defaultMemUtil(world int) float64 {
	switch {
	case world >= 16:
		return 0.79
	case world >= 8:
		return 0.81
	case world >= 4:
		return 0.95
	case world >= 2:
		return 0.87
	default:
		return 0.88
	}
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, `usage: ts-fake serve --headless [--model] MODEL [flags]

ts-fake is a stand-in for `+"`ts serve --headless`"+`: it launches one scheduler
process per rank, dials the gateway's ZMQ lane exactly like TokenSpeed, and
answers requests with deterministic tokens. Any flag not listed is accepted
with a warning ("flag unknown to ts-fake").

TokenSpeed flags ts-fake acts on:`)
	var used, ignored []flagSpec
	for _, f := range engineFlags {
		if f.used {
			used = append(used, f)
		} else {
			ignored = append(ignored, f)
		}
	}
	for _, f := range used {
		fmt.Fprintf(w, "  --%-34s %s\n", f.name, f.help)
	}
	fmt.Fprintln(w, "\nTokenSpeed flags accepted and ignored:")
	names := make([]string, 0, len(ignored))
	for _, f := range ignored {
		names = append(names, "--"+f.name)
	}
	sort.Strings(names)
	line := " "
	for _, n := range names {
		if len(line)+len(n) > 78 {
			fmt.Fprintln(w, line)
			line = " "
		}
		line += " " + n
	}
	fmt.Fprintln(w, line)
	fmt.Fprintln(w, "\nRefused with --headless (as ts serve does): --engine-startup-timeout --gateway-startup-timeout --drain-timeout --control-port")
	fmt.Fprintln(w, "\nts-fake knobs (each also read from env TS_FAKE_<NAME>, e.g. --fake-exit-after = TS_FAKE_EXIT_AFTER; the flag wins):")
	for _, f := range fakeFlags {
		fmt.Fprintf(w, "  --%-26s %s\n", f.name, f.help)
	}
}

func exitWithArgError(err error) {
	switch e := err.(type) {
	case usageError:
		fmt.Fprintf(os.Stderr, "usage: ts-fake serve --headless [--model] MODEL [flags]\nts-fake: error: %s\n", e.msg)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "Traceback (most recent call last):\n  File \"ts-fake\", line 1, in <module>\nValueError: %s\n", err)
		os.Exit(1)
	}
}
