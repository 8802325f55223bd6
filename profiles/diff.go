package profiles

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The diff of two plans (docs/architecture.md §4.3): what `tsd apply`
// and `tsd scale` do to a running deployment, instance by instance, and
// which gateway settings change in place. A pure function of the running
// plan and the new one (planned with HostFacts.Running, so every address
// the profile leaves to the planner is where it was); `tsd apply
// --dry-run` prints exactly this.

// What happens to one instance.
const (
	// ActionStart: a new instance; the gateway binds its sockets, then it starts.
	ActionStart = "start"
	// ActionStop: an instance that goes; drained, stopped, its sockets unbound.
	ActionStop = "stop"
	// ActionRestart: its engine changes (Fields); drained, stopped and
	// started again, replicas one at a time, each ready before the next.
	ActionRestart = "restart"
	// ActionUpdate: only how tsd supervises it changes (restart policy,
	// stall action); the process is not touched.
	ActionUpdate = "update"
	// ActionRename: only its name changes (Was → Name); the same process
	// keeps its socket path, ports and log file.
	ActionRename = "rename"
	// ActionUnchanged: nothing changes; it is never touched.
	ActionUnchanged = "unchanged"
)

// FieldChange is one setting that differs, values as shown (secrets masked).
type FieldChange struct {
	Field string `json:"field"`
	From  string `json:"from"`
	To    string `json:"to"`
}

func (f FieldChange) String() string {
	if f.Field == "argv" {
		return "argv: " + argvText(f.From, f.To)
	}
	return f.Field + ": " + noneIfEmpty(f.From) + " → " + noneIfEmpty(f.To)
}

func argvText(removed, added string) string {
	var parts []string
	if removed != "" {
		parts = append(parts, "-["+removed+"]")
	}
	if added != "" {
		parts = append(parts, "+["+added+"]")
	}
	return strings.Join(parts, " ")
}

func noneIfEmpty(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// RoleChange is what happens to one instance.
type RoleChange struct {
	Action string `json:"action"`
	// Name is the instance's name in the new plan (a stopped one: its
	// running name); Was its running name when it is renamed (with any
	// action but start and stop).
	Name   string        `json:"name"`
	Was    string        `json:"was,omitempty"`
	Kind   string        `json:"kind"`
	Group  string        `json:"group"`
	Fields []FieldChange `json:"fields,omitempty"` // restart, update: what differs
}

// PlanDiff is the whole change from a running plan to a new one.
type PlanDiff struct {
	// Roles: the new plan's instances in its order, then the running
	// ones that stop.
	Roles []RoleChange `json:"roles"`
	// Gateway: settings the gateway takes live, in place.
	Gateway []FieldChange `json:"gateway,omitempty"`
	// Fixed: settings a running deployment cannot change; an apply with
	// any refuses and changes nothing.
	Fixed []FieldChange `json:"fixed,omitempty"`
	// Refused: what the apply would leave unable to work as asked, each
	// with its fix (kvAwareRefusals); an apply with any refuses too.
	Refused []string `json:"refused,omitempty"`
}

// Changes reports whether applying the diff would do anything.
func (d PlanDiff) Changes() bool {
	if len(d.Gateway) > 0 || len(d.Fixed) > 0 || len(d.Refused) > 0 {
		return true
	}
	for _, r := range d.Roles {
		if r.Action != ActionUnchanged {
			return true
		}
	}
	return false
}

// Count is how many instances get action.
func (d PlanDiff) Count(action string) int {
	n := 0
	for _, r := range d.Roles {
		if r.Action == action {
			n++
		}
	}
	return n
}

// Refusal is the error an apply of the diff meets before any step: the
// settings that cannot change on a running deployment; nil when there are
// none.
func (d PlanDiff) Refusal() error {
	var errs []string
	if len(d.Fixed) > 0 {
		var lines []string
		for _, f := range d.Fixed {
			lines = append(lines, f.String())
		}
		errs = append(errs, "these settings cannot change on a running deployment (stop it and tsd up the profile again): "+strings.Join(lines, "; "))
	}
	errs = append(errs, d.Refused...)
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "\n"))
}

