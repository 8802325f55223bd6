package profiles

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/tsd-project/tsd/profiles/parsernames"
	"github.com/tsd-project/tsd/slurm"
)

// GPU is one device of the host, as telemetry reports it.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Name  string `json:"name,omitempty"`
}

// HostFacts is everything the planner needs to know about the machine,
// injected so the planner stays a pure function.
type HostFacts struct {
	// PortFree says whether a local port can be bound now; nil treats every
	// port as free (tests, `tsd validate`). Only ports on this host are
	// asked about, and only for ports the planner chooses.
	PortFree func(port int) bool
	// GPUs is the host's GPU list; nil means unknown (no check).
	GPUs []GPU
	// RunDir and LogDir override the profile's run_dir/log_dir when set
	// (absolute paths).
	RunDir string
	LogDir string
	// Name is the deployment's name when it is not the profile's (tsd up
	// --name): its state folder's (StateDir). The plan keeps the
	// profile's name, which names its Slurm steps; tsd up sets the
	// deployment's on the plan it runs.
	Name string
	// GatewayPort, when set, is the gateway's port instead of
	// gateway.port (tsd up --port).
	GatewayPort int
	// StateDir, when set, is the folder whose run/ and logs/ hold the
	// deployment's state where the profile sets no run_dir or log_dir,
	// instead of StateDir(profile folder, name): the shared .tsd of an
	// earlier tsd whose daemon still runs there (LegacyState).
	StateDir string
	// UID and XDGRuntimeDir pick the short socket directory used when ipc
	// paths under run_dir would exceed the Unix socket path limit.
	UID           int
	XDGRuntimeDir string
	// Accelerator is the only kind of accelerator this host has (nvidia or
	// ascend), "" when it has none, both, or is unknown; a profile without
	// accelerator: takes it.
	Accelerator string
	// Slurm is the allocation tsd runs in with --launcher slurm; nil plans
	// for this host alone.
	Slurm *slurm.Job
	// Running is the plan the deployment runs now (tsd apply, tsd scale);
	// nil plans afresh. Every instance of the profile that continues a
	// running one (same profile entry, same replica index, same host)
	// keeps that instance's socket path, handshake, dist-init and
	// bootstrap ports and log file wherever the profile leaves them to
	// the planner, so an apply never moves what it does not change
	// (docs/architecture.md §4.3). PortFree should then count the running
	// plan's own ports as free: the kept ones are reserved here, and the
	// ones of instances that go are released before any new one starts.
	Running *Plan
}

// LocalHostFacts are the facts of this machine for planning: a real port
// checker, the caller's uid and XDG_RUNTIME_DIR, and an unknown GPU list.
func LocalHostFacts() HostFacts {
	return HostFacts{PortFree: PortFree, UID: os.Getuid(), XDGRuntimeDir: os.Getenv("XDG_RUNTIME_DIR"), Accelerator: DetectAccelerator("/dev")}
}

// DetectAccelerator names the only accelerator kind whose device nodes
// are under dev (/dev/nvidia0… for NVIDIA, /dev/davinci0… for Ascend), or
// "" when there are none or both.
func DetectAccelerator(dev string) string {
	has := func(pattern string) bool {
		m, _ := filepath.Glob(filepath.Join(dev, pattern))
		return len(m) > 0
	}
	nv, asc := has("nvidia[0-9]*"), has("davinci[0-9]*")
	switch {
	case nv && !asc:
		return AcceleratorNVIDIA
	case asc && !nv:
		return AcceleratorAscend
	}
	return ""
}

// StaticHostFacts are LocalHostFacts without the port checker: the plan
// then depends on the profile alone, so a second process (`tsd gateway`
// for engines started by hand from `tsd plan`, or ctl verbs) re-plans the
// same ports even while the engines hold them.
func StaticHostFacts() HostFacts {
	f := LocalHostFacts()
	f.PortFree = nil
	return f
}

