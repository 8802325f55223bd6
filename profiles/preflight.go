package profiles

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/tsd-project/tsd/internal/procfs"

	"golang.org/x/sys/unix"
)

// Severity of a preflight problem.
type Severity string

// Severities.
const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Problem is one preflight finding.
type Problem struct {
	Severity Severity `json:"severity"`
	Role     string   `json:"role,omitempty"` // role instance, "gateway", or empty
	Msg      string   `json:"message"`
}

func (p Problem) String() string {
	who := ""
	if p.Role != "" {
		who = p.Role + ": "
	}
	return fmt.Sprintf("%s: %s%s", p.Severity, who, p.Msg)
}

// PreflightEnv injects the host so Preflight can be tested; a nil func skips
// its check.
type PreflightEnv struct {
	PortFree   func(port int) bool
	PortHolder func(port int) string // "pid 123: cmdline", "" when unknown
	LookPath   func(file string) (string, error)
	GPUs       []GPU // nil: unknown (a warning)
	EUID       int
	Lstat      func(path string) (fs.FileInfo, error)
	Writable   func(dir string) error // dir or its nearest existing ancestor
	// Getenv reads tsd's own environment, which every engine inherits.
	Getenv func(string) string
	// SysfsRoot is where class/infiniband lives ("/sys"); "" skips the
	// RDMA device check.
	SysfsRoot string
	// MooncakeDirs lists installed Mooncake package directories (for the
	// Ascend build check); nil skips the check.
	MooncakeDirs func() []string
}

// LocalPreflightEnv checks this machine: real port binds, /proc for port
// holders, $PATH, the effective uid. GPUs stay unknown; set them from
// telemetry when it is available.
func LocalPreflightEnv() PreflightEnv {
	return PreflightEnv{
		PortFree:   PortFree,
		PortHolder: PortHolder,
		LookPath:   exec.LookPath,
		EUID:       os.Geteuid(),
		Lstat:      os.Lstat,
		Writable:   DirWritable,
		Getenv:     os.Getenv,
		SysfsRoot:  "/sys",
		MooncakeDirs: func() []string {
			return MooncakeDirs(os.Getenv)
		},
	}
}

// Preflight checks that the host can run the plan: every local port free,
// engine commands on PATH, GPUs present, the transfer setup, ipc
// directories safe, log directory writable. It returns every problem at
// once.
func Preflight(plan *Plan, env PreflightEnv) []Problem {
	var out []Problem
	add := func(sev Severity, role, format string, args ...any) {
		out = append(out, Problem{Severity: sev, Role: role, Msg: fmt.Sprintf(format, args...)})
	}
	if env.PortFree != nil {
		preflightPorts(plan, env, add)
	}
	if env.LookPath != nil {
		preflightCommands(plan, env, add)
	}
	preflightDeviceList(plan, env, add)
	preflightTransfer(plan, env, add)
	if env.Lstat != nil {
		preflightSocketDirs(plan, env, add)
	}
	if env.Writable != nil {
		if err := env.Writable(plan.LogDir); err != nil {
			add(SeverityError, "", "log directory %s: %v", plan.LogDir, err)
		}
	}
	return out
}

type addFunc = func(sev Severity, role, format string, args ...any)

// preflightPorts: the gateway binds its listener and every handshake (and
// prefill rendezvous when it hosts them); local engines bind their
// dist-init clusters, bootstrap ports and KV event ports. Each must be
// free now.
func preflightPorts(plan *Plan, env PreflightEnv, add addFunc) {
	type want struct {
		port      int
		who, what string
	}
	var wants []want
	if _, ps, err := net.SplitHostPort(plan.Gateway.Listen); err == nil {
		if n, err := strconv.Atoi(ps); err == nil {
			wants = append(wants, want{n, "gateway", "HTTP listener " + plan.Gateway.Listen})
		}
	}
	for _, w := range plan.Gateway.Workers {
		if n := addrPort(w.Handshake); n > 0 {
			wants = append(wants, want{n, "gateway", "handshake " + w.Handshake + " of " + w.Role})
		}
	}
	tsdBoot := plan.Gateway.BootstrapServer == BootstrapTSD
	for _, r := range plan.Roles {
		if kindOf(r.Kind).TSDBootstrap && tsdBoot && r.BootstrapPort > 0 {
			wants = append(wants, want{r.BootstrapPort, "gateway", "bootstrap rendezvous of " + r.Name})
		}
	}
	for _, r := range plan.Roles {
		if !r.Local || r.OnOtherNode() {
			continue // its ports are on another host: binding here says nothing
		}
		for _, p := range r.PortCluster {
			wants = append(wants, want{p, r.Name, "dist-init cluster port"})
		}
		if r.BootstrapPort > 0 && !(kindOf(r.Kind).TSDBootstrap && tsdBoot) {
			wants = append(wants, want{r.BootstrapPort, r.Name, "bootstrap port"})
		}
		for _, p := range r.KVEvents.Ports() {
			wants = append(wants, want{p, r.Name, "KV event port"})
		}
	}
	checked := map[int]bool{}
	for _, w := range wants {
		if checked[w.port] {
			continue
		}
		checked[w.port] = true
		if env.PortFree(w.port) {
			continue
		}
		holder := ""
		if env.PortHolder != nil {
			if h := env.PortHolder(w.port); h != "" {
				holder = " (held by " + h + ")"
			}
		}
		add(SeverityError, w.who, "port %d (%s) is in use%s", w.port, w.what, holder)
	}
}