// Lines is the diff as `tsd apply` prints it: one line per instance
// (name, action, why), then one per live gateway setting, then the
// refusals.
func (d PlanDiff) Lines() []string {
	w := len("gateway")
	for _, r := range d.Roles {
		w = max(w, len(r.Name))
	}
	var out []string
	for _, r := range d.Roles {
		line := fmt.Sprintf("%-*s  %-9s", w, r.Name, r.Action)
		var why []string
		if r.Was != "" {
			why = append(why, "was "+r.Was)
			if r.Action == ActionRename {
				why = append(why, "same process, socket, ports and log")
			}
		}
		for _, f := range r.Fields {
			why = append(why, f.String())
		}
		if len(why) > 0 {
			line += "  " + strings.Join(why, "; ")
		}
		out = append(out, strings.TrimRight(line, " "))
	}
	for _, f := range d.Gateway {
		out = append(out, fmt.Sprintf("%-*s  %-9s  %s", w, "gateway", "live", f))
	}
	for _, f := range d.Fixed {
		out = append(out, fmt.Sprintf("%-*s  %-9s  %s", w, "refused", "fixed", f))
	}
	for _, r := range d.Refused {
		out = append(out, fmt.Sprintf("%-*s  %-9s  %s", w, "refused", "kv_aware", r))
	}
	return out
}

// Summary is one line: how many instances get each action.
func (d PlanDiff) Summary() string {
	var parts []string
	for _, a := range []string{ActionStart, ActionStop, ActionRestart, ActionUpdate, ActionRename, ActionUnchanged} {
		if n := d.Count(a); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, a))
		}
	}
	if n := len(d.Gateway); n > 0 {
		parts = append(parts, fmt.Sprintf("%d live gateway setting(s)", n))
	}
	if n := len(d.Fixed) + len(d.Refused); n > 0 {
		parts = append(parts, fmt.Sprintf("%d refused", n))
	}
	if len(parts) == 0 {
		return "nothing to change"
	}
	return strings.Join(parts, ", ")
}

// Diff is what changes from the running plan to next, instance by
// instance: an instance of next continues the running instance of the
// same profile entry and replica index on the same host (RolePlan.Continues);
// running instances nothing continues stop. next should be planned with
// HostFacts.Running = running, so that what the profile leaves to the
// planner compares equal.
func Diff(running, next *Plan) PlanDiff {
	d := PlanDiff{Roles: []RoleChange{}}
	used := make([]bool, len(running.Roles))
	for i := range next.Roles {
		n := &next.Roles[i]
		rc := RoleChange{Action: ActionStart, Name: n.Name, Kind: n.Kind, Group: n.Group}
		k, ok := n.ReplicaIndex()
		for j := range running.Roles {
			o := &running.Roles[j]
			if used[j] || !ok || !o.Continues(n.Group, k, n.Local, n.Host) {
				continue
			}
			used[j] = true
			rc.Action = ActionRename
			if o.Name != n.Name {
				rc.Was = o.Name
			}
			if f := engineChanges(o, n); len(f) > 0 {
				rc.Action, rc.Fields = ActionRestart, f
			} else if f := superviseChanges(o, n); len(f) > 0 {
				rc.Action, rc.Fields = ActionUpdate, f
			} else if rc.Was == "" {
				rc.Action = ActionUnchanged
			}
			break
		}
		d.Roles = append(d.Roles, rc)
	}
	for j := range running.Roles {
		if !used[j] {
			o := &running.Roles[j]
			d.Roles = append(d.Roles, RoleChange{Action: ActionStop, Name: o.Name, Kind: o.Kind, Group: o.Group})
		}
	}
	d.Gateway, d.Fixed = gatewayChanges(running, next)
	d.Refused = kvAwareRefusals(running, next)
	return d
}