// Default environment every role gets unless the profile sets the variable
// (docs/architecture.md).
var defaultEnv = [][2]string{
	{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
	{"NO_PROXY", "*"},
	{"no_proxy", "*"},
	{"PYTHONUNBUFFERED", "1"},
}

// Where planned ports come from. Dist-init bases are spaced by distInitStep
// so the engine's silent +10 shifts (docs/profiles.md) stay inside a zone.
const (
	distInitStep          = 100
	firstPrefillBootstrap = 8998
	firstEncodeBootstrap  = 18995
	// firstKVEvents is where planned KV event ports start: clear of the
	// bootstrap ports below, the dist-init zones above and the test port
	// band 4100-8899, and never TokenSpeed's shared default 5557.
	firstKVEvents = 9100
	localNS       = "\x00local"
)

// distInitCandidates lists planned dist-init bases in preference order,
// all clear of the handshake band and the ephemeral range.
func distInitCandidates() []int {
	var out []int
	for b := 12000; b+distInitStep <= HandshakeBandLo; b += distInitStep {
		out = append(out, b)
	}
	for b := 10000; b < 12000; b += distInitStep {
		out = append(out, b)
	}
	for b := 30000; b+distInitStep <= EphemeralLo; b += distInitStep {
		out = append(out, b)
	}
	return out
}

// ClusterSpan is the highest offset of the dist-init port cluster:
// D..D+max(6, 5+dp) (docs/profiles.md).
func ClusterSpan(dp int) int { return max(6, 5+dp) }

// ClusterPorts lists every port an engine binds or checks for dist-init
// base d: D, D+1, D+3..D+max(6, 5+dp) (D+2 is unused).
func ClusterPorts(d, dp int) []int {
	out := []int{d, d + 1}
	for p := d + 3; p <= d+ClusterSpan(dp); p++ {
		out = append(out, p)
	}
	return out
}

// inst is one role instance while planning.
type inst struct {
	role      *Role
	ri, k     int    // role index and replica index
	key       string // roles[i]
	name      string
	ns        string // port namespace: the host the engine runs on
	worker    Worker
	workerKey string // key path that set the worker (or the name, for defaults)
	dist      int
	distKey   string
	distSet   bool
	boot      int
	bootKey   string
	bootSet   bool
	bootNS    string
	// keep is the running instance this one continues (HostFacts.Running),
	// nil for a new one; keptWorker: its worker came from keep.
	keep       *RolePlan
	keptWorker bool
	kvOn       bool // the engine publishes KV events
	kv         int  // their first port
	kvKey      string
	kvSet      bool
}

type reservation struct {
	ns     string
	lo, hi int
	what   string // "gateway port", "dist-init cluster of prefill", ...
	key    string
}

type planner struct {
	p     *Profile
	facts HostFacts
	errs  Errors
	warns []string
	res   []reservation
}

func (pl *planner) err(key, format string, args ...any) {
	pl.errs = append(pl.errs, pl.p.errAt(key, format, args...))
}

func (pl *planner) warn(key, format string, args ...any) {
	pl.warns = append(pl.warns, pl.p.errAt(key, format, args...).Error())
}

// conflict returns the first reservation overlapping [lo, hi] in ns.
func (pl *planner) conflict(ns string, lo, hi int) *reservation {
	for i := range pl.res {
		r := &pl.res[i]
		if r.ns == ns && lo <= r.hi && r.lo <= hi {
			return r
		}
	}
	return nil
}

// reserve records a fixed port range, reporting a collision as an error on
// key.
func (pl *planner) reserve(r reservation) {
	if c := pl.conflict(r.ns, r.lo, r.hi); c != nil {
		span := strconv.Itoa(r.lo)
		if r.hi != r.lo {
			span = fmt.Sprintf("%d-%d", r.lo, r.hi)
		}
		pl.err(r.key, "%s (%s) collides with %s (%s, %s)", r.what, span, c.what, rangeText(c.lo, c.hi), pl.p.Where(c.key))
		return
	}
	pl.res = append(pl.res, r)
}

func rangeText(lo, hi int) string {
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

func inBand(lo, hi int) bool {
	return lo <= HandshakeBandHi && HandshakeBandLo <= hi
}

func inEphemeral(lo, hi int) bool {
	return lo <= EphemeralHi && EphemeralLo <= hi
}

// warnRange warns about an explicit port range the planner would not have
// chosen; it is honoured anyway (the seed's encode uses 25000).
func (pl *planner) warnRange(key, what string, lo, hi int) {
	if inBand(lo, hi) {
		pl.warn(key, "%s %s is inside the ipc handshake band %d-%d; honoured, but a derived handshake port may land on it", what, rangeText(lo, hi), HandshakeBandLo, HandshakeBandHi)
	}
	if inEphemeral(lo, hi) {
		pl.warn(key, "%s %s is inside the ephemeral range %d-%d; honoured, but outgoing connections may take it first", what, rangeText(lo, hi), EphemeralLo, EphemeralHi)
	}
}

func (pl *planner) free(ns string, ports ...int) bool {
	if ns != localNS || pl.facts.PortFree == nil {
		return true
	}
	for _, p := range ports {
		if !pl.facts.PortFree(p) {
			return false
		}
	}
	return true
}

// MakePlan turns a loaded profile into the Plan: every argv, env, port,
// socket and log path, computed without side effects (facts carries the
// host state). It returns the plan even when there are errors, so callers
// can show what was planned; check the Errors first.
func MakePlan(p *Profile, facts HostFacts) (*Plan, Errors) {
	pl := &planner{p: p, facts: facts}
	for _, w := range p.warnings {
		pl.warns = append(pl.warns, w.Error())
	}
	plan := pl.plan()
	sort.Strings(pl.warns)
	plan.Warnings = pl.warns
	return plan, pl.errs.sorted()
}

// Plan is MakePlan as a method.
func (p *Profile) Plan(facts HostFacts) (*Plan, Errors) { return MakePlan(p, facts) }

// LoadPlan loads a profile and plans it; errors of both steps come back
// together.
func LoadPlan(path string, facts HostFacts) (*Profile, *Plan, Errors) {
	p, errs := Load(path)
	if p == nil || len(errs) > 0 {
		return p, nil, errs
	}
	plan, errs := MakePlan(p, facts)
	return p, plan, errs
}

// SocketDir is the short directory ipc sockets fall back to when run_dir
// makes socket paths too long: $XDG_RUNTIME_DIR/tsd-<hash> or
// /tmp/tsd-<uid>/<hash>, the hash naming the profile.
func SocketDir(profileAbs string, facts HostFacts) string {
	key := profileAbs
	if facts.Name != "" {
		key += "\x00" + facts.Name // tsd up --name: a deployment of its own
	}
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:])[:12]
	if facts.XDGRuntimeDir != "" {
		return filepath.Join(facts.XDGRuntimeDir, "tsd-"+h)
	}
	return filepath.Join("/tmp", fmt.Sprintf("tsd-%d", facts.UID), h)
}