// preflightCommands: every local engine command is on PATH.
func preflightCommands(plan *Plan, env PreflightEnv, add addFunc) {
	seen := map[string]bool{}
	for _, r := range plan.Roles {
		if !r.Local || len(r.Argv) == 0 || seen[r.Argv[0]] {
			continue
		}
		seen[r.Argv[0]] = true
		if _, err := env.LookPath(r.Argv[0]); err != nil {
			add(SeverityError, r.Name, "engine command %q not found on PATH (set engine.command)", r.Argv[0])
		}
	}
}

// preflightDeviceList checks the roles' GPUs (or NPUs) against the host's
// list, or says it is unknown.
func preflightDeviceList(plan *Plan, env PreflightEnv, add addFunc) {
	dev := "GPU"
	if plan.Accelerator == AcceleratorAscend {
		dev = "NPU"
	}
	if env.GPUs != nil {
		preflightDevices(plan, env.GPUs, dev, add)
		return
	}
	anyLocal := false
	for _, r := range plan.Roles {
		anyLocal = anyLocal || (r.Local && len(r.GPUs) > 0)
	}
	switch {
	case anyLocal && dev == "NPU":
		add(SeverityWarning, "", "NPU list unknown (no npu-smi): the profile's NPUs were not checked")
	case anyLocal:
		add(SeverityWarning, "", "GPU list unknown (no NVML): the profile's GPUs were not checked")
	}
}

// preflightSocketDirs: ipc directories (docs/protocol.md) and the control
// socket's are real directories we own, and no socket path is taken by a
// non-socket.
func preflightSocketDirs(plan *Plan, env PreflightEnv, add addFunc) {
	dirs := map[string]string{filepath.Dir(plan.ControlSocket): "control socket"}
	for _, w := range plan.Gateway.Workers {
		if path, ok := strings.CutPrefix(w.URL, "ipc://"); ok {
			dirs[filepath.Dir(path)] = "ipc sockets"
			for _, s := range []string{path + "-in.sock", path + "-out.sock"} {
				if fi, err := env.Lstat(s); err == nil && fi.Mode()&fs.ModeSocket == 0 {
					add(SeverityError, w.Role, "%s exists and is not a socket; tsd will not remove it", s)
				}
			}
		}
	}
	keys := make([]string, 0, len(dirs))
	for d := range dirs {
		keys = append(keys, d)
	}
	sort.Strings(keys)
	for _, d := range keys {
		if msg := checkSocketDir(d, env); msg != "" {
			add(SeverityError, "", "%s directory %s: %s", dirs[d], d, msg)
		}
	}
}

// preflightDevices compares the roles' devices by UUID: the profile may
// name one GPU by index in one role and by UUID in another, which string
// comparison at load time cannot see. Sharing is allowed only between
// roles that all set gpu_memory_utilization, at most the whole device.
func preflightDevices(plan *Plan, gpus []GPU, dev string, add addFunc) {
	type owner struct {
		name string
		frac float64
	}
	owners := map[string][]owner{} // uuid → roles on it
	var order []string
	for _, r := range plan.Roles {
		if !r.Local {
			continue
		}
		for _, g := range r.GPUs {
			uuid, ok := ResolveGPU(g, gpus)
			if !ok {
				add(SeverityError, r.Name, "%s %s does not exist on this host (%d %s(s) found)", dev, g, len(gpus), dev)
				continue
			}
			prev := owners[uuid]
			if len(prev) > 0 && (r.GPUMemoryUtilization == 0 || prev[0].frac == 0) {
				add(SeverityError, r.Name, "%s %s (%s) is already used by %s; engines must not share a %s unless every role on it sets gpu_memory_utilization", dev, g, uuid, prev[0].name, dev)
				continue
			}
			if len(prev) == 0 {
				order = append(order, uuid)
			}
			owners[uuid] = append(prev, owner{fmt.Sprintf("%s (as %s)", r.Name, g), r.GPUMemoryUtilization})
		}
	}
	for _, uuid := range order {
		us := owners[uuid]
		sum := 0.0
		for _, o := range us {
			sum += o.frac
		}
		if len(us) > 1 && sum > ShareErrorAbove+1e-9 {
			add(SeverityError, us[len(us)-1].name, "%s %s is shared and gpu_memory_utilization sums to %.2f, more than the whole device", dev, uuid, sum)
		}
	}
}

