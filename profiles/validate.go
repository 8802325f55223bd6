package profiles

import (
	"fmt"
	"strconv"
	"strings"
)

// at names the key path and its position, falling back to the closest
// written ancestor (a defaulted key has no line of its own).
func (p *Profile) at(key string) (Pos, string) {
	for k := key; ; {
		if pos, ok := p.pos[k]; ok {
			return pos, key
		}
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			if pos, ok := p.pos[""]; ok {
				return pos, key
			}
			return Pos{}, key
		}
		k = k[:i]
	}
}

// errAt builds an error for key (see at).
func (p *Profile) errAt(key, format string, args ...any) *Error {
	pos, k := p.at(key)
	return &Error{File: p.Path, Pos: pos, Key: k, Msg: fmt.Sprintf(format, args...)}
}

// ErrorAt is an error pinned to key's line (or its closest written
// ancestor's), for checks made outside this package (e.g. `tsd validate`
// loading the tokenizer).
func (p *Profile) ErrorAt(key, format string, args ...any) *Error {
	return p.errAt(key, format, args...)
}

// Written reports whether key is written in the file (not defaulted).
func (p *Profile) Written(key string) bool {
	_, ok := p.pos[key]
	return ok
}

// Where returns "file:line:col" of a key path, for messages that point at a
// second place.
func (p *Profile) Where(key string) string {
	pos, _ := p.at(key)
	if pos.Line == 0 {
		return p.Path
	}
	return fmt.Sprintf("%s:%d:%d", p.Path, pos.Line, pos.Col)
}

// Instance names a role's replica i: the role's name when it has one
// replica, else name-i.
func (r *Role) Instance(i int) string {
	if r.Replicas <= 1 {
		return r.Name
	}
	return fmt.Sprintf("%s-%d", r.Name, i)
}

// validate applies the rules of docs/profiles.md that need the whole
// profile but no plan (ports and handshakes are checked by the planner).
func (l *loader) validate(p *Profile) {
	add := func(e *Error) { l.errs = append(l.errs, e) }
	names := map[string]string{} // instance → key path of its name
	devs := deviceUses{}
	kinds := map[string]int{}
	kindsKnown := true // a bad kind already has its error; skip rules that count kinds
	for i := range p.Roles {
		r := &p.Roles[i]
		rk := fmt.Sprintf("roles[%d]", i)
		kinds[r.Kind]++
		if _, ok := KindOf(r.Kind); !ok {
			kindsKnown = false
		}
		for k := 0; k < r.Replicas; k++ {
			inst := r.Instance(k)
			if r.Name == "" {
				continue
			}
			if prev, dup := names[inst]; dup {
				add(p.errAt(rk+".name", "duplicate role instance name %q (also at %s)", inst, p.Where(prev)))
				continue
			}
			names[inst] = rk + ".name"
		}
		for _, e := range roleRuleErrors(p, r, rk) {
			add(e)
		}
		for _, e := range roleGPUErrors(p, r, rk, &devs) {
			add(e)
		}
	}
	l.errs = append(l.errs, engineArgsOverride(p)...)
	l.errs = append(l.errs, sloErrors(p)...)
	for _, v := range devs.verdicts() {
		if v.err {
			add(p.errAt(v.use.key, "%s", v.msg))
		} else {
			p.warnings = append(p.warnings, p.errAt(v.use.key, "%s", v.msg))
		}
	}
	if len(p.Roles) > 0 && kindsKnown {
		l.errs = append(l.errs, layoutErrors(p, kinds)...)
	}
	if p.Gateway.Mode == ModeEPD && kinds[KindEncode] == 0 && kindsKnown {
		add(p.errAt("gateway.mode", "epd mode needs an encode role (add one with kind: encode, or use mode: pd)"))
	}
}

// layoutRule is one shape a profile's roles may take, and the
// gateway.disaggregation it defaults to.
type layoutRule struct {
	pd, agg bool   // prefill and decode roles; aggregated roles
	def     string // default of gateway.disaggregation; "" = the profile must say
}

// layoutRules are the shapes a profile may have (docs/profiles.md
// "Layouts"): PD (or EPD), aggregated only, or both side by side. Encode
// roles come on top of PD: they feed the prefill → decode route only.
var layoutRules = []layoutRule{
	{pd: true, def: DisaggAlways},
	{agg: true, def: DisaggNever},
	{pd: true, agg: true},
}

// disaggNeeds is what each gateway.disaggregation routes to: the layouts
// it needs roles for.
var disaggNeeds = map[string]struct{ pd, agg bool }{
	DisaggAlways:      {pd: true},
	DisaggNever:       {agg: true},
	DisaggConditional: {pd: true, agg: true},
}