// plan runs the planner's sections in order: each reads what the ones
// before it settled (fixed ports are reserved before any port is chosen).
func (pl *planner) plan() *Plan {
	p := pl.p
	runDir, logDir := pl.dirs()
	plan := &Plan{
		Name: p.Name, ProfilePath: p.Abs, Model: p.Model, Tokenizer: p.Tokenizer,
		ServedModelName: p.ServedModelName, RunDir: runDir, LogDir: logDir, LogMaxMB: p.LogMaxMB, LogKeep: p.LogKeep,
		Accelerator:     pl.accelerator(),
		IntranodeNVLink: p.Engine.Mooncake.IntranodeNVLink,
		TransferBackend: p.Engine.TransferBackend,
		Roles:           []RolePlan{},
	}
	sf := pl.facts
	if sf.Name == p.Name {
		sf.Name = "" // the profile's own name: the profile's own folder
	}
	shortDir := SocketDir(p.Abs, sf)
	plan.ControlSocket = filepath.Join(runDir, "tsd.sock")
	if len(plan.ControlSocket) > MaxSocketPath {
		plan.ControlSocket = filepath.Join(shortDir, "tsd.sock")
	}
	if r := pl.facts.Running; r != nil && r.RunDir == runDir && r.ControlSocket != "" {
		plan.ControlSocket = r.ControlSocket // the daemon listens there
	}
	insts := expandInstances(p)
	pl.matchRunning(insts)
	pl.planWorkers(insts, runDir, shortDir)
	pl.reserveFixedPorts(insts)
	pl.planBootstrapPorts(insts)
	pl.planDistInit(insts)
	pl.planKVEvents(insts)
	pl.transferWarnings(insts)
	pl.deviceRules(plan.Accelerator, insts)
	plan.Gateway = pl.gatewayPlan(pl.gatewayMode(insts), logDir)
	plan.SLO = sloPlan(p)
	for _, in := range insts {
		rp := pl.rolePlan(in, logDir, plan.Accelerator)
		plan.Roles = append(plan.Roles, rp)
		plan.Gateway.Workers = append(plan.Gateway.Workers, WorkerPlan{
			Role: rp.Name, Kind: rp.Kind, URL: rp.Worker, Handshake: rp.Handshake,
			Input: in.worker.Input(), Output: in.worker.Output(), Bootstrap: rp.Bootstrap,
			DP: rp.DP, EngineIndex: rp.EngineIndex, Remote: !rp.Local, KVEvents: rp.KVEvents,
		})
	}
	if pl.facts.Slurm != nil {
		pl.slurm(plan, insts)
	} else if pl.facts.GPUs != nil {
		pl.checkGPUs(insts)
	}
	return plan
}

// dirs are run_dir and log_dir: the profile's, else (a profile that
// sets neither) the running deployment's (an apply never moves them),
// else the deployment's own state folder by name; host facts win over
// all of them.
func (pl *planner) dirs() (runDir, logDir string) {
	runDir, logDir = pl.p.RunDir, pl.p.LogDir
	state := pl.facts.StateDir
	if state == "" {
		state = StateDir(pl.p.Dir, pl.name())
	}
	if runDir == "" {
		runDir = filepath.Join(state, "run")
		if r := pl.facts.Running; r != nil && r.RunDir != "" {
			runDir = r.RunDir
		}
	}
	if logDir == "" {
		logDir = filepath.Join(state, "logs")
		if r := pl.facts.Running; r != nil && r.LogDir != "" {
			logDir = r.LogDir
		}
	}
	if pl.facts.RunDir != "" {
		runDir = filepath.Clean(pl.facts.RunDir)
	}
	if pl.facts.LogDir != "" {
		logDir = filepath.Clean(pl.facts.LogDir)
	}
	return runDir, logDir
}

// name is the deployment's name: tsd up --name's, else the profile's.
func (pl *planner) name() string {
	if pl.facts.Name != "" {
		return pl.facts.Name
	}
	return pl.p.Name
}

// StateDir is the folder a deployment named name keeps its state in when
// its profile, in folder dir, sets no run_dir or log_dir: dir/.tsd/NAME,
// the name made safe for a path (characters other than letters, digits,
// '.', '_' and '-' become '_'). Each deployment has its own, so any
// number of profiles in one folder run side by side.
func StateDir(dir, name string) string {
	safe := []byte(name)
	for i, c := range safe {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			safe[i] = '_'
		}
	}
	folder := string(safe)
	if folder == "" || strings.Trim(folder, ".") == "" {
		folder = "_" + folder // never "", "." or ".."
	}
	return filepath.Join(dir, StateRoot, folder)
}

// LegacyState is the shared state folder of an earlier tsd (dir/.tsd,
// whose run/ and logs/ every profile of the folder used): a plan's
// HostFacts.StateDir while a daemon that tsd started still runs there.
func LegacyState(dir string) string { return filepath.Join(dir, StateRoot) }

// accelerator is the profile's choice, else the host's only kind, else
// nvidia.
func (pl *planner) accelerator() string {
	switch {
	case pl.p.Accelerator != "":
		return pl.p.Accelerator
	case pl.facts.Accelerator != "":
		return pl.facts.Accelerator
	}
	return AcceleratorNVIDIA
}

// expandInstances turns roles into instances, one per replica.
func expandInstances(p *Profile) []*inst {
	var insts []*inst
	for i := range p.Roles {
		r := &p.Roles[i]
		for k := 0; k < r.Replicas; k++ {
			in := &inst{role: r, ri: i, k: k, key: fmt.Sprintf("roles[%d]", i), name: r.Instance(k), ns: localNS}
			if !r.Local() {
				in.ns = r.Host
			}
			insts = append(insts, in)
		}
	}
	return insts
}