// preflightTransfer applies the seed page's Transfer section to the host:
// MC_INTRANODE_NVLINK in tsd's own environment (every engine inherits it)
// unless acknowledged, RDMA devices that /sys does not show, and, on
// Ascend, a Mooncake build that is not Ascend-compatible.
func preflightTransfer(plan *Plan, env PreflightEnv, add addFunc) {
	if env.Getenv != nil {
		for _, p := range NVLinkEnvWarnings(plan, env.Getenv) {
			add(p.Severity, p.Role, "%s", p.Msg)
		}
	}
	if env.SysfsRoot != "" {
		preflightIBDevices(plan, filepath.Join(env.SysfsRoot, "class", "infiniband"), add)
	}
	if plan.Accelerator == AcceleratorAscend && (plan.TransferBackend == "" || plan.TransferBackend == DefaultTransferBackend) && env.MooncakeDirs != nil {
		if msg := ascendMooncake(env.MooncakeDirs()); msg != "" {
			add(SeverityWarning, "", "%s", msg)
		}
	}
}

// NVLinkEnvWarnings warns about MC_INTRANODE_NVLINK (or MC_INTRA_NVLINK)
// in tsd's own environment, which every engine inherits, unless the plan
// acknowledges it. `tsd validate` runs it even without --preflight.
func NVLinkEnvWarnings(plan *Plan, getenv func(string) string) []Problem {
	if plan.IntranodeNVLink {
		return nil
	}
	var out []Problem
	for _, v := range NVLinkVars {
		if nvlinkForced(getenv(v)) {
			out = append(out, Problem{Severity: SeverityWarning, Msg: fmt.Sprintf("%s is set in tsd's environment, so every engine inherits it: %s; set engine.mooncake.intranode_nvlink: true if this platform is known to support it", v, NVLinkReason)})
		}
	}
	return out
}

// preflightIBDevices checks each local role's --disaggregation-ib-device
// names against dir (/sys/class/infiniband). Containers often hide sysfs
// entries of devices they can still use, so a miss is a warning.
func preflightIBDevices(plan *Plan, dir string, add addFunc) {
	var have []string
	ents, err := os.ReadDir(dir)
	listed := err == nil
	for _, e := range ents {
		have = append(have, e.Name())
	}
	warnedNoDir := false
	for _, r := range plan.Roles {
		if !r.Local || r.IBDevice == "" {
			continue
		}
		if !listed {
			if !warnedNoDir {
				add(SeverityWarning, r.Name, "ib_device %s: this host shows no RDMA devices (cannot list %s); Mooncake may not find them", r.IBDevice, dir)
				warnedNoDir = true
			}
			continue
		}
		for _, d := range strings.Split(r.IBDevice, ",") {
			d = strings.TrimSpace(d)
			if d != "" && !contains(have, d) {
				add(SeverityWarning, r.Name, "ib_device %s is not in %s (found: %s)", d, dir, orNone(have))
			}
		}
	}
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// MooncakeDirs lists the Mooncake package directories in the usual Python
// install places (the active virtualenv or conda env first).
func MooncakeDirs(getenv func(string) string) []string {
	var roots []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if d := getenv(v); d != "" {
			roots = append(roots, filepath.Join(d, "lib", "python3*", "*-packages"))
		}
	}
	if home := getenv("HOME"); home != "" {
		roots = append(roots, filepath.Join(home, ".local", "lib", "python3*", "site-packages"))
	}
	roots = append(roots, "/usr/local/lib/python3*/*-packages", "/usr/lib/python3*/*-packages", "/usr/lib/python3/dist-packages")
	var out []string
	for _, r := range roots {
		m, _ := filepath.Glob(filepath.Join(r, "mooncake"))
		out = append(out, m...)
	}
	return out
}

// ascendMooncake says what is wrong with the installed Mooncake for Ascend
// NPUs, "" when a package directory holds an Ascend transport (a file
// whose name mentions ascend or hccl). Without any package found it cannot
// tell, and says so once.
func ascendMooncake(dirs []string) string {
	if len(dirs) == 0 {
		return "accelerator is ascend: tsd cannot check that Mooncake is an Ascend-compatible build (no mooncake Python package found where tsd looks); embedding and KV transfers need one"
	}
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			n := strings.ToLower(e.Name())
			if strings.Contains(n, "ascend") || strings.Contains(n, "hccl") {
				return ""
			}
		}
	}
	return fmt.Sprintf("accelerator is ascend but the Mooncake at %s has no Ascend transport (no ascend or hccl library in it); embedding and KV transfers need an Ascend-compatible Mooncake build", dirs[0])
}