// layoutErrors checks the role kinds against one another and against
// gateway.disaggregation, and resolves its default into p (warnings for
// roles a setting leaves without work go to p.warnings).
func layoutErrors(p *Profile, kinds map[string]int) []*Error {
	var out []*Error
	pre, dec, agg := kinds[KindPrefill] > 0, kinds[KindDecode] > 0, kinds[KindAggregated] > 0
	switch {
	case pre && !dec:
		out = append(out, p.errAt("roles", "no decode role: prefill roles need at least one role with kind: decode (prefill and decode come together, or use kind: aggregated)"))
	case dec && !pre:
		out = append(out, p.errAt("roles", "no prefill role: decode roles need at least one role with kind: prefill (prefill and decode come together, or use kind: aggregated)"))
	case !pre && !dec && !agg:
		out = append(out, p.errAt("roles", "no prefill, decode or aggregated role: a profile serves with aggregated roles, or with at least one prefill and one decode role"))
	}
	if len(out) > 0 {
		return out
	}
	pd := pre && dec
	key := "gateway.disaggregation"
	d := p.Gateway.Disaggregation
	if d == "" {
		for _, r := range layoutRules {
			if r.pd == pd && r.agg == agg {
				d = r.def
			}
		}
		if d == "" {
			return append(out, p.errAt(key, "missing: this profile has aggregated roles beside prefill and decode roles, so it must say how requests split: always (prefill → decode), never (aggregated) or conditional (per request, by gateway.conditional)"))
		}
		p.Gateway.Disaggregation = d
	}
	need := disaggNeeds[d]
	switch {
	case need.pd && !pd:
		out = append(out, p.errAt(key, "%s sends requests prefill → decode, but the profile has no prefill and decode roles (add them, or use never)", d))
	case need.agg && !agg:
		out = append(out, p.errAt(key, "%s sends requests to aggregated engines, but the profile has no role with kind: aggregated (add one, or use always)", d))
	case d == DisaggNever && kinds[KindEncode] > 0:
		out = append(out, p.errAt(key, "never sends every request to an aggregated engine, but encode roles feed the prefill → decode route only: images would have nowhere to go (use conditional, which sends image requests prefill → decode, or drop the encode roles)"))
	case !need.agg && agg:
		p.warnings = append(p.warnings, p.errAt(key, "%s: the aggregated role(s) start but get no work", d))
	case !need.pd && pd:
		p.warnings = append(p.warnings, p.errAt(key, "%s: the prefill and decode role(s) start but get no work", d))
	}
	return out
}

// engineArgsOverride refuses --gpu-memory-utilization in engine.args when
// a role sets gpu_memory_utilization: engine.args come after the planned
// flags and argparse keeps the last, so the role's fraction would be
// silently replaced.
func engineArgsOverride(p *Profile) []*Error {
	var out []*Error
	for i, a := range p.Engine.Args {
		if name, _, _ := strings.Cut(a, "="); name != "--gpu-memory-utilization" {
			continue
		}
		for k := range p.Roles {
			if p.Roles[k].GPUMemoryUtilization > 0 {
				out = append(out, p.errAt(fmt.Sprintf("engine.args[%d]", i), "--gpu-memory-utilization here would override roles[%d].gpu_memory_utilization (the last copy wins); set the key on each role instead", k))
				break
			}
		}
	}
	return out
}

// roleRuleErrors are the rules of one role that need no other role.
func roleRuleErrors(p *Profile, r *Role, rk string) []*Error {
	var out []*Error
	if k, ok := KindOf(r.Kind); ok && k.MaxDP > 0 && r.DP > k.MaxDP {
		out = append(out, p.errAt(rk+".dp", "%s cannot use data parallelism (TokenSpeed refuses --disaggregation-mode %s with dp > %d)", anKind(r.Kind), k.Mode, k.MaxDP))
	}
	if !r.Local() && r.Workers != nil {
		for k, w := range r.Workers {
			if w == "" {
				out = append(out, p.errAt(rk+".host", "role runs on host %q, so it needs worker: tcp://GATEWAY_HOST:PORT (replica %d has none; tsd cannot reach it over ipc)", r.Host, k))
				break
			}
		}
	}
	return out
}

