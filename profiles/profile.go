package profiles

import (
	"time"
)

// Profile is a loaded, defaulted and statically validated profile file
// (docs/profiles.md). Paths in it are already absolute where the file gave
// relative ones (docs/architecture.md). Load builds it; the planner turns it into a
// Plan.
type Profile struct {
	Path string // the file path as given (used in error messages)
	Abs  string // absolute path of the file
	Dir  string // absolute directory of the file; relative paths resolve here

	Name            string
	Model           string
	Tokenizer       string
	ServedModelName string
	// Accelerator is nvidia or ascend as written; "" leaves it to the host
	// (see HostFacts.Accelerator).
	Accelerator string
	Engine      Engine
	Gateway     Gateway
	Roles       []Role
	Restart     Restart
	Health      Health
	RunDir      string
	LogDir      string
	// LogMaxMB and LogKeep rotate every log file: past LogMaxMB MiB a
	// log moves to .1 (the older ones up), LogKeep of them kept.
	LogMaxMB int
	LogKeep  int
	Slurm    Slurm
	SLO      *SLO // slo: the SLO planner's targets; nil: no planner

	// pos maps key paths ("roles[1].gpus") to where they are written, so
	// planner errors can name the line of the key that causes them.
	pos map[string]Pos
	// warnings found while loading (e.g. a tight GPU share); MakePlan
	// adds them to the plan's.
	warnings []*Error
}

// Engine holds settings every role inherits.
type Engine struct {
	Command         []string
	TransferBackend string
	IBDevice        string
	Mooncake        Mooncake
	Args            []string
	Env             map[string]string
}

// Mooncake holds the transfer engine's settings.
type Mooncake struct {
	// IntranodeNVLink acknowledges MC_INTRANODE_NVLINK in an env: the
	// platform is known to support the forced intra-node NVLink transport.
	IntranodeNVLink bool
}

// Gateway is the embedded gateway's configuration.
type Gateway struct {
	Host   string
	Port   int
	Mode   string // auto | pd | epd
	Policy PolicyPlan
	// Routing holds the knobs of the policies that have them.
	Routing         Routing
	APIKeyEnv       string
	BootstrapServer string // engine | tsd
	// ImageURLs lets chat image parts name http(s) URLs the gateway
	// fetches; off, only data: URLs are taken (no outbound fetches).
	ImageURLs bool
	// QueueTimeout bounds how long a request may wait for a routable
	// worker (every one draining, stalled or restarting) before it fails.
	QueueTimeout time.Duration
	// ImageURLAllow lists hosts and CIDR prefixes image URLs may reach
	// although they are loopback, private, link-local or metadata
	// addresses (refused by default).
	ImageURLAllow []string
	// MetricsPublic serves /metrics without the API key.
	MetricsPublic bool
	// Tracing is gateway.tracing: a trace per request over OTLP/HTTP.
	Tracing TracingPlan
	// MaxConcurrent bounds the generation requests served at once; more
	// wait up to QueueTimeout, then get 429. 0: unlimited.
	MaxConcurrent int
	// CORSOrigins are the browser origins allowed to call the API ("*":
	// any); empty: no CORS headers.
	CORSOrigins []string
	// TokenizerCacheMB is the byte budget of the prompt tokenizer cache
	// (gateway/tokenizer/cache.go) in MiB; 0 turns it off.
	TokenizerCacheMB int
	// ToolCallParser and ReasoningParser name the gateway's reply parsers
	// (gateway/parsers, SMG's spelling); empty: the model family's default
	// (parsernames.DefaultFor, as `ts serve` picks them).
	ToolCallParser  string
	ReasoningParser string
	// Retry and CircuitBreaker are gateway.retry and
	// gateway.circuit_breaker (SMG's knobs and defaults): how a request
	// whose legs failed is sent again, and when a failing worker leaves
	// routing for a while.
	Retry          RetryPlan
	CircuitBreaker CircuitBreakerPlan
	// Admission and APIKeys are gateway.admission and gateway.api_keys
	// (admission.go): the queue in front of the engines, and the keys
	// with their limits and priorities.
	Admission AdmissionPlan
	APIKeys   []APIKeyPlan
	// Disaggregation is gateway.disaggregation resolved: always, never or
	// conditional (the default follows the role kinds; validate.go).
	Disaggregation string
	// Conditional is gateway.conditional: when a request under
	// disaggregation: conditional goes to an aggregated engine.
	Conditional ConditionalPlan
}