// kvAwareRefusals: kv_aware routes on the engines' own KV events
// (docs/profiles.md "KV events"). An apply that turns it on, or keeps it
// while turning an engine's events off, must leave every prefill
// publishing; one that would not (kv_events: false) would say done and
// then route that engine by cache_aware for good, so it is refused with
// the key to set. Local engines whose argv lacks --kv-events-config are
// restarted by the apply itself (the planner gives them the flag); a
// remote one is restarted by its operator with the command tsd plan
// --running prints, and shows as routed by cache_aware until then.
func kvAwareRefusals(running, next *Plan) []string {
	var out []string
	for i := range next.Roles {
		n := &next.Roles[i]
		k := kindOf(n.Kind)
		if !k.KVEvents || n.KVEvents != nil || k.PolicyOf(next.Gateway.Policy) != PolicyKVAware {
			continue
		}
		if k.PolicyOf(running.Gateway.Policy) == PolicyKVAware {
			if o, ok := running.Role(n.Name); ok && o.KVEvents == nil {
				continue // it published none before this apply either
			}
		}
		out = append(out, fmt.Sprintf("gateway.policy.%s kv_aware routes on the engines' KV events, but %s will publish none (its profile entry %q says kv_events: false): remove kv_events: false there (the engine restarts with --kv-events-config), or keep the %s policy", n.Kind, n.Name, n.Group, n.Kind))
	}
	return out
}

// roleField is one engine setting of a RolePlan as the diff shows it.
type roleField struct {
	name string
	get  func(r *RolePlan) string
}

// engineFields are the settings whose change needs the engine restarted.
// argv and env are compared on their own (token and key diffs); the
// port cluster, the bootstrap port and the device variable follow from
// fields listed here.
var engineFields = []roleField{
	{"kind", func(r *RolePlan) string { return r.Kind }},
	{"host", func(r *RolePlan) string { return r.Host }},
	{"gpus", func(r *RolePlan) string { return strings.Join(r.GPUs, ",") }},
	{"tp", func(r *RolePlan) string { return strconv.Itoa(r.TP) }},
	{"dp", func(r *RolePlan) string { return strconv.Itoa(r.DP) }},
	{"engine_index", func(r *RolePlan) string { return strconv.Itoa(r.EngineIndex) }},
	{"gpu_memory_utilization", func(r *RolePlan) string { return fmtFloat(r.GPUMemoryUtilization) }},
	{"ib_device", func(r *RolePlan) string { return r.IBDevice }},
	{"worker", func(r *RolePlan) string { return r.Worker }},
	{"handshake", func(r *RolePlan) string { return r.Handshake }},
	{"dist_init_addr", func(r *RolePlan) string { return r.DistInitAddr }},
	{"bootstrap", func(r *RolePlan) string { return r.Bootstrap }},
	{"log_file", func(r *RolePlan) string { return r.LogFile }},
}