// planWorkers sets every instance's worker: explicit ones as written
// (relative ipc paths anchor at the profile), default ones under run_dir,
// or under shortDir when run_dir would make any socket path too long.
func (pl *planner) planWorkers(insts []*inst, runDir, shortDir string) {
	tooLong := false
	for _, in := range insts {
		if k := in.k; k < len(in.role.Workers) && in.role.Workers[k] != "" {
			pl.explicitWorker(in)
			continue
		}
		in.workerKey = in.key + ".name"
		if pl.keepWorker(in) {
			continue
		}
		if len(filepath.Join(runDir, in.name))+len("-out.sock") > MaxSocketPath {
			tooLong = true
		}
	}
	sockDir := runDir
	if tooLong {
		sockDir = shortDir
		pl.warn("run_dir", "ipc socket paths under %s would exceed the %d-byte Unix limit; sockets go to %s instead", runDir, MaxSocketPath, shortDir)
	}
	for _, in := range insts {
		if in.worker.Scheme == "" && in.workerKey == in.key+".name" {
			in.worker = Worker{Scheme: "ipc", Path: filepath.Join(sockDir, in.name)}
			if len(in.worker.Path)+len("-out.sock") > MaxSocketPath {
				pl.err(in.workerKey, "socket path %s-out.sock is over the %d-byte Unix limit even in %s; use a shorter role name", in.worker.Path, MaxSocketPath, sockDir)
			}
		}
	}
}

func (pl *planner) explicitWorker(in *inst) {
	in.workerKey = replicaKey(in.key+".worker", in.k, in.role.Replicas)
	w, err := ParseWorker(in.role.Workers[in.k])
	if err != nil {
		pl.err(in.workerKey, "%v", err)
		return
	}
	if w.Scheme == "ipc" && !filepath.IsAbs(w.Path) {
		w.Path = filepath.Join(pl.p.Dir, w.Path)
	}
	if w.Scheme == "ipc" && len(w.Path)+len("-out.sock") > MaxSocketPath {
		pl.err(in.workerKey, "socket path %s-out.sock is %d bytes, over the %d-byte Unix limit; pick a shorter path", w.Path, len(w.Path)+len("-out.sock"), MaxSocketPath)
	}
	in.worker = w
}

// reserveFixedPorts reserves, before any port is chosen, the gateway's
// port, every handshake, and the dist-init and bootstrap ports the profile
// writes.
func (pl *planner) reserveFixedPorts(insts []*inst) {
	p := pl.p
	gwKey := "gateway.port"
	gwPort := pl.gatewayPort()
	pl.reserve(reservation{localNS, gwPort, gwPort, "gateway port", gwKey})
	if _, written := p.pos[gwKey]; written {
		pl.warnRange(gwKey, "gateway port", gwPort, gwPort)
	}
	for _, in := range insts {
		pl.reserveHandshake(in)
	}
	for _, in := range insts {
		pl.reserveDistInit(in)
	}
	for _, in := range insts {
		pl.reserveBootstrap(in)
	}
	for _, in := range insts {
		pl.reserveKVEvents(in)
	}
}

// kvEventsSpan is how many ports an engine's KV events take: a PUB and a
// replay ROUTER per DP rank.
func kvEventsSpan(dp int) int { return 2 * dp }

// KVEventsOn reports whether a role's engine publishes KV events: its
// kv_events, else (a kind that may publish: prefill, aggregated) whether
// its kind's policy routes on them or a kv_events_port is written.
func KVEventsOn(p *Profile, r *Role) bool {
	k := kindOf(r.Kind)
	if !k.KVEvents {
		return false
	}
	if r.KVEvents != nil {
		return *r.KVEvents
	}
	return k.PolicyOf(p.Gateway.Policy) == PolicyKVAware || slices.ContainsFunc(r.KVEventsPorts, func(p int) bool { return p > 0 })
}

// PolicyKVAware is the policy that routes on the engines' KV events.
const PolicyKVAware = "kv_aware"

// reserveKVEvents reserves an explicit kv_events_port's range.
func (pl *planner) reserveKVEvents(in *inst) {
	r := in.role
	in.kvOn = KVEventsOn(pl.p, r)
	if !in.kvOn {
		return
	}
	if b := nth(r.KVEventsPorts, in.k); b > 0 {
		in.kv, in.kvSet = b, true
		in.kvKey = replicaKey(in.key+".kv_events_port", in.k, r.Replicas)
		hi := b + kvEventsSpan(r.DP) - 1
		if hi > 65535 {
			pl.err(in.kvKey, "the KV event ports %d-%d run past 65535", b, hi)
			return
		}
		pl.warnRange(in.kvKey, "KV event ports", b, hi)
		pl.reserve(reservation{in.ns, b, hi, "KV event ports of " + in.name, in.kvKey})
	} else if in.keep != nil && in.keep.KVEvents != nil && in.keep.KVEvents.Port > 0 {
		// A continued instance publishes where it did (docs/architecture.md §4.3).
		b := in.keep.KVEvents.Port
		in.kv, in.kvSet = b, true
		in.kvKey = in.key + ".kv_events_port"
		pl.reserve(reservation{in.ns, b, b + kvEventsSpan(r.DP) - 1, "KV event ports of " + in.name, in.kvKey})
	}
}

// planKVEvents picks the KV event ports the profile leaves open: a block
// of 2 × dp from 9100 up, clear of every reservation and free.
func (pl *planner) planKVEvents(insts []*inst) {
	for _, in := range insts {
		if !in.kvOn || in.kvSet {
			continue
		}
		in.kvKey = in.key + ".kv_events_port"
		span := kvEventsSpan(in.role.DP)
		found := false
		for b := firstKVEvents; b+span-1 < HandshakeBandLo; b++ {
			if pl.conflict(in.ns, b, b+span-1) != nil {
				continue
			}
			ports := make([]int, span)
			for i := range ports {
				ports[i] = b + i
			}
			if !pl.free(in.ns, ports...) {
				continue
			}
			in.kv, found = b, true
			pl.res = append(pl.res, reservation{in.ns, b, b + span - 1, "KV event ports of " + in.name, in.kvKey})
			break
		}
		if !found {
			pl.err(in.kvKey, "no %d free consecutive ports for KV events between %d and %d; set kv_events_port", span, firstKVEvents, HandshakeBandLo-1)
		}
	}
}

