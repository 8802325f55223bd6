package profiles

// The Plan is the contract between the planner and everything that runs:
// the supervisor executes it, the gateway binds what it names, and `tsd plan
// --json` prints it. Keep it plain data (no methods with side effects) and
// keep JSON keys snake_case and stable: they are documented in the README.

import (
	"encoding/json"
	"fmt"
	"time"
)

// Plan is everything tsd will do for one profile, computed before anything
// starts.
type Plan struct {
	Name            string `json:"name"`
	ProfilePath     string `json:"profile_path"`
	Model           string `json:"model"`
	Tokenizer       string `json:"tokenizer"`
	ServedModelName string `json:"served_model_name"`
	RunDir          string `json:"run_dir"`
	LogDir          string `json:"log_dir"`
	// LogMaxMB and LogKeep (log_max_mb, log_keep) rotate every log file;
	// 0 in a hand-written plan: 100 MiB and 3.
	LogMaxMB      int    `json:"log_max_mb,omitempty"`
	LogKeep       int    `json:"log_keep,omitempty"`
	ControlSocket string `json:"control_socket"`
	Accelerator   string `json:"accelerator"` // nvidia | ascend (empty in old plans: nvidia)
	// IntranodeNVLink: the profile acknowledges MC_INTRANODE_NVLINK
	// (engine.mooncake.intranode_nvlink), so preflight does not warn.
	IntranodeNVLink bool `json:"intranode_nvlink,omitempty"`
	// TransferBackend is engine.transfer_backend.
	TransferBackend string `json:"transfer_backend,omitempty"`
	// Launcher is how roles start: "" (tsd's guardian on this host) or
	// "slurm" (each role a step of SlurmJob).
	Launcher string      `json:"launcher,omitempty"`
	SlurmJob string      `json:"slurm_job,omitempty"`
	Gateway  GatewayPlan `json:"gateway"`
	Roles    []RolePlan  `json:"roles"`
	Warnings []string    `json:"warnings,omitempty"`
	// SLO is slo: (the SLO planner's targets and bounds); nil: no planner.
	SLO *SLOPlan `json:"slo,omitempty"`
}

// Role kinds.
const (
	KindEncode  = "encode"
	KindPrefill = "prefill"
	KindDecode  = "decode"
	// KindAggregated is in kinds.go, beside the table of kinds.
)

// Gateway modes after `auto` is resolved.
const (
	ModePD  = "pd"
	ModeEPD = "epd"
)

