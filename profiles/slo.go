package profiles

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// The profile's slo: (docs/profiles.md "The SLO planner"): the latency
// targets the planner holds and the bounds it moves replicas within. The
// keys are rows of sloSection (schema.go); this file holds the types, the
// rules that need the whole profile, and the plan's form.

// SLO modes.
const (
	// SLOAdvise: the planner decides and shows its proposal; it changes nothing.
	SLOAdvise = "advise"
	// SLOAct: the planner carries its proposals out, through the steps of tsd scale.
	SLOAct = "act"
)

// SLO is a profile's slo:, defaults applied. Nil on a Profile: no planner.
type SLO struct {
	TTFTP90  time.Duration // 0: time to first token is not a target
	ITLP90   time.Duration // 0: inter-token latency is not a target
	Mode     string        // SLOAdvise | SLOAct
	Interval time.Duration // one observation and decision per interval
	Cooldown time.Duration // no second change to one role entry sooner
	Window   time.Duration // the predictor's memory (0 before finish: 3 × Interval)
	Breach   int           // consecutive intervals over a target before a move
	Headroom float64       // a donor's predicted share of its target, with one replica fewer, must stay below this
	// GPUs is the set the planner may use; nil: the GPUs the profile's
	// local roles hold.
	GPUs []string
	// Roles bounds each profile entry's replicas (by entry name); an
	// entry not listed has min 1 and no max but the GPU set.
	Roles map[string]SLORole
}

// SLORole is one entry of slo.roles.
type SLORole struct {
	Min int // at least this many replicas (≥ 1: the planner never empties an entry)
	Max int // at most this many; 0: no bound but the GPU set
}

// SLOPlan is slo: as the plan carries it (tsd plan --json `slo`): every
// planned entry with its bounds, the GPU set resolved.
type SLOPlan struct {
	TTFTP90  Duration      `json:"ttft_p90,omitempty"`
	ITLP90   Duration      `json:"itl_p90,omitempty"`
	Mode     string        `json:"mode"`
	Interval Duration      `json:"interval"`
	Cooldown Duration      `json:"cooldown"`
	Window   Duration      `json:"window"`
	Breach   int           `json:"breach"`
	Headroom float64       `json:"headroom"`
	GPUs     []string      `json:"gpus"`
	Roles    []SLORolePlan `json:"roles"`
}

// SLORolePlan is one profile entry the planner may resize.
type SLORolePlan struct {
	Group string `json:"group"` // the profile entry (RolePlan.Group)
	Kind  string `json:"kind"`
	Min   int    `json:"min"`
	Max   int    `json:"max,omitempty"` // 0: no bound but the GPU set
}

// Bounds is the entry group's bounds, and whether the planner resizes it.
func (s *SLOPlan) Bounds(group string) (SLORolePlan, bool) {
	if s == nil {
		return SLORolePlan{}, false
	}
	for _, r := range s.Roles {
		if r.Group == group {
			return r, true
		}
	}
	return SLORolePlan{}, false
}

// sloKinds are the kinds whose replicas the planner moves: encode
// engines feed every image request whatever the load, and stay as written.
var sloKinds = []string{KindPrefill, KindDecode, KindAggregated}

func readSLO(l *loader, f field, p *Profile) {
	s := &SLO{}
	sloSection.setDefaults(s)
	if sloSection.read(l, f, s) {
		p.SLO = s
	}
}

func readSLOGPUs(l *loader, f field, s *SLO) {
	if _, ok := f.n.(*ast.SequenceNode); !ok {
		l.errf(f, "must be a list of GPU indices or UUIDs, e.g. [0, 1, 2, 3]")
		return
	}
	s.GPUs = l.gpuList(f)
	seen := map[string]bool{}
	for _, g := range s.GPUs {
		if seen[g] {
			l.errf(f, "GPU %s is listed twice", g)
			return
		}
		seen[g] = true
	}
}

// readSLORoles reads slo.roles: a mapping of profile entry names, each
// with its min and max (the names are checked against roles: by
// sloErrors, which a scaled profile's Check runs too).
func readSLORoles(l *loader, f field, s *SLO) {
	if isNull(f.n) {
		return
	}
	es, ok := l.entries(f.n, 0)
	if !ok {
		l.errf(f, "must be a mapping of role entry names, e.g. {decode: {min: 1, max: 3}}")
		return
	}
	s.Roles = map[string]SLORole{}
	for _, mv := range es {
		name := scalarText(l.deref(mv.Key))
		path := joinKey(f.path, name)
		kp := nodePos(mv.Key)
		if _, dup := s.Roles[name]; dup {
			l.errAt(kp, path, "duplicate key (first at line %d)", l.pos[path].Line)
			continue
		}
		l.pos[path] = kp
		var r SLORole
		sloRoleSection.setDefaults(&r)
		sloRoleSection.read(l, field{n: l.deref(mv.Value), pos: kp, path: path}, &r)
		s.Roles[name] = r
	}
}