func fmtFloat(f float64) string {
	if f == 0 {
		return ""
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// engineChanges lists what differs between two runs of one instance that
// needs its engine restarted.
func engineChanges(o, n *RolePlan) []FieldChange {
	var out []FieldChange
	for _, f := range engineFields {
		if a, b := f.get(o), f.get(n); a != b {
			out = append(out, FieldChange{Field: f.name, From: a, To: b})
		}
	}
	if removed, added := argvDiff(MaskArgv(o.Argv), MaskArgv(n.Argv)); removed != "" || added != "" {
		out = append(out, FieldChange{Field: "argv", From: removed, To: added})
	}
	keys := map[string]bool{}
	for k := range o.Env {
		keys[k] = true
	}
	for k := range n.Env {
		keys[k] = true
	}
	var names []string
	for k := range keys {
		if k == "CUDA_VISIBLE_DEVICES" || k == "ASCEND_RT_VISIBLE_DEVICES" {
			continue // gpus says it
		}
		a, okA := o.Env[k]
		b, okB := n.Env[k]
		if a != b || okA != okB {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		a, b := o.Env[k], n.Env[k]
		if SecretName(k) {
			a, b = maskSet(a), maskSet(b)
			if a == b {
				b += " (changed)"
			}
		}
		out = append(out, FieldChange{Field: "env." + k, From: a, To: b})
	}
	return out
}

// superviseChanges lists what differs in how tsd supervises the instance
// (its restart policy and stall action): taken without a restart.
func superviseChanges(o, n *RolePlan) []FieldChange {
	out := structChanges("restart", reflect.ValueOf(o.Restart), reflect.ValueOf(n.Restart))
	if o.StallAction != n.StallAction {
		out = append(out, FieldChange{Field: "stall_action", From: o.StallAction, To: n.StallAction})
	}
	return out
}

// structChanges compares two structs field by field (by JSON name).
func structChanges(prefix string, a, b reflect.Value) []FieldChange {
	var out []FieldChange
	t := a.Type()
	for i := 0; i < t.NumField(); i++ {
		name := jsonName(t.Field(i))
		if name == "" {
			continue
		}
		x, y := showValue(a.Field(i)), showValue(b.Field(i))
		if x != y {
			out = append(out, FieldChange{Field: prefix + "." + name, From: x, To: y})
		}
	}
	return out
}

func jsonName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	name, _, _ := strings.Cut(tag, ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	if name == "" {
		name = f.Name
	}
	return name
}

// showValue prints one setting's value for the diff.
func showValue(v reflect.Value) string {
	if s, ok := v.Interface().(fmt.Stringer); ok && v.Kind() != reflect.Struct {
		return s.String()
	}
	if d, ok := v.Interface().(time.Duration); ok {
		return d.String()
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int64, reflect.Int32:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Float64, reflect.Float32:
		return strconv.FormatFloat(v.Float(), 'f', -1, 64)
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = showValue(v.Index(i))
		}
		return strings.Join(parts, ",")
	}
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return fmt.Sprint(v.Interface())
	}
	return string(b)
}

// How a running deployment takes a change of each gateway setting
// (GatewayPlan, by JSON name): live settings apply in place with no
// request lost (docs/architecture.md §4.3); fixed ones need a new `tsd
// up`; skip ones are not settings (the workers follow the roles). Every
// field of GatewayPlan must have a row (TestGatewayFieldsClassified), so
// a new setting is a decision, not an accident.
var gatewaySettings = map[string]string{
	"listen":           settingFixed,
	"url":              settingFixed,
	"mode":             settingFixed,
	"policy":           settingLive,
	"api_key_env":      settingLive,
	"bootstrap_server": settingFixed,
	"image_urls":       settingFixed,
	"stall_timeout":    settingFixed,
	"queue_timeout":    settingLive,
	"image_url_allow":  settingFixed,
	"metrics_public":   settingLive,
	"max_concurrent":   settingLive,
	"cors_origins":     settingLive,
	"tool_call_parser": settingFixed,
	"reasoning_parser": settingFixed,
	"log_file":         settingFixed,
	"retry":            settingLive,
	"cache_aware":      settingLive, // the routing policies' knobs: the router keeps unchanged pools' state
	"kv_aware":         settingLive,
	"prefix_hash":      settingLive,
	"manual":           settingLive,
	"bucket":           settingLive,
	"circuit_breaker":  settingLive,
	"admission":        settingLive, // the queue takes new bounds; requests waiting stay
	"api_keys":         settingLive, // names, variables, limits, priorities (their values: the apply's environment)
	"workers":          settingSkip,
	// How requests split between prefill → decode and aggregated
	// engines: the route decision reads them per request.
	"disaggregation": settingLive,
	"conditional":    settingLive,
	// A new exporter is built and the old one flushed and shut down.
	"tracing": settingLive,

	// The cache is built with the front ends, once: a new size takes a
	// new `tsd up`.
	"tokenizer_cache_mb": settingFixed,
}

// How a change of each plan-wide field is taken (Plan, by JSON name); the
// roles and the gateway are compared on their own.
var planSettings = map[string]string{
	"name":              settingSkip, // the deployment keeps the name it runs under
	"profile_path":      settingSkip, // recorded; another file may describe the deployment
	"model":             settingFixed,
	"tokenizer":         settingFixed,
	"served_model_name": settingFixed,
	"run_dir":           settingFixed,
	"log_dir":           settingFixed,
	"log_max_mb":        settingFixed, // the log files are opened at start
	"log_keep":          settingFixed,
	"control_socket":    settingFixed,
	"accelerator":       settingFixed,
	"intranode_nvlink":  settingSkip, // a preflight acknowledgement; the env it is about is in each role's
	"transfer_backend":  settingSkip, // in every role's argv, which restarts
	"launcher":          settingFixed,
	"slurm_job":         settingFixed,
	"gateway":           settingSkip,
	"roles":             settingSkip,
	"warnings":          settingSkip,
	// The SLO planner reads its targets and bounds at each interval: a
	// change takes effect at the next one, no engine touched.
	"slo": settingLive,
}

const (
	settingLive  = "live"
	settingFixed = "fixed"
	settingSkip  = "skip"
)

// gatewayChanges splits what differs in the plan-wide and gateway
// settings into what the gateway takes live and what cannot change. A
// field without a row counts as fixed.
func gatewayChanges(running, next *Plan) (live, fixed []FieldChange) {
	collect := func(prefix string, table map[string]string, a, b reflect.Value) {
		t := a.Type()
		for i := 0; i < t.NumField(); i++ {
			name := jsonName(t.Field(i))
			how := table[name]
			if name == "" || how == settingSkip {
				continue
			}
			fa, fb := a.Field(i), b.Field(i)
			var changes []FieldChange
			if fa.Kind() == reflect.Pointer && !fa.IsNil() && !fb.IsNil() && fa.Elem().Kind() == reflect.Struct {
				fa, fb = fa.Elem(), fb.Elem() // both set: field by field
			}
			if fa.Kind() == reflect.Struct {
				changes = structChanges(prefix+name, fa, fb)
			} else if x, y := showValue(fa), showValue(fb); x != y {
				changes = []FieldChange{{Field: prefix + name, From: x, To: y}}
			}
			if how == settingLive {
				live = append(live, changes...)
			} else {
				fixed = append(fixed, changes...)
			}
		}
	}
	collect("", planSettings, reflect.ValueOf(*running), reflect.ValueOf(*next))
	collect("gateway.", gatewaySettings, reflect.ValueOf(running.Gateway), reflect.ValueOf(next.Gateway))
	return live, fixed
}

// argvDiff is the tokens of a that b lacks and of b that a lacks, in
// order (a longest-common-subsequence diff), each joined by spaces.
func argvDiff(a, b []string) (removed, added string) {
	// Compared flag by flag: a flag with its values is one unit, so a
	// changed value shows with its flag's name (-[--x 1] +[--x 2]).
	a, b = argvUnits(a), argvUnits(b)
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var rm, ad []string
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			rm = append(rm, a[i])
			i++
		default:
			ad = append(ad, b[j])
			j++
		}
	}
	rm = append(rm, a[i:]...)
	ad = append(ad, b[j:]...)
	return strings.Join(rm, " "), strings.Join(ad, " ")
}

// argvUnits groups an argv into what a reader compares: each flag
// ("-x", "--x", "--x=v") with the values that follow it (up to the next
// flag), and each other word alone (the command, a positional). A
// negative number is a value, not a flag.
func argvUnits(argv []string) []string {
	var out []string
	flag := false
	for _, t := range argv {
		isFlag := strings.HasPrefix(t, "-") && len(t) > 1 && !(t[1] >= '0' && t[1] <= '9' || t[1] == '.')
		if !isFlag && flag && len(out) > 0 {
			out[len(out)-1] += " " + t
			continue
		}
		out = append(out, t)
		flag = isFlag
	}
	return out
}

// maskSet shows a secret's value as set or not, never the value.
func maskSet(v string) string {
	if v == "" {
		return ""
	}
	return Masked
}
