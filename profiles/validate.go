package profiles

import (
	"fmt"
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

// validate applies the rules of profile.md that need the whole profile but
// no plan (ports and handshakes are checked by the planner).
func (l *loader) validate(p *Profile) {
	add := func(e *Error) { l.errs = append(l.errs, e) }
	names := map[string]string{} // instance → key path of its name
	type gpuUse struct{ key, inst string }
	gpus := map[string]gpuUse{} // host + "\x00" + gpu
	kinds := map[string]int{}
	kindsKnown := true // a bad kind already has its error; skip rules that count kinds
	for i := range p.Roles {
		r := &p.Roles[i]
		rk := fmt.Sprintf("roles[%d]", i)
		kinds[r.Kind]++
		if r.Kind != KindEncode && r.Kind != KindPrefill && r.Kind != KindDecode {
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
		if r.Kind == KindEncode && r.DP > 1 {
			add(p.errAt(rk+".dp", "an encode role cannot use data parallelism (TokenSpeed refuses encode with dp > 1)"))
		}
		if !r.Local() && r.Workers != nil {
			for k, w := range r.Workers {
				if w == "" {
					add(p.errAt(rk+".host", "role runs on host %q, so it needs worker: tcp://GATEWAY_HOST:PORT (replica %d has none; tsd cannot reach it over ipc)", r.Host, k))
					break
				}
			}
		}
		want := r.TP * r.DP
		for k, set := range r.GPUs {
			key := replicaKey(rk+".gpus", k, r.Replicas)
			if len(set) != want {
				add(p.errAt(key, "%d GPU(s) listed but tp × dp = %d × %d = %d", len(set), r.TP, r.DP, want))
			}
			seen := map[string]bool{}
			for _, g := range set {
				if seen[g] {
					add(p.errAt(key, "GPU %s is listed twice", g))
					continue
				}
				seen[g] = true
				id := r.Host + "\x00" + g
				if prev, used := gpus[id]; used {
					hostNote := ""
					if !r.Local() {
						hostNote = " on host " + r.Host
					}
					add(p.errAt(key, "GPU %s%s is already used by %s (%s); engines must not share GPUs (give roles on different machines different host: values)", g, hostNote, prev.inst, p.Where(prev.key)))
					continue
				}
				gpus[id] = gpuUse{key, r.Instance(k)}
			}
		}
	}
	if len(p.Roles) > 0 && kindsKnown {
		if kinds[KindPrefill] == 0 {
			add(p.errAt("roles", "no prefill role: PD serving needs at least one role with kind: prefill"))
		}
		if kinds[KindDecode] == 0 {
			add(p.errAt("roles", "no decode role: PD serving needs at least one role with kind: decode"))
		}
	}
	if p.Gateway.Mode == ModeEPD && kinds[KindEncode] == 0 && kindsKnown {
		add(p.errAt("gateway.mode", "epd mode needs an encode role (add one with kind: encode, or use mode: pd)"))
	}
}