// GatewayPlan is what the embedded gateway binds and serves.
type GatewayPlan struct {
	Listen string     `json:"listen"` // host:port of the OpenAI HTTP API
	URL    string     `json:"url"`    // http://host:port
	Mode   string     `json:"mode"`   // pd | epd
	Policy PolicyPlan `json:"policy"`
	// CacheAware, KVAware, PrefixHash, Manual and Bucket are the knobs of the
	// policies some pool uses (docs/profiles.md "Routing policies"); nil
	// when none does.
	CacheAware      *CacheAwarePlan `json:"cache_aware,omitempty"`
	KVAware         *KVAwarePlan    `json:"kv_aware,omitempty"`
	PrefixHash      *PrefixHashPlan `json:"prefix_hash,omitempty"`
	Manual          *ManualPlan     `json:"manual,omitempty"`
	Bucket          *BucketPlan     `json:"bucket,omitempty"`
	APIKeyEnv       string          `json:"api_key_env,omitempty"`
	BootstrapServer string          `json:"bootstrap_server"` // engine | tsd
	ImageURLs       bool            `json:"image_urls"`       // http(s) image_url parts are fetched
	// StallTimeout (health.stall_timeout): a rank with requests in flight
	// that sends nothing this long is reported stalled.
	StallTimeout Duration `json:"stall_timeout"`
	// QueueTimeout (gateway.queue_timeout): how long a request waits for a
	// routable worker before it fails.
	QueueTimeout  Duration `json:"queue_timeout"`
	ImageURLAllow []string `json:"image_url_allow,omitempty"` // hosts/CIDRs exempt from the private-address refusal
	MetricsPublic bool     `json:"metrics_public,omitempty"`  // /metrics without the API key
	MaxConcurrent int      `json:"max_concurrent,omitempty"`  // generation requests served at once; 0 unlimited
	CORSOrigins   []string `json:"cors_origins,omitempty"`    // browser origins allowed; "*" any
	// TokenizerCacheMB (gateway.tokenizer_cache_mb): the prompt tokenizer
	// cache's budget in MiB; 0 off.
	TokenizerCacheMB int `json:"tokenizer_cache_mb"`
	// ToolCallParser and ReasoningParser are the reply parsers the OpenAI
	// API runs, defaults resolved ("passthrough": none).
	ToolCallParser  string       `json:"tool_call_parser"`
	ReasoningParser string       `json:"reasoning_parser"`
	LogFile         string       `json:"log_file"`
	Workers         []WorkerPlan `json:"workers"`
	// Retry and CircuitBreaker (gateway.retry, gateway.circuit_breaker).
	// Their zero values, as a hand-written plan has them, mean no retry,
	// no migration and no breaker.
	Retry          RetryPlan          `json:"retry"`
	CircuitBreaker CircuitBreakerPlan `json:"circuit_breaker"`
	// Disaggregation (gateway.disaggregation, resolved): always (every
	// request prefill → decode), never (every request on an aggregated
	// engine) or conditional (per request, by Conditional). Empty in a
	// hand-written plan: always.
	Disaggregation string `json:"disaggregation"`
	// Conditional (gateway.conditional): under disaggregation: conditional
	// a request goes to an aggregated engine when its uncached prompt
	// tokens are at most MaxUncachedTokens and at most MaxUncachedRatio of
	// the prompt, or when every prefill is busy.
	Conditional ConditionalPlan `json:"conditional"`
	// Admission (gateway.admission): nil while the profile leaves it at
	// its defaults (nothing bounded). APIKeys (gateway.api_keys): the
	// keys' names, variables, limits and priorities; never their values.
	Admission *AdmissionPlan `json:"admission,omitempty"`
	APIKeys   []APIKeyPlan   `json:"api_keys,omitempty"`
	// Tracing (gateway.tracing): where the gateway sends a trace per
	// request; nil: no tracing.
	Tracing *TracingPlan `json:"tracing,omitempty"`
}

// ConditionalPlan is gateway.conditional (docs/profiles.md
// "Conditional disaggregation"; Dynamo's defaults).
type ConditionalPlan struct {
	// MaxUncachedTokens: a prompt whose tokens not cached on the
	// aggregated engine the policy would pick are at most this many …
	MaxUncachedTokens int `json:"max_uncached_tokens"`
	// MaxUncachedRatio: … and at most this share of the prompt (0, 1]
	// goes to that aggregated engine.
	MaxUncachedRatio float64 `json:"max_uncached_ratio"`
	// PrefillBusy: a prefill worker with more prompt tokens than this
	// queued on it (sent, first output not yet back) is busy; when every
	// prefill is busy the request goes aggregated whatever its prompt. 0:
	// a prefill is never busy.
	PrefillBusy int `json:"prefill_busy"`
}

// RetryPlan is gateway.retry, SMG's retry knobs under SMG's names plus
// migration (docs/protocol.md §11.9).
type RetryPlan struct {
	// MaxRetries counts attempts as SMG does: the first try is one, so 5
	// is the first try and four more; 1 (or 0) never retries.
	MaxRetries int `json:"max_retries"`
	// The delay before attempt a+1 (a counted from 0) is
	// min(InitialBackoffMS × BackoffMultiplier^a, MaxBackoffMS) ×
	// (1 + U[-JitterFactor, +JitterFactor]).
	InitialBackoffMS  int     `json:"initial_backoff_ms"`
	MaxBackoffMS      int     `json:"max_backoff_ms"`
	BackoffMultiplier float64 `json:"backoff_multiplier"`
	JitterFactor      float64 `json:"jitter_factor"`
	// Migrate continues a stream whose decode died after tokens were sent
	// on another decode (a new PD pair fed the prompt plus those tokens).
	Migrate bool `json:"migrate"`
}

