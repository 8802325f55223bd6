package profiles

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// layoutProfile writes a profile with the given role kinds (one GPU each,
// in order) and gateway lines.
func layoutProfile(gateway string, kinds ...string) string {
	var b strings.Builder
	b.WriteString("model: m\n")
	if gateway != "" {
		b.WriteString("gateway:\n" + gateway)
	}
	b.WriteString("roles:\n")
	for i, k := range kinds {
		fmt.Fprintf(&b, "  - {name: %s%d, kind: %s, gpus: [%d]}\n", k, i, k, i)
	}
	return b.String()
}

// Pins: the layouts a profile may take (docs/profiles.md "Layouts"): which
// role kinds go together, gateway.disaggregation's default for each, what
// each setting needs, and the roles a setting leaves idle (a warning).
func TestLayoutRules(t *testing.T) {
	t.Parallel()
	const (
		P, D, E, A = KindPrefill, KindDecode, KindEncode, KindAggregated
	)
	rows := []struct {
		name   string
		disagg string   // gateway.disaggregation as written ("" = default)
		kinds  []string // roles, one GPU each
		want   string   // resolved disaggregation, when the profile loads
		err    string   // else a substring of the error
		key    string   // and the key it names
		warn   string   // a substring of a warning, if one is expected
	}{
		{name: "pd defaults to always", kinds: []string{P, D}, want: DisaggAlways},
		{name: "epd defaults to always", kinds: []string{E, P, D}, want: DisaggAlways},
		{name: "aggregated only defaults to never", kinds: []string{A, A}, want: DisaggNever},
		{name: "mixed must say", kinds: []string{A, P, D}, err: "missing: this profile has aggregated roles beside prefill and decode roles", key: "gateway.disaggregation"},
		{name: "mixed conditional", disagg: DisaggConditional, kinds: []string{A, A, P, D}, want: DisaggConditional},
		{name: "mixed always leaves aggregated idle", disagg: DisaggAlways, kinds: []string{A, P, D}, want: DisaggAlways, warn: "the aggregated role(s) start but get no work"},
		{name: "mixed never leaves pd idle", disagg: DisaggNever, kinds: []string{A, P, D}, want: DisaggNever, warn: "the prefill and decode role(s) start but get no work"},
		{name: "mixed epd conditional", disagg: DisaggConditional, kinds: []string{E, A, P, D}, want: DisaggConditional},
		{name: "epd never refused", disagg: DisaggNever, kinds: []string{E, A, P, D}, err: "encode roles feed the prefill → decode route only", key: "gateway.disaggregation"},
		{name: "always needs pd", disagg: DisaggAlways, kinds: []string{A}, err: "always sends requests prefill → decode, but the profile has no prefill and decode roles", key: "gateway.disaggregation"},
		{name: "never needs aggregated", disagg: DisaggNever, kinds: []string{P, D}, err: "never sends requests to aggregated engines, but the profile has no role with kind: aggregated", key: "gateway.disaggregation"},
		{name: "conditional needs aggregated", disagg: DisaggConditional, kinds: []string{P, D}, err: "no role with kind: aggregated", key: "gateway.disaggregation"},
		{name: "conditional needs pd", disagg: DisaggConditional, kinds: []string{A}, err: "no prefill and decode roles", key: "gateway.disaggregation"},
		{name: "prefill without decode", kinds: []string{A, P}, err: "no decode role: prefill roles need", key: "roles"},
		{name: "decode without prefill", kinds: []string{A, D}, err: "no prefill role: decode roles need", key: "roles"},
		{name: "encode alone", kinds: []string{E}, err: "no prefill, decode or aggregated role", key: "roles"},
		{name: "encode beside aggregated only", kinds: []string{E, A}, err: "never sends every request to an aggregated engine, but encode roles", key: "gateway.disaggregation"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			gw := ""
			if r.disagg != "" {
				gw = "  disaggregation: " + r.disagg + "\n"
			}
			p, errs := Parse("l.yaml", []byte(layoutProfile(gw, r.kinds...)))
			if r.err != "" {
				if !strings.Contains(errs.Error(), r.err) || !strings.Contains(errs.Error(), ": "+r.key+": ") {
					t.Fatalf("errors %v; want %q naming %s", errs, r.err, r.key)
				}
				return
			}
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			plan, errs := MakePlan(p, fixedFacts())
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if plan.Gateway.Disaggregation != r.want {
				t.Errorf("disaggregation %q, want %q", plan.Gateway.Disaggregation, r.want)
			}
			warned := slices.ContainsFunc(plan.Warnings, func(w string) bool { return r.warn != "" && strings.Contains(w, r.warn) })
			if r.warn != "" && !warned {
				t.Errorf("warnings %q; want %q", plan.Warnings, r.warn)
			}
			if r.warn == "" && slices.ContainsFunc(plan.Warnings, func(w string) bool { return strings.Contains(w, "get no work") }) {
				t.Errorf("unexpected warning %q", plan.Warnings)
			}
		})
	}
}

