package snapshot

// Snapshot is the one immutable picture of a running deployment. The
// dashboard renders it, `tsd status --json` prints it, /metrics reads it.
// Producers build a fresh value each time; consumers never mutate it.

import "time"

// Role states (docs/architecture.md §4).
const (
	StatePlanned     = "planned"
	StateStarting    = "starting"
	StateHandshaking = "handshaking"
	StateReady       = "ready"
	StateDraining    = "draining"
	StateStopping    = "stopping"
	StateStopped     = "stopped"
	StateCrashed     = "crashed"
	StateBackoff     = "backoff"
	StateFailed      = "failed"
	StateStalled     = "stalled" // connected but not working: process stopped, or no output with requests in flight
	StateRemote      = "remote"  // not spawned by tsd; waits for its ranks to dial in
)

// Rank handshake states (docs/protocol.md §3.9, gateway side).
const (
	RankWaiting      = "waiting"
	RankHello        = "hello"
	RankInitSent     = "init_sent"
	RankReady        = "ready"
	RankRegistered   = "registered"
	RankDisconnected = "disconnected"
	RankStalled      = "stalled" // registered, but no output for the stall timeout with requests in flight
)

// Snapshot is the whole deployment at one instant.
type Snapshot struct {
	Seq     uint64         `json:"seq"`
	Time    time.Time      `json:"time"`
	Name    string         `json:"name"`
	Profile string         `json:"profile"`
	Gateway GatewayStatus  `json:"gateway"`
	Roles   []RoleStatus   `json:"roles"`
	GPUs    []GPUStatus    `json:"gpus"`
	GPUInfo GPUPanelStatus `json:"gpu_info"`
	Events  []Event        `json:"events,omitempty"` // most recent state changes, newest last
	// ProfileRevision names the profile the deployment runs, as tsd up or
	// the last complete tsd apply or tsd scale gave it (twelve hex digits;
	// "" for a deployment started from a plan file).
	ProfileRevision string `json:"profile_revision,omitempty"`
	// Apply is the last tsd apply or tsd scale, while it runs and after.
	Apply *ApplyStatus `json:"apply,omitempty"`
	// Stopping is the whole deployment's stop (tsd stop, a signal to the
	// daemon) once it has begun: the gateway's drain, then the engines.
	Stopping *StopStatus `json:"stopping,omitempty"`
	// Planner is the SLO planner (profile key slo:); nil without one.
	Planner *PlannerStatus `json:"planner,omitempty"`
	// History is the daemon's trend rings, only in the first Snapshot of
	// a watch that asked for them (docs/protocol.md, the control socket).
	History *History `json:"history,omitempty"`
}

// ApplyStatus is the last change made to a running deployment (tsd apply,
// tsd scale): what it applies, where it is, and how it ended.
type ApplyStatus struct {
	Revision string    `json:"revision"`        // the profile revision it applies
	State    string    `json:"state"`           // running | done | failed
	Step     string    `json:"step,omitempty"`  // the step running now, or the one it stopped at
	Steps    int       `json:"steps"`           // how many steps it has
	Done     int       `json:"done"`            // how many are done
	Error    string    `json:"error,omitempty"` // why it stopped (failed)
	Started  time.Time `json:"started"`
}

// StopStatus is a whole deployment's stop: the gateway stops taking
// requests and lets those in flight finish until Deadline
// (restart.drain_timeout, or tsd stop --timeout), then cuts the rest
// (an error event and finish reason "abort" on a stream, the access
// line's reason=shutdown); then every engine stops.
type StopStatus struct {
	Phase    string      `json:"phase"`             // draining | stopping (the engines)
	Started  time.Time   `json:"started"`           // when the stop began
	Deadline time.Time   `json:"deadline,omitzero"` // when the drain cuts what is left
	InFlight int         `json:"in_flight"`         // requests still in flight (draining)
	Drain    DrainResult `json:"drain"`             // the drain's count so far (final once stopping)
}

// DrainResult is what a gateway's drain did with the requests in flight
// when it began: how many finished and how many it cut at its deadline.
type DrainResult struct {
	InFlight int `json:"in_flight"` // in flight when the drain began
	Finished int `json:"finished"`  // ended before the deadline (answered, or their client left)
	Cut      int `json:"cut"`       // still running at the deadline: ended with a shutdown error
}

// Stop phases.
const (
	StopDraining = "draining"
	StopStopping = "stopping"
)