// checkSocketDir applies SMG's rule: an existing socket directory must be
// a real directory (not a symlink) owned by us; a missing one is created
// 0700, so its nearest existing ancestor must be writable.
func checkSocketDir(dir string, env PreflightEnv) string {
	fi, err := env.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if env.Writable != nil {
			if err := env.Writable(dir); err != nil {
				return fmt.Sprintf("cannot be created: %v", err)
			}
		}
		return ""
	}
	if err != nil {
		return err.Error()
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return "is a symlink; the sockets carry no authentication, so tsd wants a real directory"
	}
	if !fi.IsDir() {
		return "is not a directory"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != env.EUID {
		return fmt.Sprintf("is owned by uid %d, not by you (uid %d); the sockets carry no authentication", st.Uid, env.EUID)
	}
	return ""
}

func addrPort(addr string) int {
	addr = strings.TrimPrefix(addr, "tcp://")
	_, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(ps)
	return n
}

// PortFree reports whether a TCP port can be bound and listened on on the
// wildcard address, as TokenSpeed checks its cluster (Go sets SO_REUSEADDR,
// so TIME_WAIT does not count as busy).
func PortFree(port int) bool {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// DirWritable checks that dir (or, when it does not exist yet, its nearest
// existing ancestor) is a directory we may write to.
func DirWritable(dir string) error {
	d := filepath.Clean(dir)
	for {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s is not a directory", d)
			}
			if err := unix.Access(d, unix.W_OK|unix.X_OK); err != nil {
				return fmt.Errorf("%s is not writable: %w", d, err)
			}
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		parent := filepath.Dir(d)
		if parent == d {
			return fmt.Errorf("no existing ancestor of %s", dir)
		}
		d = parent
	}
}

// PortHolder names the process listening on a local TCP port ("pid 123:
// cmdline"), best effort from /proc; "" when it cannot tell.
func PortHolder(port int) string { return portHolderText("/proc", port) }

// portHolderText names what holds port under proc: the process that
// listens on it, else — when only TIME_WAIT sockets are there, as a
// connection that closed without SO_REUSEADDR leaves them, which refuse
// a new bind — that it frees itself within a minute; "" when unknown.
func portHolderText(proc string, port int) string {
	pid, cmd, timeWait, other := portHolder(proc, port)
	switch {
	case pid != 0 && cmd == "":
		return "pid " + strconv.Itoa(pid)
	case pid != 0:
		return fmt.Sprintf("pid %d: %s", pid, cmd)
	case timeWait > 0 && other == 0:
		return fmt.Sprintf("only %d socket(s) in TIME_WAIT, connections that closed in the last minute: no process holds it, and the kernel frees it within 60 s", timeWait)
	}
	return ""
}

// portHolder reads the sockets on local port under proc: the process of
// a listening one (pid, its command line), and how many are in TIME_WAIT
// and in any other state.
func portHolder(proc string, port int) (pid int, cmd string, timeWait, other int) {
	inodes := map[string]bool{}
	want := fmt.Sprintf("%04X", port)
	for _, so := range procfs.TCPSockets(proc) {
		i := strings.LastIndexByte(so.Local, ':')
		if i < 0 || !strings.EqualFold(so.Local[i+1:], want) {
			continue
		}
		switch {
		case so.State == procfs.Listen && so.Inode != "0":
			inodes[so.Inode] = true
		case so.State == procfs.TimeWait:
			timeWait++
		default:
			other++
		}
	}
	if pid = procfs.HolderOf(proc, inodes); pid == 0 {
		return 0, "", timeWait, other
	}
	return pid, procfs.Cmdline(proc, pid), timeWait, other
}

// ResolveGPU finds the UUID of a GPU named as the profile allows (and as
// CUDA_VISIBLE_DEVICES reads it): a physical index, a full UUID, or a
// unique UUID prefix with or without "GPU-". GPUs without a known UUID
// resolve to "index:N".
func ResolveGPU(g string, gpus []GPU) (string, bool) {
	id := func(x GPU) string {
		if x.UUID != "" {
			return x.UUID
		}
		return "index:" + strconv.Itoa(x.Index)
	}
	if n, err := strconv.Atoi(g); err == nil {
		for _, x := range gpus {
			if x.Index == n {
				return id(x), true
			}
		}
		return "", false
	}
	want := strings.TrimPrefix(g, "GPU-")
	found := ""
	for _, x := range gpus {
		if x.UUID != "" && strings.HasPrefix(strings.TrimPrefix(x.UUID, "GPU-"), want) {
			if found != "" {
				return "", false // ambiguous prefix
			}
			found = x.UUID
		}
	}
	return found, found != ""
}