// Health is how tsd judges a running role that has stopped making
// progress (docs/architecture.md: liveness without a heartbeat).
type Health struct {
	// StallAction is what happens to a stalled role: restart it, or wait
	// (out of routing) until it recovers.
	StallAction string
	// StallTimeout is how long a rank with requests in flight may send
	// nothing before the gateway calls it stalled.
	StallTimeout time.Duration
}

// Role is one profile entry of `roles:`; with replicas > 1 it expands to
// several instances.
type Role struct {
	Name     string
	Kind     string
	Replicas int
	// GPUs has one GPU set per replica (one set when Replicas is 1).
	GPUs [][]string
	TP   int
	DP   int
	// Per-replica explicit values; empty string / 0 means "plan it".
	Workers        []string
	DistInitPorts  []int
	BootstrapPorts []int
	BootstrapHost  string
	EngineIndex    int
	Args           []string
	Env            map[string]string
	Host           string // "local" or a remote host name
	Restart        Restart
	// GPUMemoryUtilization is --gpu-memory-utilization (0 = not set); a
	// GPU may be shared only by roles that all set it.
	GPUMemoryUtilization float64
	// IBDevice overrides engine.ib_device for this role.
	IBDevice string
	// Node is the index into the Slurm job's node list this role runs on
	// with --launcher slurm; -1 lets the planner pack it.
	Node int
	// Nodes are the node indices of a role that spans several nodes of
	// the Slurm job (ascending, distinct; one task on each, tp × dp split
	// evenly); nil when it runs on one. Exclusive with Node.
	Nodes []int
	// KVEvents is the role's kv_events: nil leaves it to the kind's
	// policy (on under kv_aware); only kinds whose row has KVEvents
	// (prefill, aggregated) publish them.
	KVEvents *bool
	// KVEventsPorts are explicit first KV event ports, one per replica
	// (0: planned).
	KVEventsPorts []int
}

// Local reports whether tsd spawns this role itself.
func (r *Role) Local() bool { return r.Host == "" || r.Host == HostLocal }

// Slurm holds the batch settings of `tsd export slurm`.
type Slurm struct {
	Time      string // #SBATCH --time
	Partition string // #SBATCH --partition ("" = the cluster's default)
	Account   string // #SBATCH --account
}

// Restart is a resolved restart policy.
type Restart struct {
	Policy       string
	Backoff      time.Duration
	MaxBackoff   time.Duration
	ResetAfter   time.Duration
	BudgetCount  int
	BudgetWindow time.Duration
	StopGrace    time.Duration
	// DrainTimeout bounds how long a requested stop or restart waits for
	// the role's in-flight requests to finish before ending them.
	DrainTimeout time.Duration
}

// Plan converts the resolved policy into its Plan form.
func (r Restart) Plan() RestartPlan {
	return RestartPlan{
		Policy:       r.Policy,
		Backoff:      Duration(r.Backoff),
		MaxBackoff:   Duration(r.MaxBackoff),
		ResetAfter:   Duration(r.ResetAfter),
		BudgetCount:  r.BudgetCount,
		BudgetWindow: Duration(r.BudgetWindow),
		StopGrace:    Duration(r.StopGrace),
		DrainTimeout: Duration(r.DrainTimeout),
	}
}

// Defaults and fixed names of the profile format.
const (
	HostLocal              = "local"
	DefaultGatewayHost     = "127.0.0.1"
	DefaultGatewayPort     = 8000
	DefaultTransferBackend = "mooncake"
	// StateRoot is the folder beside a profile under which each
	// deployment keeps its state by name (StateDir): the default run_dir
	// is <StateRoot>/<name>/run, the default log_dir <StateRoot>/<name>/logs.
	StateRoot = ".tsd"
	// LegacyRunDir and LegacyLogDir are the defaults of tsd before each
	// deployment had its own state folder: every profile of a folder
	// shared them. A daemon of that tsd still running is found there.
	LegacyRunDir        = ".tsd/run"
	LegacyLogDir        = ".tsd/logs"
	ModeAuto            = "auto"
	BootstrapEngine     = "engine"
	BootstrapTSD        = "tsd"
	RestartNo           = "no"
	RestartOnFailure    = "on-failure"
	RestartAlways       = "always"
	StallRestart        = "restart"
	StallWait           = "wait"
	DefaultStallTimeout = 30 * time.Second
	DefaultQueueTimeout = 30 * time.Second
	DefaultDrainTimeout = 30 * time.Second
	// GatewayLogName is the gateway's log file name inside log_dir, which is
	// why no role may be called "gateway".
	GatewayLogName = "gateway"
)

// DefaultRestart is the restart policy when the profile sets none (the
// restart section's defaults).
func DefaultRestart() Restart {
	var r Restart
	restartSection.setDefaults(&r)
	return r
}