// CircuitBreakerPlan is gateway.circuit_breaker, SMG's knobs under SMG's
// names (docs/protocol.md §11.9). FailureThreshold 0 (a hand-written
// plan) means no breaker.
type CircuitBreakerPlan struct {
	FailureThreshold    int `json:"failure_threshold"`
	SuccessThreshold    int `json:"success_threshold"`
	TimeoutDurationSecs int `json:"timeout_duration_secs"`
	WindowDurationSecs  int `json:"window_duration_secs"`
}

// PolicyPlan names the worker-selection policy per role kind.
type PolicyPlan struct {
	Prefill    string `json:"prefill"`
	Decode     string `json:"decode"`
	Encode     string `json:"encode"`
	Aggregated string `json:"aggregated"`
}

// WorkerPlan is one worker's socket set on the gateway side (docs/protocol.md).
type WorkerPlan struct {
	Role        string `json:"role"` // role instance name
	Kind        string `json:"kind"`
	URL         string `json:"url"`                 // ipc://PATH or tcp://HOST:PORT as planned
	Handshake   string `json:"handshake"`           // tcp://HOST:PORT the handshake ROUTER binds
	Input       string `json:"input"`               // input ROUTER bind address (tcp://HOST:0 for tcp workers)
	Output      string `json:"output"`              // output PULL bind address
	Bootstrap   string `json:"bootstrap,omitempty"` // host:port of the KV/embedding rendezvous (prefill/encode)
	DP          int    `json:"dp"`
	EngineIndex int    `json:"engine_index"`
	Remote      bool   `json:"remote"` // engine runs on another host; tsd does not spawn it
	// KVEvents is where the engine's DP ranks publish their KV cache
	// events, when it does (prefill and aggregated roles with kv_events).
	KVEvents *KVEventsPlan `json:"kv_events,omitempty"`
}

// KVEventsPlan is one engine's KV event sockets (docs/protocol.md §16):
// the --kv-events-config it is given, and per DP rank where the gateway
// dials its publisher and its replay socket (upstream adds the DP rank to
// both configured ports).
type KVEventsPlan struct {
	Config     string   `json:"config"`      // the JSON of --kv-events-config
	Port       int      `json:"port"`        // DP rank r publishes on Port + r
	ReplayPort int      `json:"replay_port"` // and answers replays on ReplayPort + r
	Publish    []string `json:"publish"`     // tcp://HOST:PORT per DP rank, as the gateway dials it
	Replay     []string `json:"replay"`      // the same for the replay sockets
}

// Ports lists every port the engine binds for its KV events.
func (k *KVEventsPlan) Ports() []int {
	if k == nil {
		return nil
	}
	var out []int
	for r := range k.Publish {
		out = append(out, k.Port+r)
	}
	for r := range k.Replay {
		out = append(out, k.ReplayPort+r)
	}
	return out
}

