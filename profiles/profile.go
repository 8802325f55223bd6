package profiles

import (
	"time"
)

// Profile is a loaded, defaulted and statically validated profile file
// (design/profile.md). Paths in it are already absolute where the file gave
// relative ones (decisions.md §6). Load builds it; the planner turns it into a
// Plan.
type Profile struct {
	Path string // the file path as given (used in error messages)
	Abs  string // absolute path of the file
	Dir  string // absolute directory of the file; relative paths resolve here

	Name            string
	Model           string
	Tokenizer       string
	ServedModelName string
	Engine          Engine
	Gateway         Gateway
	Roles           []Role
	Restart         Restart
	RunDir          string
	LogDir          string

	// pos maps key paths ("roles[1].gpus") to where they are written, so
	// planner errors can name the line of the key that causes them.
	pos map[string]Pos
}

// Engine holds settings every role inherits.
type Engine struct {
	Command         []string
	TransferBackend string
	IBDevice        string
	Args            []string
	Env             map[string]string
}

// Gateway is the embedded gateway's configuration.
type Gateway struct {
	Host            string
	Port            int
	Mode            string // auto | pd | epd
	Policy          PolicyPlan
	APIKeyEnv       string
	BootstrapServer string // engine | tsd
	// ImageURLs lets chat image parts name http(s) URLs the gateway
	// fetches; off, only data: URLs are taken (no outbound fetches).
	ImageURLs bool
	// ImageURLAllow lists hosts and CIDR prefixes image URLs may reach
	// although they are loopback, private, link-local or metadata
	// addresses (refused by default).
	ImageURLAllow []string
	// MetricsPublic serves /metrics without the API key.
	MetricsPublic bool
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
}

// Local reports whether tsd spawns this role itself.
func (r *Role) Local() bool { return r.Host == "" || r.Host == HostLocal }

// Restart is a resolved restart policy.
type Restart struct {
	Policy       string
	Backoff      time.Duration
	MaxBackoff   time.Duration
	ResetAfter   time.Duration
	BudgetCount  int
	BudgetWindow time.Duration
	StopGrace    time.Duration
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
	}
}

// Defaults and fixed names of the profile format.
const (
	HostLocal              = "local"
	DefaultGatewayHost     = "127.0.0.1"
	DefaultGatewayPort     = 8000
	DefaultTransferBackend = "mooncake"
	DefaultRunDir          = ".tsd/run"
	DefaultLogDir          = ".tsd/logs"
	ModeAuto               = "auto"
	BootstrapEngine        = "engine"
	BootstrapTSD           = "tsd"
	RestartNo              = "no"
	RestartOnFailure       = "on-failure"
	RestartAlways          = "always"
	// GatewayLogName is the gateway's log file name inside log_dir, which is
	// why no role may be called "gateway".
	GatewayLogName = "gateway"
)

// DefaultCommand is the engine command when the profile names none.
func DefaultCommand() []string { return []string{"ts", "serve"} }

// DefaultRestart is the restart policy when the profile sets none.
func DefaultRestart() Restart {
	return Restart{
		Policy:       RestartOnFailure,
		Backoff:      2 * time.Second,
		MaxBackoff:   2 * time.Minute,
		ResetAfter:   10 * time.Minute,
		BudgetCount:  5,
		BudgetWindow: 10 * time.Minute,
		StopGrace:    30 * time.Second,
	}
}

// DefaultPolicy is the worker-selection policy per kind.
func DefaultPolicy() PolicyPlan {
	return PolicyPlan{Prefill: "round_robin", Decode: "round_robin", Encode: "consistent_hashing"}
}

// Policies lists the policy names the profile accepts per role kind (SMG's
// names, gateway-flow.md §3). The gateway may implement a subset and must
// refuse the others at start with a clear message.
var Policies = map[string][]string{
	KindPrefill: {"round_robin", "random", "cache_aware", "power_of_two", "least_load", "consistent_hashing", "prefix_hash", "manual", "bucket"},
	KindDecode:  {"round_robin", "random", "cache_aware", "power_of_two", "least_load", "consistent_hashing", "prefix_hash", "manual"},
	KindEncode:  {"consistent_hashing", "round_robin", "random"},
}