// kvEventsPlan is the engine's --kv-events-config and the gateway's dial
// addresses: the engine binds every interface ("*", which is also what
// makes TokenSpeed bind rather than connect), the gateway dials the
// engine's host.
func kvEventsPlan(in *inst) *KVEventsPlan {
	if !in.kvOn || in.kv == 0 {
		return nil
	}
	dp := in.role.DP
	k := &KVEventsPlan{Port: in.kv, ReplayPort: in.kv + dp}
	k.Config = fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:%d","replay_endpoint":"tcp://*:%d"}`, k.Port, k.ReplayPort)
	host := bootstrapHost(in.role)
	for r := range dp {
		k.Publish = append(k.Publish, "tcp://"+net.JoinHostPort(host, strconv.Itoa(k.Port+r)))
		k.Replay = append(k.Replay, "tcp://"+net.JoinHostPort(host, strconv.Itoa(k.ReplayPort+r)))
	}
	return k
}

func (pl *planner) reserveHandshake(in *inst) {
	if in.worker.Scheme == "" {
		return
	}
	hp := in.worker.DialPort()
	what := fmt.Sprintf("handshake port of %s", in.name)
	if in.worker.Scheme == "ipc" {
		what = fmt.Sprintf("handshake port of %s (derived from %s)", in.name, in.worker.URL())
	} else {
		pl.warnRange(in.workerKey, what, hp, hp)
	}
	if in.worker.Scheme == "ipc" && !in.keptWorker {
		// Ten thousand buckets collide: another role of this profile or
		// another deployment on this host can hold the derived port. The
		// engine is told its handshake port (--data-parallel-rpc-port), so
		// the derivation is only a default: take the next free one in the
		// band. Which role moves follows the profile's order, so a profile
		// plans the same ports each time on the same host.
		c := pl.conflict(localNS, hp, hp)
		if c != nil || !pl.free(localNS, hp) {
			held := "is in use on this host"
			if c != nil {
				held = fmt.Sprintf("is taken by %s (%s)", c.what, pl.p.Where(c.key))
			}
			if q := pl.nextHandshakePort(hp); q > 0 {
				pl.warn(in.workerKey, "%s %d %s; using %d", what, hp, held, q)
				in.worker.HSPort, hp = q, q
			} else if c != nil {
				pl.err(in.workerKey, "%s %d %s and no port of the band %d-%d is free; set worker: explicitly", what, hp, held, HandshakeBandLo, HandshakeBandHi)
				return
			}
		}
	} else if c := pl.conflict(localNS, hp, hp); c != nil && in.worker.Scheme == "ipc" {
		pl.err(in.workerKey, "%s collides with %s (%s, %s); set worker: explicitly", what+" "+strconv.Itoa(hp), c.what, rangeText(c.lo, c.hi), pl.p.Where(c.key))
		return
	}
	pl.reserve(reservation{localNS, hp, hp, what, in.workerKey})
}

// nextHandshakePort is the first port after hp in the handshake band
// (wrapping) that is free on the host and clear of the profile's own
// reservations; 0 when there is none.
func (pl *planner) nextHandshakePort(hp int) int {
	n := HandshakeBandHi - HandshakeBandLo + 1
	for i := 1; i < n; i++ {
		q := HandshakeBandLo + (hp-HandshakeBandLo+i)%n
		if pl.conflict(localNS, q, q) == nil && pl.free(localNS, q) {
			return q
		}
	}
	return 0
}

func (pl *planner) reserveDistInit(in *inst) {
	r := in.role
	d := nth(r.DistInitPorts, in.k)
	in.distKey = replicaKey(in.key+".dist_init_port", in.k, r.Replicas)
	kept := false
	if d <= 0 && in.keep != nil {
		d, kept = addrPort(in.keep.DistInitAddr), true
		in.distKey = in.key + ".dist_init_port"
	}
	if d <= 0 {
		return
	}
	in.dist, in.distSet = d, true
	hi := d + ClusterSpan(r.DP)
	if hi > 65535 {
		pl.err(in.distKey, "the port cluster %d-%d runs past 65535", d, hi)
		return
	}
	if !kept {
		pl.warnRange(in.distKey, "dist-init port cluster", d, hi)
	}
	pl.reserve(reservation{in.ns, d, hi, "dist-init port cluster of " + in.name, in.distKey})
}

// reserveBootstrap settles where a prefill's or encode's rendezvous lives
// (the gateway's host when tsd serves prefill rendezvous) and reserves an
// explicit bootstrap port.
func (pl *planner) reserveBootstrap(in *inst) {
	r := in.role
	if !kindOf(r.Kind).Bootstrap {
		return
	}
	in.bootNS = in.ns
	if kindOf(r.Kind).TSDBootstrap && pl.p.Gateway.BootstrapServer == BootstrapTSD {
		in.bootNS = localNS
		if !r.Local() {
			pl.warn(in.key+".host", "gateway.bootstrap_server is tsd but %s runs on %s: it registers at its own 127.0.0.1, where tsd's rendezvous is not; use bootstrap_server: engine for remote prefills", in.name, r.Host)
		}
	}
	if b := nth(r.BootstrapPorts, in.k); b > 0 {
		in.boot, in.bootSet = b, true
		in.bootKey = replicaKey(in.key+".bootstrap_port", in.k, r.Replicas)
		pl.warnRange(in.bootKey, "bootstrap port", b, b)
		pl.reserve(reservation{in.bootNS, b, b, "bootstrap port of " + in.name, in.bootKey})
	} else if in.keep != nil && in.keep.BootstrapPort > 0 {
		in.boot, in.bootSet = in.keep.BootstrapPort, true
		in.bootKey = in.key + ".bootstrap_port"
		pl.reserve(reservation{in.bootNS, in.boot, in.boot, "bootstrap port of " + in.name, in.bootKey})
	}
}