func finishSLO(l *loader, at field, s *SLO, m map[string]field) {
	_, ttft := m["ttft_p90"]
	_, itl := m["itl_p90"]
	if !ttft && !itl {
		l.errf(at, "names no target: set ttft_p90, itl_p90 or both (e.g. ttft_p90: 1s, itl_p90: 50ms)")
	}
	if s.Interval < time.Second {
		l.errf(fieldOr(m, "interval", at), "must be at least 1s, got %s (each interval needs requests enough for a p90)", s.Interval)
	}
	if _, ok := m["window"]; !ok {
		s.Window = 3 * s.Interval
	} else if s.Window < s.Interval {
		l.errf(m["window"], "(%s) is shorter than interval (%s): the predictor needs at least one interval", s.Window, s.Interval)
	}
}

func finishSLORole(l *loader, at field, r *SLORole, m map[string]field) {
	if r.Max > 0 && r.Min > r.Max {
		l.errf(fieldOr(m, "max", at), "(%d) is below min (%d)", r.Max, r.Min)
	}
}

// fieldOr is the key's field when written, else at (for errors about a
// defaulted key).
func fieldOr(m map[string]field, key string, at field) field {
	if f, ok := m[key]; ok {
		return f
	}
	return at
}

// sloErrors are slo:'s rules that need the roles: every entry of
// slo.roles names a profile entry of a kind the planner resizes, whose
// replicas lie within its bounds.
func sloErrors(p *Profile) []*Error {
	s := p.SLO
	if s == nil {
		return nil
	}
	var out []*Error
	names := make([]string, 0, len(s.Roles))
	for n := range s.Roles {
		names = append(names, n)
	}
	sort.Strings(names)
	var entries []string
	for i := range p.Roles {
		entries = append(entries, p.Roles[i].Name)
	}
	for _, name := range names {
		b := s.Roles[name]
		key := "slo.roles." + name
		var r *Role
		for i := range p.Roles {
			if p.Roles[i].Name == name {
				r = &p.Roles[i]
			}
		}
		switch {
		case r == nil:
			out = append(out, p.errAt(key, "the profile has no role entry %q%s (have %s)", name, didYouMean(name, entries), listOrNone(entries)))
		case !contains(sloKinds, r.Kind):
			out = append(out, p.errAt(key, "%s is a %s role: the planner resizes prefill, decode and aggregated entries only", name, r.Kind))
		case !r.Local():
			out = append(out, p.errAt(key, "%s runs on %s: the planner resizes only the roles tsd starts", name, r.Host))
		case r.Replicas < b.Min:
			out = append(out, p.errAt(key+".min", "%s has %d replica(s), fewer than min %d", name, r.Replicas, b.Min))
		case b.Max > 0 && r.Replicas > b.Max:
			out = append(out, p.errAt(key+".max", "%s has %d replica(s), more than max %d", name, r.Replicas, b.Max))
		}
	}
	return out
}

// sloPlan resolves slo: for the plan: the GPU set (by default every GPU
// a local role holds, in index order) and the bounds of every local
// entry of a kind the planner resizes, in profile order.
func sloPlan(p *Profile) *SLOPlan {
	s := p.SLO
	if s == nil {
		return nil
	}
	sp := &SLOPlan{TTFTP90: Duration(s.TTFTP90), ITLP90: Duration(s.ITLP90), Mode: s.Mode,
		Interval: Duration(s.Interval), Cooldown: Duration(s.Cooldown), Window: Duration(s.Window),
		Breach: s.Breach, Headroom: s.Headroom, GPUs: append([]string(nil), s.GPUs...), Roles: []SLORolePlan{}}
	held := s.GPUs == nil
	seen := map[string]bool{}
	for i := range p.Roles {
		r := &p.Roles[i]
		if !r.Local() {
			continue
		}
		if held {
			for _, set := range r.GPUs {
				for _, g := range set {
					if !seen[g] {
						seen[g] = true
						sp.GPUs = append(sp.GPUs, g)
					}
				}
			}
		}
		if !contains(sloKinds, r.Kind) {
			continue
		}
		b, ok := s.Roles[r.Name]
		if !ok {
			b = SLORole{Min: 1}
		}
		sp.Roles = append(sp.Roles, SLORolePlan{Group: r.Name, Kind: r.Kind, Min: b.Min, Max: b.Max})
	}
	if held {
		sort.SliceStable(sp.GPUs, func(i, j int) bool { return gpuLess(sp.GPUs[i], sp.GPUs[j]) })
	}
	return sp
}

// gpuLess orders GPU indices numerically, before UUIDs (by text).
func gpuLess(a, b string) bool {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	switch {
	case errA == nil && errB == nil:
		return x < y
	case errA == nil:
		return true
	case errB == nil:
		return false
	}
	return a < b
}

// String is the targets as one line ("ttft_p90 1s, itl_p90 50ms, act").
func (s *SLOPlan) String() string {
	if s == nil {
		return "none"
	}
	out := ""
	if s.TTFTP90 > 0 {
		out += "ttft_p90 " + s.TTFTP90.String() + ", "
	}
	if s.ITLP90 > 0 {
		out += "itl_p90 " + s.ITLP90.String() + ", "
	}
	return out + fmt.Sprintf("%s every %s", s.Mode, s.Interval)
}