// roleGPUErrors checks each replica's GPU list (count, repeats) and
// records its GPUs in devs, which refuses accidental sharing.
func roleGPUErrors(p *Profile, r *Role, rk string, devs *deviceUses) []*Error {
	var out []*Error
	want := r.TP * r.DP
	for k, set := range r.GPUs {
		key := replicaKey(rk+".gpus", k, r.Replicas)
		if len(set) != want {
			out = append(out, p.errAt(key, "%d GPU(s) listed but tp × dp = %d × %d = %d", len(set), r.TP, r.DP, want))
		}
		seen := map[string]bool{}
		for _, g := range set {
			if seen[g] {
				out = append(out, p.errAt(key, "GPU %s is listed twice", g))
				continue
			}
			seen[g] = true
			use := deviceUse{key: key, inst: r.Instance(k), frac: r.GPUMemoryUtilization}
			machine := r.Host
			if r.Node >= 0 {
				// node: places the role on a node of a Slurm job; GPU
				// indices on different nodes are different devices.
				machine += "\x00node" + strconv.Itoa(r.Node)
			} else if len(r.Nodes) > 0 {
				machine += "\x00nodes" + fmt.Sprint(r.Nodes)
			}
			if msg := devs.add(p, machine+"\x00"+g, use); msg != "" {
				hostNote := ""
				if !r.Local() {
					hostNote = " on host " + r.Host
				}
				out = append(out, p.errAt(key, "GPU %s%s %s", g, hostNote, msg))
			}
		}
	}
	return out
}

// Limits of GPU sharing by choice. The fraction is of the device's total
// memory, and each engine also holds a CUDA context, NCCL and activation
// buffers outside it, so sharers that leave under 5% free are warned, and
// fractions over the whole device are refused.
const (
	ShareWarnAbove  = 0.95
	ShareErrorAbove = 1.0
)

// deviceUse is one role instance on one device.
type deviceUse struct {
	key, inst string
	frac      float64 // gpu_memory_utilization, 0 = not set
}

// deviceUses collects the users of each device (keyed by host and id) in
// profile order.
type deviceUses struct {
	order []string
	users map[string][]deviceUse
}

// add records u on device id and says why it may not share it: a role
// without gpu_memory_utilization on a device someone else uses, or a role
// with it on a device used by one without. The message reads after "GPU
// N".
func (d *deviceUses) add(p *Profile, id string, u deviceUse) string {
	if d.users == nil {
		d.users = map[string][]deviceUse{}
	}
	prev := d.users[id]
	if len(prev) == 0 {
		d.order = append(d.order, id)
		d.users[id] = []deviceUse{u}
		return ""
	}
	first := prev[0]
	var bare *deviceUse
	for i := range prev {
		if prev[i].frac == 0 {
			bare = &prev[i]
			break
		}
	}
	switch {
	case u.frac == 0:
		return fmt.Sprintf("is already used by %s (%s); engines must not share a GPU by accident: to share it on purpose, set gpu_memory_utilization on every role that uses it (fractions summing to at most %.2f), or give roles on different machines different host: values", first.inst, p.Where(first.key), ShareWarnAbove)
	case bare != nil:
		return fmt.Sprintf("is already used by %s (%s), which sets no gpu_memory_utilization; set it there too to share this GPU", bare.inst, p.Where(bare.key))
	}
	d.users[id] = append(prev, u)
	return ""
}

// shareVerdict is one finding about a shared device's fractions.
type shareVerdict struct {
	use deviceUse // the last user, where the message points
	err bool
	msg string
}

// verdicts sums the fractions on every device shared by choice: above
// ShareErrorAbove is an error, above ShareWarnAbove a warning.
func (d *deviceUses) verdicts() []shareVerdict {
	var out []shareVerdict
	for _, id := range d.order {
		us := d.users[id]
		if len(us) < 2 {
			continue
		}
		sum := 0.0
		parts := make([]string, len(us))
		for i, u := range us {
			sum += u.frac
			parts[i] = fmt.Sprintf("%s %g", u.inst, u.frac)
		}
		_, dev, _ := strings.Cut(id, "\x00")
		last := us[len(us)-1]
		switch {
		case sum > ShareErrorAbove+1e-9:
			out = append(out, shareVerdict{last, true, fmt.Sprintf("GPU %s is shared (%s): gpu_memory_utilization sums to %.2f, more than the whole GPU; lower them to at most %.2f together", dev, strings.Join(parts, ", "), sum, ShareWarnAbove)})
		case sum > ShareWarnAbove+1e-9:
			out = append(out, shareVerdict{last, false, fmt.Sprintf("GPU %s is shared (%s): gpu_memory_utilization sums to %.2f; each engine also needs memory outside its fraction (CUDA context, buffers), so keep the sum at most %.2f", dev, strings.Join(parts, ", "), sum, ShareWarnAbove)})
		}
	}
	return out
}