// Apply states.
const (
	ApplyRunning = "running"
	ApplyDone    = "done"
	ApplyFailed  = "failed"
)

// GatewayStatus is the embedded gateway's headline numbers.
type GatewayStatus struct {
	URL       string  `json:"url"`
	Mode      string  `json:"mode"`
	Ready     bool    `json:"ready"`
	ReqPerSec float64 `json:"req_per_sec"`
	TokPerSec float64 `json:"tok_per_sec"`
	Requests  uint64  `json:"requests"`
	Errors    uint64  `json:"errors"` // the deployment's: a 5xx, or a stream that broke after its 200
	// ClientErrors are requests refused for what they asked (a 4xx other
	// than 499): the client's mistakes, not the deployment's errors.
	ClientErrors uint64 `json:"client_errors"`
	InFlight     int    `json:"in_flight"`
	Note         string `json:"note,omitempty"`   // e.g. "encode: 1/1 worker(s) ready, consistent_hashing"
	Queued       int    `json:"queued,omitempty"` // requests waiting for a routable worker
	Panics       uint64 `json:"panics,omitempty"` // panics recovered since start (each failed one request)
	// Problem is something the operator must fix, shown in red: e.g. the
	// OpenAI API is off because the tokenizer did not load.
	Problem string `json:"problem,omitempty"`
	// Roles is the gateway's own per-role accounting (the numbers
	// /metrics reports), one entry per role instance it routes to.
	Roles []RoleTraffic `json:"roles,omitempty"`
	// TTFT and ITL percentiles over every request of the last minute
	// (gateway/traffic), whatever role served it. In JSON they are float
	// milliseconds under keys that say so (ttft_p50_ms, json.go).
	TTFTp50 time.Duration `json:"-"`
	TTFTp99 time.Duration `json:"-"`
	ITLp50  time.Duration `json:"-"`
	ITLp99  time.Duration `json:"-"`
	// Breakers is each routed worker's circuit breaker (prefill and
	// decode role instances), empty when gateway.circuit_breaker is off.
	Breakers []BreakerStatus `json:"breakers,omitempty"`
	// Policy is the routing policy per role kind the gateway routes by
	// now (tsd apply changes it live); nil without a gateway.
	Policy *PolicyStatus `json:"policy,omitempty"`
	// TokenizerCache is the prompt tokenizer cache's account; nil when
	// there is none (no tokenizer, or gateway.tokenizer_cache_mb: 0).
	TokenizerCache *TokenizerCacheStatus `json:"tokenizer_cache,omitempty"`
	// Admission is the queue in front of the engines
	// (gateway.admission, gateway.api_keys); nil while it bounds nothing.
	Admission *AdmissionStatus `json:"admission,omitempty"`
	// Layouts is how requests split between prefill → decode and
	// aggregated engines; nil when every request goes prefill → decode
	// and there is no aggregated engine.
	Layouts *LayoutStatus `json:"layouts,omitempty"`
}

// LayoutStatus is the gateway's split of requests between the layouts
// (gateway.disaggregation, docs/profiles.md "Layouts"): the setting it
// routes by now and the attempts routed each way since start.
type LayoutStatus struct {
	Disaggregation string `json:"disaggregation"` // always | never | conditional
	PD             uint64 `json:"pd"`
	Aggregated     uint64 `json:"aggregated"`
}

// AdmissionStatus is the gateway's admission queue now and since start
// (docs/protocol.md §11.13).
type AdmissionStatus struct {
	Queued       int               `json:"queued"`             // requests waiting, every kind
	QueuedTokens int               `json:"queued_tokens"`      // their prompt tokens
	ByClass      map[string]int    `json:"by_class,omitempty"` // waiting requests by priority class (system, interactive, default, bulk, or the number)
	InFlight     int               `json:"in_flight"`          // admitted and not yet ended
	Shed         map[string]uint64 `json:"shed,omitempty"`     // requests shed since start, by reason
	Admitted     uint64            `json:"admitted"`
}

// TokenizerCacheStatus is the gateway's prompt tokenizer cache since
// start (gateway/tokenizer/cache.go): prompts found whole (L0), found in
// part (L1: pieces cut after the chat template's special tokens), or not
// at all.
type TokenizerCacheStatus struct {
	HitRate   float64 `json:"hit_rate"` // (l0_hits + l1_hits) / prompts, 0..1
	L0Hits    uint64  `json:"l0_hits"`
	L1Hits    uint64  `json:"l1_hits"`
	Misses    uint64  `json:"misses"`
	UsedBytes int64   `json:"used_bytes"`
	MaxBytes  int64   `json:"max_bytes"`
	// L1Off says why only whole prompts are cached for this tokenizer.
	L1Off string `json:"l1_off,omitempty"`
}