// planBootstrapPorts picks the bootstrap ports the profile leaves open,
// from the kind's FirstBootstrap upward: prefill from 8998 and encode from
// 18995 (TokenSpeed's default and the CI's encode port).
func (pl *planner) planBootstrapPorts(insts []*inst) {
	for _, in := range insts {
		k := kindOf(in.role.Kind)
		if !k.Bootstrap || in.bootSet {
			continue
		}
		in.bootKey = in.key + ".bootstrap_port"
		start := k.FirstBootstrap
		found := false
		for b := start; b < HandshakeBandLo; b++ {
			if pl.conflict(in.bootNS, b, b) != nil || !pl.free(in.bootNS, b) {
				continue
			}
			in.boot, found = b, true
			pl.res = append(pl.res, reservation{in.bootNS, b, b, "bootstrap port of " + in.name, in.bootKey})
			break
		}
		if !found {
			pl.err(in.bootKey, "no free bootstrap port between %d and %d; set bootstrap_port", start, HandshakeBandLo-1)
		}
	}
}

// planDistInit picks dist-init bases: ≥100 apart from every other base on
// the same host, their whole zone clear of every reserved port, the
// cluster free.
func (pl *planner) planDistInit(insts []*inst) {
	cands := distInitCandidates()
	for _, in := range insts {
		if in.distSet {
			continue
		}
		in.distKey = in.key + ".dist_init_port"
		span := ClusterSpan(in.role.DP)
		zone := max(distInitStep-1, span)
		found := false
		for _, c := range cands {
			if c+span > 65535 || inBand(c, c+span) || inEphemeral(c, c+span) {
				continue
			}
			if pl.conflict(in.ns, c, c+zone) != nil || pl.nearBase(in.ns, c, insts) {
				continue
			}
			if !pl.free(in.ns, ClusterPorts(c, in.role.DP)...) {
				continue
			}
			in.dist, found = c, true
			pl.res = append(pl.res, reservation{in.ns, c, c + span, "dist-init port cluster of " + in.name, in.distKey})
			break
		}
		if !found {
			pl.err(in.distKey, "no free dist-init port cluster found; set dist_init_port")
		}
	}
}

// gatewayMode resolves mode: auto: epd when a kind only epd routes to
// (encode) has a role.
func (pl *planner) gatewayMode(insts []*inst) string {
	hasEncode := false
	for _, in := range insts {
		hasEncode = hasEncode || kindOf(in.role.Kind).EPDOnly
	}
	mode := pl.p.Gateway.Mode
	switch {
	case mode == ModeAuto && hasEncode:
		return ModeEPD
	case mode == ModeAuto:
		return ModePD
	case mode == ModePD && hasEncode:
		pl.warn("gateway.mode", "mode is pd: the encode role(s) start but get no work")
	}
	return mode
}

// gatewayPort is tsd up --port's, else gateway.port.
func (pl *planner) gatewayPort() int {
	if pl.facts.GatewayPort > 0 {
		return pl.facts.GatewayPort
	}
	return pl.p.Gateway.Port
}

func (pl *planner) gatewayPlan(mode, logDir string) GatewayPlan {
	g := pl.p.Gateway
	g.Port = pl.gatewayPort()
	urlHost := g.Host
	if isWildcard(g.Host) {
		urlHost = "127.0.0.1"
	}
	toolP, reasonP := ReplyParsers(pl.p)
	gp := GatewayPlan{
		Listen:           net.JoinHostPort(g.Host, strconv.Itoa(g.Port)),
		URL:              "http://" + net.JoinHostPort(urlHost, strconv.Itoa(g.Port)),
		Mode:             mode,
		Policy:           g.Policy,
		APIKeyEnv:        g.APIKeyEnv,
		BootstrapServer:  g.BootstrapServer,
		ImageURLs:        g.ImageURLs,
		StallTimeout:     Duration(pl.p.Health.StallTimeout),
		QueueTimeout:     Duration(g.QueueTimeout),
		ImageURLAllow:    g.ImageURLAllow,
		MetricsPublic:    g.MetricsPublic,
		MaxConcurrent:    g.MaxConcurrent,
		CORSOrigins:      g.CORSOrigins,
		ToolCallParser:   toolP,
		ReasoningParser:  reasonP,
		LogFile:          filepath.Join(logDir, GatewayLogName+".log"),
		Workers:          []WorkerPlan{},
		Retry:            g.Retry,
		CircuitBreaker:   g.CircuitBreaker,
		TokenizerCacheMB: g.TokenizerCacheMB,
		Disaggregation:   g.Disaggregation,
		Conditional:      g.Conditional,
	}
	routingPlans(&gp, g.Policy, g.Routing)
	var def AdmissionPlan
	admissionSection.setDefaults(&def)
	if g.Admission != def {
		a := g.Admission
		gp.Admission = &a
	}
	gp.APIKeys = g.APIKeys
	gp.Tracing = tracingPlan(g.Tracing)
	return gp
}

// NVLinkVars are the Mooncake variables that force its intra-node NVLink
// transport (docs/profiles.md, "Transfer").
var NVLinkVars = []string{"MC_INTRANODE_NVLINK", "MC_INTRA_NVLINK"}