// Pins: gateway.disaggregation and gateway.conditional read with their
// ranges, errors at the key's line, and the file's values reach the plan
// JSON under the names the gateway reads.
func TestDisaggregationKeys(t *testing.T) {
	t.Parallel()
	bad := []ruleCase{
		{"bad disaggregation", "model: m\ngateway:\n  disaggregation: sometimes #<\nroles:\n  - {name: a, kind: aggregated, gpus: [0]}\n", "gateway.disaggregation", `must be always, never or conditional, got "sometimes"`},
		{"ratio zero", "model: m\ngateway:\n  conditional:\n    max_uncached_ratio: 0 #<\nroles:\n  - {name: a, kind: aggregated, gpus: [0]}\n", "gateway.conditional.max_uncached_ratio", "must be greater than 0 and at most 1"},
		{"ratio above one", "model: m\ngateway:\n  conditional:\n    max_uncached_ratio: 1.5 #<\nroles:\n  - {name: a, kind: aggregated, gpus: [0]}\n", "gateway.conditional.max_uncached_ratio", "at most 1"},
		{"negative tokens", "model: m\ngateway:\n  conditional:\n    max_uncached_tokens: -1 #<\nroles:\n  - {name: a, kind: aggregated, gpus: [0]}\n", "gateway.conditional.max_uncached_tokens", "must be between 0 and"},
		{"negative busy", "model: m\ngateway:\n  conditional:\n    prefill_busy: -5 #<\nroles:\n  - {name: a, kind: aggregated, gpus: [0]}\n", "gateway.conditional.prefill_busy", "must be between 0 and"},
		{"unknown conditional key", "model: m\ngateway:\n  conditional:\n    max_uncached_token: 5 #<\nroles:\n  - {name: a, kind: aggregated, gpus: [0]}\n", "gateway.conditional.max_uncached_token", `did you mean "max_uncached_tokens"?`},
		{"bad aggregated policy", "model: m\ngateway:\n  policy:\n    aggregated: cache-aware #<\nroles:\n  - {name: a, kind: aggregated, gpus: [0]}\n", "gateway.policy.aggregated", `unknown aggregated policy "cache-aware" (did you mean "cache_aware"?)`},
		{"aggregated bootstrap_port", "model: m\nroles:\n  - name: a\n    kind: aggregated\n    gpus: [0]\n    bootstrap_port: 9000 #<\n", "roles[0].bootstrap_port", "an aggregated role has no bootstrap server; bootstrap_port is for encode and prefill roles"},
		{"aggregated bootstrap_host", "model: m\nroles:\n  - name: a\n    kind: aggregated\n    gpus: [0]\n    bootstrap_host: h #<\n", "roles[0].bootstrap_host", "an aggregated role has no bootstrap server"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			errs := loadAndPlan("case.yaml", c.src)
			prefix := fmt.Sprintf("case.yaml:%d:", markedLine(c.src))
			for _, e := range errs {
				if s := e.Error(); strings.HasPrefix(s, prefix) && strings.Contains(s, ": "+c.key+": ") && strings.Contains(s, c.msg) {
					return
				}
			}
			t.Errorf("want %s%s: %s; got %v", prefix, c.key, c.msg, errs)
		})
	}

	src := `model: m
gateway:
  disaggregation: conditional
  conditional: {max_uncached_tokens: 0, max_uncached_ratio: 1, prefill_busy: 4096}
  policy: {aggregated: cache_aware}
roles:
  - {name: agg, kind: aggregated, gpus: [0]}
  - {name: prefill, gpus: [1]}
  - {name: decode, gpus: [2]}
`
	p, errs := Parse("c.yaml", []byte(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	plan, errs := MakePlan(p, fixedFacts())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var buf strings.Builder
	if err := plan.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Gateway struct {
			Disaggregation string         `json:"disaggregation"`
			Conditional    map[string]any `json:"conditional"`
			Policy         map[string]any `json:"policy"`
			CacheAware     map[string]any `json:"cache_aware"`
		} `json:"gateway"`
	}
	if err := json.Unmarshal([]byte(buf.String()), &got); err != nil {
		t.Fatal(err)
	}
	g := got.Gateway
	want := map[string]any{"max_uncached_tokens": 0.0, "max_uncached_ratio": 1.0, "prefill_busy": 4096.0}
	if g.Disaggregation != DisaggConditional || fmt.Sprint(g.Conditional) != fmt.Sprint(want) || g.Policy["aggregated"] != "cache_aware" {
		t.Errorf("plan JSON gateway %+v", g)
	}
	if g.CacheAware == nil {
		t.Error("cache_aware on the aggregated pool does not carry gateway.cache_aware's knobs")
	}

	// The defaults, Dynamo's: 2048 uncached tokens, 0.7 of the prompt, and
	// a prefill never counts busy.
	var gw Gateway
	gatewaySection.setDefaults(&gw)
	if gw.Conditional != (ConditionalPlan{MaxUncachedTokens: 2048, MaxUncachedRatio: 0.7}) || gw.Policy.Aggregated != "round_robin" || gw.Disaggregation != "" {
		t.Errorf("defaults %+v %+v %q", gw.Conditional, gw.Policy, gw.Disaggregation)
	}
}