// PolicyStatus is the gateway's live routing policy per role kind.
type PolicyStatus struct {
	Prefill    string `json:"prefill"`
	Decode     string `json:"decode"`
	Encode     string `json:"encode,omitempty"`
	Aggregated string `json:"aggregated,omitempty"` // only with aggregated engines
}

// Circuit-breaker states, SMG's names (docs/protocol.md §11.9).
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half_open"
)

// BreakerStatus is one worker's circuit breaker as the gateway holds it.
type BreakerStatus struct {
	Role  string `json:"role"`
	State string `json:"state"` // BreakerClosed, BreakerOpen or BreakerHalfOpen
	// Failures is the current run of consecutive failures; Successes the
	// run of successes while half-open.
	Failures  int       `json:"failures"`
	Successes int       `json:"successes,omitempty"`
	Since     time.Time `json:"since"`            // when State was entered
	Until     time.Time `json:"until,omitzero"`   // open: when it goes half-open
	Reason    string    `json:"reason,omitempty"` // why it is in State
	Opened    int       `json:"times_opened"`     // since this run of the engine registered
}

// RoleTraffic is one role's share of the gateway's traffic. Its
// latencies are float milliseconds in JSON (ttft_p50_ms, json.go).
type RoleTraffic struct {
	Role     string  `json:"role"`
	ReqPerS  float64 `json:"req_per_sec"`
	TokPerS  float64 `json:"tok_per_sec"`
	InFlight int     `json:"in_flight"`
	Errors   uint64  `json:"errors"` // the deployment's (as GatewayStatus.Errors)
	// ClientErrors are its requests refused with a 4xx (not 499).
	ClientErrors uint64        `json:"client_errors,omitempty"`
	TTFTp50      time.Duration `json:"-"`
	TTFTp99      time.Duration `json:"-"`
	ITLp50       time.Duration `json:"-"`
	ITLp99       time.Duration `json:"-"`

	// The prefix cache (prefill roles): CachedShare is the share of the
	// prompt tokens it prefilled over the traffic window that its engine
	// found cached (the prefill output's cached_tokens / prompt tokens);
	// PromptTokS is those prompt tokens per second (0: no prefill in the
	// window, so no share to show). Cache has one entry per DP rank, with
	// the blocks the gateway's KV event index holds for it.
	CachedShare float64     `json:"cached_share,omitempty"`
	PromptTokS  float64     `json:"prompt_tok_per_sec,omitempty"`
	Cache       []RankCache `json:"cache,omitempty"`
	// KVEvents says how the gateway follows the engine's KV events:
	// "" it publishes none and none is needed, "live", or "absent" with
	// KVNote saying why (then kv_aware routes it by cache_aware).
	KVEvents string `json:"kv_events,omitempty"`
	KVNote   string `json:"kv_note,omitempty"`
}

// RankCache is one attention-DP rank's prefix cache as the gateway sees
// it: the traffic account's cached-token share, and the blocks its KV
// events say it holds.
type RankCache struct {
	DPRank       int     `json:"dp_rank"`
	CachedShare  float64 `json:"cached_share"`
	PromptTokS   float64 `json:"prompt_tok_per_sec"`
	CachedBlocks int     `json:"cached_blocks"`
	BlockSize    int     `json:"block_size,omitempty"`
	KVLive       bool    `json:"kv_live,omitempty"`
}

// KV event states of RoleTraffic.KVEvents.
const (
	KVEventsLive   = "live"
	KVEventsAbsent = "absent"
)