// NVLinkReason is why tsd warns about them, in the TokenSpeed docs' words.
const NVLinkReason = "on containerized hosts the forced intra-node NVLink transport has reported success without writing the destination pages, so leave it unset unless the platform is known to support it"

// nvlinkForced reports whether env forces the NVLink transport: set to
// anything but empty, 0 or false.
func nvlinkForced(v string) bool {
	v = strings.ToLower(strings.TrimSpace(v))
	return v != "" && v != "0" && v != "false"
}

// transferWarnings applies the seed page's Transfer section to the
// profile: only mooncake is known, and a forced NVLink transport needs
// engine.mooncake.intranode_nvlink: true.
func (pl *planner) transferWarnings(insts []*inst) {
	p := pl.p
	if !slices.ContainsFunc(insts, func(in *inst) bool { return kindOf(in.role.Kind).Transfer }) {
		return // aggregated engines only: nothing is transferred
	}
	if p.Engine.TransferBackend != DefaultTransferBackend {
		pl.warn("engine.transfer_backend", "%q: TokenSpeed knows only mooncake", p.Engine.TransferBackend)
	}
	if p.Engine.Mooncake.IntranodeNVLink {
		return
	}
	hint := "; set engine.mooncake.intranode_nvlink: true if this platform is known to support it"
	for _, v := range NVLinkVars {
		if nvlinkForced(p.Engine.Env[v]) {
			pl.warn("engine.env."+v, "%s is set: %s%s", v, NVLinkReason, hint)
		}
	}
	for i := range p.Roles {
		for _, v := range NVLinkVars {
			if nvlinkForced(p.Roles[i].Env[v]) {
				pl.warn(fmt.Sprintf("roles[%d].env.%s", i, v), "%s is set: %s%s", v, NVLinkReason, hint)
			}
		}
	}
}

// deviceRules checks what the accelerator kind implies: Ascend NPUs are
// named by index (ASCEND_RT_VISIBLE_DEVICES takes logical ids, no UUIDs).
func (pl *planner) deviceRules(accel string, insts []*inst) {
	if accel != AcceleratorAscend {
		return
	}
	for _, in := range insts {
		if in.k >= len(in.role.GPUs) {
			continue
		}
		for _, g := range in.role.GPUs[in.k] {
			if _, err := strconv.Atoi(g); err != nil {
				pl.err(replicaKey(in.key+".gpus", in.k, in.role.Replicas), "%s: with accelerator: ascend, gpus are NPU indices (ASCEND_RT_VISIBLE_DEVICES takes no UUIDs)", g)
			}
		}
	}
}

// nearBase reports whether another dist-init base on ns lies within
// distInitStep of c.
func (pl *planner) nearBase(ns string, c int, insts []*inst) bool {
	for _, o := range insts {
		if o.ns != ns || o.dist == 0 {
			continue
		}
		if d := c - o.dist; d > -distInitStep && d < distInitStep {
			return true
		}
	}
	return false
}

func (pl *planner) checkGPUs(insts []*inst) {
	for _, in := range insts {
		if !in.role.Local() || in.k >= len(in.role.GPUs) {
			continue
		}
		for _, g := range in.role.GPUs[in.k] {
			if _, ok := ResolveGPU(g, pl.facts.GPUs); !ok {
				pl.err(replicaKey(in.key+".gpus", in.k, in.role.Replicas), "GPU %s does not exist on this host (%d GPU(s) found)", g, len(pl.facts.GPUs))
			}
		}
	}
}

func (pl *planner) rolePlan(in *inst, logDir, accel string) RolePlan {
	r := in.role
	var gpus []string
	if in.k < len(r.GPUs) {
		gpus = append([]string{}, r.GPUs[in.k]...)
	}
	rp := RolePlan{
		Name: in.name, Group: r.Name, Kind: r.Kind, Host: r.Host, Local: r.Local(),
		GPUs: gpus, TP: r.TP, DP: r.DP, EngineIndex: r.EngineIndex,
		GPUMemoryUtilization: r.GPUMemoryUtilization,
		IBDevice:             r.IBDevice,
		LogFile:              filepath.Join(logDir, in.name+".log"),
		Restart:              r.Restart.Plan(),
		StallAction:          pl.p.Health.StallAction,
	}
	if rp.IBDevice == "" {
		rp.IBDevice = pl.p.Engine.IBDevice
	}
	if rp.GPUs == nil {
		rp.GPUs = []string{}
	}
	if in.worker.Scheme != "" {
		rp.Worker = in.worker.URL()
		rp.Handshake = in.worker.Handshake()
	}
	if in.keep != nil {
		// A continued instance writes where it always has, under
		// whatever name it has now (docs/architecture.md §4.3).
		rp.LogFile = in.keep.LogFile
		if as := in.keep.AddressName(); as != in.name {
			rp.PlannedAs = as
		}
	}
	if in.dist > 0 {
		rp.DistInitAddr = "127.0.0.1:" + strconv.Itoa(in.dist)
		rp.PortCluster = ClusterPorts(in.dist, r.DP)
	} else {
		rp.PortCluster = []int{}
	}
	if in.boot > 0 {
		rp.BootstrapPort = in.boot
		rp.Bootstrap = net.JoinHostPort(bootstrapHost(r), strconv.Itoa(in.boot))
	}
	rp.KVEvents = kvEventsPlan(in)
	rp.Argv = roleArgv(pl.p, in, rp)
	rp.Env = roleEnv(pl.p.Engine.Env, r.Env, gpus, accel)
	return rp
}