// Pins: an aggregated role's engine is TokenSpeed's aggregate serving:
// --disaggregation-mode null, no bootstrap port or host, no KV transfer
// flags, no --load-balance-method at dp > 1 (upstream requires one for
// prefill only); everything else as any role's.
func TestAggregatedArgv(t *testing.T) {
	t.Parallel()
	src := `model: /m
engine:
  command: [ts-fake, serve]
  ib_device: mlx5_0
roles:
  - {name: agg, kind: aggregated, gpus: [0, 1], dp: 2}
  - {name: one, kind: aggregated, gpus: [2], tp: 1}
`
	p, errs := Parse("/p/a.yaml", []byte(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	plan, errs := MakePlan(p, fixedFacts())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, r := range plan.Roles {
		argv := strings.Join(r.Argv, " ")
		if !strings.Contains(argv, " --disaggregation-mode null ") {
			t.Errorf("%s: argv %q lacks --disaggregation-mode null", r.Name, argv)
		}
		for _, flag := range []string{"--disaggregation-bootstrap-port", "--load-balance-method", "--disaggregation-transfer-backend", "--disaggregation-ib-device", "--kv-events-config"} {
			if strings.Contains(argv, flag) {
				t.Errorf("%s: argv %q has %s", r.Name, argv, flag)
			}
		}
		if r.Bootstrap != "" || r.BootstrapPort != 0 {
			t.Errorf("%s: bootstrap %q %d", r.Name, r.Bootstrap, r.BootstrapPort)
		}
		w, _ := plan.Gateway.Worker(r.Name)
		if w.Kind != KindAggregated || w.Bootstrap != "" || w.DP != r.DP {
			t.Errorf("%s: worker %+v", r.Name, w)
		}
	}
	if a, _ := plan.Role("agg"); !strings.Contains(strings.Join(a.Argv, " "), "--data-parallel-size 2 --disaggregation-mode null --dist-init-addr") {
		t.Errorf("agg argv %q", a.Argv)
	}
}

// Pins: aggregated engines publish KV events like prefill ones: on under
// gateway.policy.aggregated: kv_aware, or by kv_events: true; a decode's
// still refused.
func TestAggregatedKVEvents(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ gateway, role string }{
		{"  policy: {aggregated: kv_aware}\n", ""},
		{"", ", kv_events: true"},
	} {
		src := "model: /m\ngateway:\n" + c.gateway + "  port: 8000\nroles:\n  - {name: agg, kind: aggregated, gpus: [0]" + c.role + "}\n"
		plan, errs := planText(t, src, HostFacts{})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		r := plan.Roles[0]
		if r.KVEvents == nil || !strings.Contains(strings.Join(r.Argv, " "), "--kv-events-config") || plan.Gateway.Workers[0].KVEvents == nil {
			t.Errorf("%q%q: no KV events in %+v", c.gateway, c.role, r)
		}
	}
	plan, errs := planText(t, "model: /m\nroles:\n  - {name: agg, kind: aggregated, gpus: [0]}\n  - {name: p, kind: prefill, gpus: [1]}\n  - {name: d, kind: decode, gpus: [2]}\ngateway:\n  disaggregation: conditional\n  policy: {prefill: kv_aware}\n", HostFacts{})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if a, _ := plan.Role("agg"); a.KVEvents != nil {
		t.Error("the prefill policy turned on the aggregated engine's KV events")
	}
}

// Pins: the table of kinds is complete and agrees with the profile
// format: every kind has a mode upstream's parser accepts, a layout, a
// default policy among its own, and a gateway.policy key.
func TestKindsTable(t *testing.T) {
	t.Parallel()
	modes := []string{"null", "prefill", "decode", "encode"} // upstream's --disaggregation-mode choices
	seen := map[string]bool{}
	for _, k := range Kinds {
		if seen[k.Kind] || seen["mode "+k.Mode] {
			t.Errorf("%s: kind or mode %q listed twice", k.Kind, k.Mode)
		}
		seen[k.Kind], seen["mode "+k.Mode] = true, true
		if !slices.Contains(modes, k.Mode) {
			t.Errorf("%s: mode %q is not one of upstream's %v", k.Kind, k.Mode, modes)
		}
		if k.Layout != LayoutPD && k.Layout != LayoutAggregated {
			t.Errorf("%s: layout %q", k.Kind, k.Layout)
		}
		if !slices.Contains(k.Policies, k.DefaultPolicy) {
			t.Errorf("%s: default policy %q not among %v", k.Kind, k.DefaultPolicy, k.Policies)
		}
		if k.Bootstrap != (k.FirstBootstrap > 0) {
			t.Errorf("%s: bootstrap %v but first port %d", k.Kind, k.Bootstrap, k.FirstBootstrap)
		}
		if !slices.Contains(policySection.keys(), k.Kind) {
			t.Errorf("%s: no gateway.policy.%s key", k.Kind, k.Kind)
		}
		var pp PolicyPlan
		*k.policy(&pp) = "x"
		if k.PolicyOf(pp) != "x" {
			t.Errorf("%s: PolicyOf does not read its own field", k.Kind)
		}
	}
	if _, ok := KindOf("router"); ok {
		t.Error("KindOf found a kind that is not in the table")
	}
	if !kindOf(KindEncode).AwaitsRanks(ModeEPD) || kindOf(KindEncode).AwaitsRanks(ModePD) || !kindOf(KindAggregated).AwaitsRanks(ModePD) {
		t.Error("AwaitsRanks: encode ranks are awaited in epd mode only, every other kind's always")
	}
}

// mixedBase is a running mixed deployment: two aggregated replicas beside
// one prefill and one decode, conditional.
const mixedBase = `name: mixed
model: /models/m
engine:
  command: [ts-fake, serve]
gateway:
  port: 8000
  disaggregation: conditional
roles:
  - name: agg
    kind: aggregated
    replicas: 2
    gpus: [[0], [1]]
  - name: prefill
    kind: prefill
    gpus: [2]
  - name: decode
    kind: decode
    gpus: [3]
`

// Pins: tsd apply takes gateway.disaggregation, gateway.conditional and
// gateway.policy.aggregated live (no engine touched), and tsd scale grows
// and shrinks an aggregated entry as any other: only the replicas that
// come or go start or stop.
func TestDiffAggregated(t *testing.T) {
	t.Parallel()
	base := planFrom(t, mixedBase, nil)
	unchanged := []string{"agg-0 unchanged", "agg-1 unchanged", "prefill unchanged", "decode unchanged"}
	for _, c := range []struct {
		name    string
		src     string
		roles   []string
		gateway []string
	}{
		{"conditional to always", edit(t, mixedBase, "disaggregation: conditional", "disaggregation: always"), unchanged, []string{"gateway.disaggregation"}},
		{"thresholds", edit(t, mixedBase, "  disaggregation: conditional\n", "  disaggregation: conditional\n  conditional: {max_uncached_tokens: 512, max_uncached_ratio: 0.5, prefill_busy: 100}\n"), unchanged,
			[]string{"gateway.conditional.max_uncached_tokens", "gateway.conditional.max_uncached_ratio", "gateway.conditional.prefill_busy"}},
		{"aggregated policy", edit(t, mixedBase, "  port: 8000\n", "  port: 8000\n  policy: {aggregated: cache_aware}\n"), unchanged, []string{"gateway.policy.aggregated", "gateway.cache_aware"}}, // the knobs of the policy now used come with it
		{"scale agg up", edit(t, mixedBase, "    replicas: 2\n    gpus: [[0], [1]]\n", "    replicas: 3\n    gpus: [[0], [1], [4]]\n"),
			[]string{"agg-0 unchanged", "agg-1 unchanged", "agg-2 start", "prefill unchanged", "decode unchanged"}, nil},
		{"scale agg down to one", edit(t, mixedBase, "    replicas: 2\n    gpus: [[0], [1]]\n", "    gpus: [0]\n"),
			[]string{"agg rename was=agg-0", "prefill unchanged", "decode unchanged", "agg-1 stop"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Diff(base, planFrom(t, c.src, base))
			var roles, gw []string
			for _, r := range d.Roles {
				s := r.Name + " " + r.Action
				if r.Was != "" {
					s += " was=" + r.Was
				}
				roles = append(roles, s)
			}
			for _, f := range d.Gateway {
				gw = append(gw, f.Field)
			}
			if !slices.Equal(roles, c.roles) || !slices.Equal(gw, c.gateway) || len(d.Fixed) > 0 {
				t.Errorf("roles %q gateway %q fixed %v; want %q %q", roles, gw, d.Fixed, c.roles, c.gateway)
			}
		})
	}
	// tsd scale's own path: Scaled on the aggregated entry.
	p, errs := Parse("/srv/p/demo.yaml", []byte(mixedBase))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	three, err := p.Scaled("agg", 3, [][]string{{"4"}})
	if err != nil || three.Roles[0].Replicas != 3 || three.Roles[0].Kind != KindAggregated {
		t.Fatalf("scale agg=3: %v %+v", err, three)
	}
	// An apply that drops the PD roles of a conditional profile is refused
	// at validation, naming the key.
	if _, errs := Parse("/srv/p/demo.yaml", []byte(strings.Split(mixedBase, "  - name: prefill")[0])); !strings.Contains(errs.Error(), "gateway.disaggregation: conditional sends requests prefill → decode") {
		t.Errorf("dropping prefill and decode under conditional: %v", errs)
	}
}

// Pins: the Mooncake transfer warnings are about engines that transfer:
// an aggregated-only profile moves no KV, so an NVLink variable in its env
// or another transfer backend draws none.
func TestAggregatedOnlyNoTransferWarnings(t *testing.T) {
	t.Parallel()
	src := "model: /m\nengine:\n  transfer_backend: nixl\n  env: {MC_INTRANODE_NVLINK: \"1\"}\nroles:\n  - {name: agg, kind: aggregated, gpus: [0]}\n"
	plan, errs := planText(t, src, HostFacts{})
	if len(errs) > 0 || len(plan.Warnings) > 0 {
		t.Errorf("errors %v warnings %q", errs, plan.Warnings)
	}
	plan, _ = planText(t, src+"  - {name: prefill, gpus: [1]}\n  - {name: decode, gpus: [2]}\ngateway: {disaggregation: conditional}\n", HostFacts{})
	if len(plan.Warnings) != 2 {
		t.Errorf("a mixed profile transfers: want the backend and NVLink warnings, got %q", plan.Warnings)
	}
}
