package profiles

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Scaling a running deployment (`tsd scale decode=3`, docs/architecture.md
// §4.3) edits the profile it runs in memory, never the file: a profile
// entry gets more or fewer replicas, the new ones on the GPUs given or on
// free ones, and the result is checked by the same rules as a loaded
// profile before it is planned.

// Scaled returns a copy of p whose entry group has n replicas: the first
// min(n, now) keep their GPU sets and per-replica settings, replicas
// added take gpus (one set each, in order) and plan the rest. Errors name
// the scale argument or, for rules the edited profile breaks, the key.
func (p *Profile) Scaled(group string, n int, gpus [][]string) (*Profile, error) {
	return p.ScaledLike(nil, group, n, gpus)
}

// ScaledLike is Scaled where the replicas added take, slot by slot, the
// per-replica settings file writes for them (worker, dist_init_port,
// bootstrap_port, kv_events_port): file is the profile as its file says
// it, before any tsd scale, so `tsd scale decode=1` then `decode=3`
// brings replicas 2 and 3 back on the addresses the profile chose rather
// than on planned ones. file nil (or without the entry): planned.
func (p *Profile) ScaledLike(file *Profile, group string, n int, gpus [][]string) (*Profile, error) {
	arg := group + "=" + strconv.Itoa(n)
	if n < 1 || n > 64 {
		return nil, fmt.Errorf("%s: replicas must be 1-64", arg)
	}
	idx := -1
	var names []string
	for i := range p.Roles {
		names = append(names, p.Roles[i].Name)
		if p.Roles[i].Name == group {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("%s: the profile has no role entry %q (have %s)", arg, group, strings.Join(names, ", "))
	}
	q := *p
	q.Roles = append([]Role(nil), p.Roles...)
	r := q.Roles[idx]
	old := r.Replicas
	add := max(0, n-old)
	if len(gpus) != add {
		return nil, fmt.Errorf("%s: %d new replica(s) need %d GPU set(s), got %d", arg, add, add, len(gpus))
	}
	r.Replicas = n
	r.GPUs = resize(r.GPUs, n)
	for k := 0; k < add; k++ {
		r.GPUs[old+k] = append([]string(nil), gpus[k]...)
	}
	r.Workers = resize(r.Workers, n)
	r.DistInitPorts = resize(r.DistInitPorts, n)
	r.BootstrapPorts = resize(r.BootstrapPorts, n)
	r.KVEventsPorts = resize(r.KVEventsPorts, n)
	if f := fileEntry(file, group); f != nil {
		for k := old; k < n; k++ {
			r.Workers[k] = slot(f.Workers, k, r.Workers[k])
			r.DistInitPorts[k] = slot(f.DistInitPorts, k, r.DistInitPorts[k])
			r.BootstrapPorts[k] = slot(f.BootstrapPorts, k, r.BootstrapPorts[k])
			r.KVEventsPorts[k] = slot(f.KVEventsPorts, k, r.KVEventsPorts[k])
		}
	}
	q.Roles[idx] = r
	if errs := q.Check(); len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", arg, errs)
	}
	return &q, nil
}

// fileEntry is the entry named group of file, nil when there is none.
func fileEntry(file *Profile, group string) *Role {
	if file == nil {
		return nil
	}
	for i := range file.Roles {
		if file.Roles[i].Name == group {
			return &file.Roles[i]
		}
	}
	return nil
}

// slot is s[k] when s has it, else def.
func slot[T any](s []T, k int, def T) T {
	if k < len(s) {
		return s[k]
	}
	return def
}

// resize is a copy of s cut, or padded with zero values, to n entries.
func resize[T any](s []T, n int) []T {
	out := make([]T, n)
	copy(out, s)
	return out
}

// Check applies the profile rules that need the whole profile (the ones a
// load applies after reading every key) to a profile changed in memory.
func (p *Profile) Check() Errors {
	p.warnings = nil // validate finds them all again
	l := &loader{file: p.Path, pos: p.pos}
	l.validate(p)
	return l.errs.sorted()
}

// FreeGPUs picks sets of per GPUs each for n new replicas among the host's
// GPUs (by index) that no local role of plan uses; host nil means the
// host's GPUs are unknown.
func FreeGPUs(host []GPU, plan *Plan, n, per int) ([][]string, error) {
	if n == 0 {
		return nil, nil
	}
	if host == nil {
		return nil, fmt.Errorf("the host's GPUs are unknown (no NVML or nvidia-smi reading): name them with --gpus")
	}
	used := map[string]bool{}
	for _, r := range plan.Roles {
		if !r.Local {
			continue
		}
		for _, g := range r.GPUs {
			if id, ok := ResolveGPU(g, host); ok {
				used[id] = true
			}
		}
	}
	var free []string
	idx := append([]GPU(nil), host...)
	sort.Slice(idx, func(i, j int) bool { return idx[i].Index < idx[j].Index })
	for _, g := range idx {
		if id, ok := ResolveGPU(strconv.Itoa(g.Index), host); ok && !used[id] {
			free = append(free, strconv.Itoa(g.Index))
		}
	}
	if len(free) < n*per {
		return nil, fmt.Errorf("%d new replica(s) need %d free GPU(s) (%d each); free now: %s", n, n*per, per, listOrNone(free))
	}
	return SplitGPUs(free[:n*per], per), nil
}

// SplitGPUs cuts a list of GPUs into sets of per.
func SplitGPUs(gpus []string, per int) [][]string {
	var out [][]string
	for i := 0; per > 0 && i+per <= len(gpus); i += per {
		out = append(out, append([]string(nil), gpus[i:i+per]...))
	}
	return out
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// Revision names an applied profile: the file's bytes and the scale
// changes made to it since (`tsd status --json` profile_revision). Twelve
// hex digits of SHA-256, like a short commit.
func Revision(source []byte, scaled string) string {
	h := sha256.New()
	h.Write(source)
	if scaled != "" {
		h.Write([]byte("\x00scale\x00" + scaled))
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// LocalPorts is every TCP port on this host the plan binds or has its
// engines bind: the gateway's, handshakes, bootstrap ports and port
// clusters of local roles.
func (p *Plan) LocalPorts() []int {
	var out []int
	if n := addrPort(p.Gateway.Listen); n > 0 {
		out = append(out, n)
	}
	for _, w := range p.Gateway.Workers {
		for _, a := range []string{w.Handshake, w.Bootstrap} {
			if n := addrPort(a); n > 0 {
				out = append(out, n)
			}
		}
	}
	for _, r := range p.Roles {
		if !r.Local {
			continue
		}
		out = append(out, r.PortCluster...)
		out = append(out, r.KVEvents.Ports()...)
		if r.BootstrapPort > 0 {
			out = append(out, r.BootstrapPort)
		}
	}
	return out
}

// ReadSource reads a profile file for Parse, bounded like Load (a file
// past MaxProfileBytes is refused by Parse, never read whole).
func ReadSource(path string) ([]byte, error) { return readProfile(path) }