// bootstrapHost is where decode reaches a role's rendezvous: bootstrap_host,
// else the remote host, else 127.0.0.1 (docs/architecture.md).
func bootstrapHost(r *Role) string {
	switch {
	case r.BootstrapHost != "":
		return r.BootstrapHost
	case !r.Local():
		return r.Host
	}
	return "127.0.0.1"
}

// ReplyParsers is the gateway's tool-call and reasoning parser: the
// profile's, else the model family's default as `ts serve` picks it
// (parsernames.DefaultFor reads the model's config.json when it is a local
// directory).
func ReplyParsers(p *Profile) (tool, reasoning string) {
	tool, reasoning = p.Gateway.ToolCallParser, p.Gateway.ReasoningParser
	if tool == "" || reasoning == "" {
		dt, dr := parsernames.DefaultFor(p.Model)
		if tool == "" {
			tool = dt
		}
		if reasoning == "" {
			reasoning = dr
		}
	}
	return tool, reasoning
}

// engineReasoningArgs is --reasoning-parser for the engines: the engine
// uses it only to start a json_schema grammar after the reasoning part of
// the reply, and must name the gateway's parser (docs/profiles.md). None
// for passthrough, or when engine.args or the role's args set it already.
func engineReasoningArgs(p *Profile, r *Role) []string {
	_, name := ReplyParsers(p)
	if name == "" || name == "passthrough" {
		return nil
	}
	for _, args := range [][]string{p.Engine.Args, r.Args} {
		for _, a := range args {
			if a == "--reasoning-parser" || strings.HasPrefix(a, "--reasoning-parser=") {
				return nil
			}
		}
	}
	return []string{"--reasoning-parser", name}
}

// roleArgv is the engine command line: the planned flags in the seed
// page's order (docs/profiles.md), then engine.args, then the role's args.
func roleArgv(p *Profile, in *inst, rp RolePlan) []string {
	r := in.role
	argv := append([]string{}, p.Engine.Command...)
	argv = append(argv, "--headless", "--model", p.Model)
	if r.TP != 1 {
		argv = append(argv, "--tp", strconv.Itoa(r.TP))
	}
	if r.DP != 1 {
		argv = append(argv, "--data-parallel-size", strconv.Itoa(r.DP))
	}
	k := kindOf(r.Kind)
	argv = append(argv, "--disaggregation-mode", k.Mode)
	if in.boot > 0 {
		argv = append(argv, "--disaggregation-bootstrap-port", strconv.Itoa(in.boot))
	}
	if k.DPLoadBalance != "" && r.DP > 1 {
		// TokenSpeed refuses any other method for this kind with DP > 1.
		argv = append(argv, "--load-balance-method", k.DPLoadBalance)
	}
	if k.Transfer {
		argv = append(argv, "--disaggregation-transfer-backend", p.Engine.TransferBackend)
		if rp.IBDevice != "" {
			argv = append(argv, "--disaggregation-ib-device", rp.IBDevice)
		}
	}
	argv = append(argv, "--dist-init-addr", rp.DistInitAddr)
	if in.worker.Scheme != "" {
		argv = append(argv, "--data-parallel-address", in.worker.DialHost(),
			"--data-parallel-rpc-port", strconv.Itoa(in.worker.DialPort()))
	}
	argv = append(argv, "--zmq-engine-index", strconv.Itoa(r.EngineIndex))
	if r.GPUMemoryUtilization > 0 {
		argv = append(argv, "--gpu-memory-utilization", strconv.FormatFloat(r.GPUMemoryUtilization, 'f', -1, 64))
	}
	if rp.KVEvents != nil {
		argv = append(argv, "--kv-events-config", rp.KVEvents.Config)
	}
	argv = append(argv, engineReasoningArgs(p, r)...)
	argv = append(argv, p.Engine.Args...)
	return append(argv, r.Args...)
}

// VisibleDevicesVar is the variable that hands a role its devices.
func VisibleDevicesVar(accel string) string {
	if accel == AcceleratorAscend {
		return "ASCEND_RT_VISIBLE_DEVICES"
	}
	return "CUDA_VISIBLE_DEVICES"
}

// roleEnv is the environment tsd adds for a role: the defaults, then
// engine.env, then the role's env, then the device list (which the
// profile may not set).
func roleEnv(engineEnv, roleEnv map[string]string, gpus []string, accel string) map[string]string {
	env := map[string]string{}
	for _, kv := range defaultEnv {
		if kv[0] == "CUDA_DEVICE_ORDER" && accel == AcceleratorAscend {
			continue // a CUDA setting; NPUs keep their own order
		}
		env[kv[0]] = kv[1]
	}
	for k, v := range engineEnv {
		env[k] = v
	}
	for k, v := range roleEnv {
		env[k] = v
	}
	env[VisibleDevicesVar(accel)] = strings.Join(gpus, ",")
	return env
}

// EnvOrder lists a role's env keys as tsd prints them: the device list
// (CUDA_VISIBLE_DEVICES or ASCEND_RT_VISIBLE_DEVICES) first, as on the
// seed page, then the rest sorted.
func EnvOrder(env map[string]string) []string {
	keys := make([]string, 0, len(env))
	var first []string
	for k := range env {
		if k == "CUDA_VISIBLE_DEVICES" || k == "ASCEND_RT_VISIBLE_DEVICES" {
			first = append(first, k)
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sort.Strings(first)
	return append(first, keys...)
}

// WriteJSON writes the plan as `tsd plan --json` prints it: indented, with
// <, > and & left readable.
func (p *Plan) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(p)
}

// nth is s[k], or 0 when a half-loaded role lacks the entry.
func nth(s []int, k int) int {
	if k < len(s) {
		return s[k]
	}
	return 0
}