// RolePlan is one role instance (after replica expansion).
type RolePlan struct {
	Name        string   `json:"name"`  // instance name, e.g. decode-1
	Group       string   `json:"group"` // profile entry name, e.g. decode
	Kind        string   `json:"kind"`
	Host        string   `json:"host"` // "local" or a remote host
	Local       bool     `json:"local"`
	GPUs        []string `json:"gpus"` // as written: indices or UUIDs
	TP          int      `json:"tp"`
	DP          int      `json:"dp"`
	EngineIndex int      `json:"engine_index"`
	// GPUMemoryUtilization is the --gpu-memory-utilization tsd passes (0:
	// none); roles sharing a GPU all have one.
	GPUMemoryUtilization float64           `json:"gpu_memory_utilization,omitempty"`
	IBDevice             string            `json:"ib_device,omitempty"` // --disaggregation-ib-device
	Argv                 []string          `json:"argv"`                // full, starting with the engine command
	Env                  map[string]string `json:"env"`                 // the whole added environment
	Worker               string            `json:"worker"`
	Handshake            string            `json:"handshake"`
	DistInitAddr         string            `json:"dist_init_addr"`
	PortCluster          []int             `json:"port_cluster"`
	Bootstrap            string            `json:"bootstrap,omitempty"` // host:port, prefill/encode
	BootstrapPort        int               `json:"bootstrap_port,omitempty"`
	LogFile              string            `json:"log_file"`
	KVEvents             *KVEventsPlan     `json:"kv_events,omitempty"` // prefill and aggregated roles with kv_events
	Restart              RestartPlan       `json:"restart"`
	// StallAction (health.stall_action): restart | wait.
	StallAction string `json:"stall_action"`
	// Launcher "slurm": Argv runs as the job step Step on Node (address
	// NodeAddr) through Srun, which ends with "--" and the step shim
	// (slurm.StepShim); SlurmGPUs is its --gres gpu:N on each
	// node. GPUs is then empty: Slurm picks the devices and sets
	// CUDA_VISIBLE_DEVICES in the step itself, and the step's `tsd _srun`
	// keeps what each task got in SlurmInfo (slurm.StepInfo). A
	// role spanning several nodes lists them in Nodes (Node is the first,
	// where its dist-init is) and runs one task on each. NodeRemote: some
	// of its nodes are not the job's first, where tsd runs.
	Launcher   string   `json:"launcher,omitempty"`
	Node       string   `json:"node,omitempty"`
	Nodes      []string `json:"nodes,omitempty"`
	NodeAddr   string   `json:"node_addr,omitempty"`
	NodeRemote bool     `json:"node_remote,omitempty"`
	Step       string   `json:"step,omitempty"`
	Srun       []string `json:"srun,omitempty"`
	SlurmGPUs  int      `json:"slurm_gpus,omitempty"`
	SlurmInfo  string   `json:"slurm_info,omitempty"`
	// PlannedAs is the instance name this instance's socket path,
	// handshake port and log file were planned under, when that is not
	// Name: an instance renamed by tsd apply or tsd scale (decode becomes
	// decode-0 when a second replica is added, and back) keeps its
	// process and with it those addresses; from then on the name and the
	// address are decoupled, and this field says so
	// (docs/architecture.md §4.3).
	PlannedAs string `json:"planned_as,omitempty"`
}

// LauncherSlurm is Plan.Launcher and RolePlan.Launcher for Slurm job steps.
const LauncherSlurm = "slurm"

// Command is the whole command line that starts the role: the srun
// prefix and the engine argv under --launcher slurm, the argv otherwise.
func (r *RolePlan) Command() []string {
	if len(r.Srun) == 0 {
		return r.Argv
	}
	return append(append([]string{}, r.Srun...), r.Argv...)
}

// RestartPlan is the resolved restart policy of one role instance.
type RestartPlan struct {
	Policy       string   `json:"policy"` // no | on-failure | always
	Backoff      Duration `json:"backoff"`
	MaxBackoff   Duration `json:"max_backoff"`
	ResetAfter   Duration `json:"reset_after"`
	BudgetCount  int      `json:"budget_count"`
	BudgetWindow Duration `json:"budget_window"`
	StopGrace    Duration `json:"stop_grace"`
	DrainTimeout Duration `json:"drain_timeout"`
}

// Duration prints as Go duration text ("2s", "10m0s") in JSON so plans stay
// readable; it also accepts a number of nanoseconds when decoding.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("parse duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration must be a string like \"2s\": %w", err)
	}
	*d = Duration(n)
	return nil
}

// DevicesVar is the variable that hands this plan's roles their devices.
func (p *Plan) DevicesVar() string { return VisibleDevicesVar(p.Accelerator) }

// Role finds a role instance by name.
func (p *Plan) Role(name string) (*RolePlan, bool) {
	for i := range p.Roles {
		if p.Roles[i].Name == name {
			return &p.Roles[i], true
		}
	}
	return nil, false
}

// Worker finds the gateway-side worker of a role instance.
func (g *GatewayPlan) Worker(role string) (*WorkerPlan, bool) {
	for i := range g.Workers {
		if g.Workers[i].Role == role {
			return &g.Workers[i], true
		}
	}
	return nil, false
}