// RoleStatus is one role instance.
type RoleStatus struct {
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	Group     string    `json:"group,omitempty"` // the profile's role entry; its replicas share it
	GPUs      []string  `json:"gpus"`
	GPUUUIDs  []string  `json:"gpu_uuids,omitempty"` // resolved from CUDA_VISIBLE_DEVICES
	State     string    `json:"state"`
	Phase     string    `json:"phase,omitempty"`  // startup milestone from the log
	Reason    string    `json:"reason,omitempty"` // why the state is what it is
	PID       int       `json:"pid,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	ExitCode  *int      `json:"exit_code,omitempty"`
	Restarts  int       `json:"restarts"`
	Worker    string    `json:"worker"`
	LogFile   string    `json:"log_file"`
	Remote    bool      `json:"remote,omitempty"`

	// Exits counts how the role's processes ended, by reason
	// (supervisor.ExitReasons: requested, crashed with an error, killed by
	// a signal, ...), since tsd started it; nil before the first end.
	// Never changed once published: a new count is a new map.
	Exits map[string]int `json:"exits,omitempty"`

	// LogError is set while the role's log file cannot be written (disk
	// full, read-only): the engine keeps running and its output is kept
	// in memory only. Show it in red.
	LogError string `json:"log_error,omitempty"`

	RanksExpected   int          `json:"ranks_expected"`
	RanksRegistered int          `json:"ranks_registered"`
	Ranks           []RankStatus `json:"ranks"`
	InFlight        int          `json:"in_flight"`
	Routed          bool         `json:"routed"` // the gateway sends it requests
	// While State is draining: requests that still need the role, and
	// when the drain gives up and stops it anyway.
	DrainInFlight int       `json:"drain_in_flight,omitempty"`
	DrainDeadline time.Time `json:"drain_deadline,omitzero"`

	Proc    *ProcStatus `json:"proc,omitempty"`
	GPUMemB uint64      `json:"gpu_mem_bytes"`

	// Progress is the engine's own progress through its current startup
	// step (weight shards, CUDA graph batches) as its log reports it; nil
	// when the last step printed none, and once the role is ready.
	Progress *Progress `json:"progress,omitempty"`
	// NextTryAt is when a role in backoff starts again: views count down
	// to it (the Reason's "next try in 8s" is the delay when it was set).
	NextTryAt time.Time `json:"next_try_at,omitzero"`

	// A Slurm role (tsd up --launcher slurm): its current job step, the
	// node(s) it runs on and the GPUs Slurm gave it there, as NODE:INDEX
	// (physical indices on that node, from the step itself). NoTelemetry
	// says why the GPU and process columns have no numbers ("remote, no
	// telemetry": the step runs on another node than tsd), so they are
	// never filled with this node's readings.
	SlurmStep   string   `json:"slurm_step,omitempty"`
	Nodes       []string `json:"nodes,omitempty"`
	SlurmGPUs   []string `json:"slurm_gpus,omitempty"`
	NoTelemetry string   `json:"no_telemetry,omitempty"`
}

// Progress is how far an engine is through one startup step.
type Progress struct {
	Phase string  `json:"phase"`          // e.g. "loading weights", "graph capture"
	Frac  float64 `json:"frac"`           // 0..1
	Text  string  `json:"text,omitempty"` // the engine's own count, e.g. "5/11"
}

// ProcStatus is the role's process tree as last polled.
type ProcStatus struct {
	CPUPercent float64 `json:"cpu_percent"`
	RSSBytes   uint64  `json:"rss_bytes"`
	Threads    int     `json:"threads"`
	PIDs       []int   `json:"pids"` // the whole tree, root first
}

// RankStatus is one engine rank as the gateway sees it.
type RankStatus struct {
	Identity     int           `json:"identity"` // engine index (uint16 LE routing id)
	DPRank       int           `json:"dp_rank"`
	State        string        `json:"state"`
	Since        time.Time     `json:"since"` // when State was entered
	HelloAt      time.Time     `json:"hello_at,omitzero"`
	InitAt       time.Time     `json:"init_at,omitzero"`
	ReadyAt      time.Time     `json:"ready_at,omitzero"`
	RegisteredAt time.Time     `json:"registered_at,omitzero"`
	Registration *Registration `json:"registration,omitempty"`
	InFlight     int           `json:"in_flight"`
}

// Registration holds the fields of an engine's registration map worth showing.
type Registration struct {
	MaxModelLen       int64  `json:"max_model_len"`
	NumGPUBlocks      int64  `json:"num_gpu_blocks"`
	PrefixGranularity int64  `json:"prefix_granularity,omitempty"`
	KVCacheTokens     int64  `json:"kv_cache_size_tokens,omitempty"`
	Dtype             string `json:"dtype"`
	Version           string `json:"version,omitempty"`
	WorldSize         int64  `json:"world_size"`
	DPSize            int64  `json:"data_parallel_size"`
	DPRank            int64  `json:"data_parallel_rank"`
	TPSize            int64  `json:"tensor_parallel_size"`
	MaxNumSeqs        int64  `json:"max_num_seqs,omitempty"`
	InstanceID        string `json:"instance_id,omitempty"`
	DisaggMode        string `json:"disaggregation_mode,omitempty"`
	Bootstrap         string `json:"bootstrap,omitempty"` // host:port as used by the gateway
}

// GPUPanelStatus says where GPU readings come from, or why there are none.
type GPUPanelStatus struct {
	Provider  string `json:"provider"`  // nvml | nvidia-smi | fake | none
	Simulated bool   `json:"simulated"` // fake readings: always say so on screen
	Note      string `json:"note,omitempty"`
}

// GPUStatus is one physical GPU.
type GPUStatus struct {
	Index      int          `json:"index"`
	UUID       string       `json:"uuid"`
	Name       string       `json:"name"`
	UtilPct    int          `json:"util_pct"`
	MemUsedB   uint64       `json:"mem_used_bytes"`
	MemTotalB  uint64       `json:"mem_total_bytes"`
	PowerW     float64      `json:"power_w"`
	TempC      int          `json:"temp_c"`
	SMClockMHz int          `json:"sm_clock_mhz"`
	Roles      []string     `json:"roles"` // roles whose CUDA_VISIBLE_DEVICES include it
	Processes  []GPUProcess `json:"processes"`
}

// GPUProcess is one compute process on a GPU.
type GPUProcess struct {
	PID   int    `json:"pid"`
	UsedB uint64 `json:"used_bytes"`
	Role  string `json:"role,omitempty"` // role whose process tree holds PID
}

// Event is one state change worth a line in the event log.
type Event struct {
	Time    time.Time `json:"time"`
	Role    string    `json:"role,omitempty"`
	Message string    `json:"message"`
}

// RoleView is everything the gateway needs to know of a role from the
// supervisor, sent whole on every change (docs/architecture.md, the
// per-role view).
type RoleView struct {
	Alive   bool   // the role's processes run (a rendezvous the gateway hosts answers /health only then)
	Routed  bool   // new requests may go to it (false while draining, stopped, restarting)
	Stalled bool   // the supervisor judged it stalled: its requests end with Reason, its ranks show stalled
	Reason  string // why it is not routed or stalled, for errors and the screen
}

// Routable says whether new requests may go to the role: routed and not
// judged stalled, whatever Routed says (a stalled role leaves routing).
// The gateway's lane and dispatch ask this, never the fields one by one.
func (v RoleView) Routable() bool { return v.Routed && !v.Stalled }

// RankEvent is one change of one rank's handshake state, published by the
// gateway's lane and folded into RoleStatus.Ranks by the supervisor.
type RankEvent struct {
	Role string     `json:"role"` // role instance name (= worker)
	Rank RankStatus `json:"rank"` // the rank's whole state after the change
	Err  string     `json:"err,omitempty"`
}

// LogLine is one line of a role's output as captured by the supervisor and
// shown by the dashboard's log page. Lines travel in batches ([]LogLine),
// never one message per line.
type LogLine struct {
	Seq    uint64    `json:"seq,omitempty"` // per role, increasing across restarts
	Time   time.Time `json:"time"`
	Role   string    `json:"role"`
	Stream string    `json:"stream,omitempty"` // stdout | stderr, when known
	Text   string    `json:"text"`             // as written (may hold ANSI), no newline
	Note   bool      `json:"note,omitempty"`   // written by tsd, not by the engine
}

// History is the recent past the daemon keeps (snapshot/trend): samples
// of the gateway's rates, load and latencies and of every GPU, one per
// period. The control socket sends it in the first Snapshot of a watch
// that asks for it, so a dashboard that attaches shows the past at once;
// every other Snapshot leaves it nil.
type History struct {
	PeriodMS int64 `json:"period_ms"` // the sample period
	// TimesMS are the samples' times (Unix milliseconds), oldest first.
	TimesMS []int64       `json:"times_ms"`
	Series  []TrendSeries `json:"series"`
	// Rates is the rates' smoothing as of the newest snapshot folded, so
	// the dashboard goes on exactly where the daemon is.
	Rates *TrendRates `json:"rates,omitempty"`
}

// TrendRates is the gateway's smoothed rates and when they were last
// updated.
type TrendRates struct {
	ReqPerSec float64   `json:"req_per_sec"`
	TokPerSec float64   `json:"tok_per_sec"`
	At        time.Time `json:"at"`
}

// TrendSeries is one trend's samples, aligned with the newest of
// History.TimesMS (a GPU seen later has fewer).
type TrendSeries struct {
	Name   string    `json:"name"` // e.g. "req/s", "gpu0 util"
	Values []float64 `json:"values"`
}
