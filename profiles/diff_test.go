package profiles

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// applyBase is the running deployment of the apply tests: one prefill of
// two DP ranks and one decode.
const applyBase = `name: demo
model: /models/m
engine:
  command: [ts-fake, serve]
  args: [--fake-startup, 1s]
gateway:
  port: 8000
roles:
  - name: prefill
    kind: prefill
    gpus: [0, 1]
    dp: 2
  - name: decode
    kind: decode
    gpus: [2]
`

// planFrom parses src as /srv/p/demo.yaml and plans it, continuing
// running when it is not nil.
func planFrom(t *testing.T, src string, running *Plan) *Plan {
	t.Helper()
	p, errs := Parse("/srv/p/demo.yaml", []byte(src))
	if len(errs) > 0 {
		t.Fatalf("parse: %v", errs)
	}
	facts := fixedFacts()
	facts.Running = running
	plan, errs := MakePlan(p, facts)
	if len(errs) > 0 {
		t.Fatalf("plan: %v", errs)
	}
	return plan
}

func roleNamed(t *testing.T, p *Plan, name string) *RolePlan {
	t.Helper()
	r, ok := p.Role(name)
	if !ok {
		t.Fatalf("no role %s in plan (have %v)", name, roleNames(p))
	}
	return r
}

func roleNames(p *Plan) []string {
	var out []string
	for _, r := range p.Roles {
		out = append(out, r.Name)
	}
	return out
}

// edit replaces old by new in src, failing when old is not there.
func edit(t *testing.T, src, old, new string) string {
	t.Helper()
	if !strings.Contains(src, old) {
		t.Fatalf("%q not in the profile", old)
	}
	return strings.Replace(src, old, new, 1)
}

const twoDecodes = `  - name: decode
    kind: decode
    replicas: 2
    gpus: [[2], [3]]
`

const decodeOne = `  - name: decode
    kind: decode
    gpus: [2]
`

// TestStablePlannerKeepsAddresses: an instance that continues a running
// one keeps its socket path, handshake, dist-init and bootstrap ports and
// log file, under its new name too (decode → decode-0); a new instance
// gets addresses that collide with nothing running.
func TestStablePlannerKeepsAddresses(t *testing.T) {
	base := planFrom(t, applyBase, nil)
	next := planFrom(t, edit(t, applyBase, decodeOne, twoDecodes), base)

	for _, c := range []struct{ was, now string }{{"prefill", "prefill"}, {"decode", "decode-0"}} {
		o, n := roleNamed(t, base, c.was), roleNamed(t, next, c.now)
		if o.Worker != n.Worker || o.Handshake != n.Handshake || o.DistInitAddr != n.DistInitAddr ||
			o.Bootstrap != n.Bootstrap || o.LogFile != n.LogFile || !reflect.DeepEqual(o.PortCluster, n.PortCluster) {
			t.Errorf("%s → %s moved:\n was %s %s %s %s %s\n now %s %s %s %s %s", c.was, c.now,
				o.Worker, o.Handshake, o.DistInitAddr, o.Bootstrap, o.LogFile,
				n.Worker, n.Handshake, n.DistInitAddr, n.Bootstrap, n.LogFile)
		}
	}
	if got := roleNamed(t, next, "decode-0").PlannedAs; got != "decode" {
		t.Errorf("decode-0 planned_as = %q, want decode", got)
	}
	if got := roleNamed(t, next, "prefill").PlannedAs; got != "" {
		t.Errorf("prefill planned_as = %q, want none", got)
	}
	d1 := roleNamed(t, next, "decode-1")
	if d1.Worker != "ipc:///run/tsd-test/run/decode-1" || d1.LogFile != "/run/tsd-test/logs/decode-1.log" {
		t.Errorf("decode-1 = %s %s, want its own socket and log", d1.Worker, d1.LogFile)
	}
	held := map[int]string{}
	for _, r := range base.Roles {
		for _, p := range append(append([]int{}, r.PortCluster...), addrPort(r.Handshake), r.BootstrapPort) {
			if p > 0 {
				held[p] = r.Name
			}
		}
	}
	for _, p := range append(append([]int{}, d1.PortCluster...), addrPort(d1.Handshake)) {
		if who, ok := held[p]; ok {
			t.Errorf("decode-1 takes port %d of running %s", p, who)
		}
	}

	// And back: decode-0 becomes decode again, at the same addresses it
	// had all along, and still says where they came from.
	back := planFrom(t, applyBase, next)
	o, n := roleNamed(t, next, "decode-0"), roleNamed(t, back, "decode")
	if o.Worker != n.Worker || o.DistInitAddr != n.DistInitAddr || o.LogFile != n.LogFile {
		t.Errorf("decode-0 → decode moved: %s %s %s → %s %s %s", o.Worker, o.DistInitAddr, o.LogFile, n.Worker, n.DistInitAddr, n.LogFile)
	}
	if n.PlannedAs != "" {
		t.Errorf("decode planned_as = %q, want none (its addresses are its own name's again)", n.PlannedAs)
	}
}

// TestStablePlannerGolden pins the whole plan of a scale-up continuing a
// running plan (go test ./profiles -run Golden -update rewrites it).
func TestStablePlannerGolden(t *testing.T) {
	base := planFrom(t, applyBase, nil)
	// The running decode's dist-init base is not the first candidate, as
	// after an apply that moved it: the continued decode-0 keeps it.
	base.Roles[1].DistInitAddr = "127.0.0.1:12700"
	base.Roles[1].PortCluster = ClusterPorts(12700, 1)
	next := planFrom(t, edit(t, applyBase, decodeOne, twoDecodes), base)
	var buf bytes.Buffer
	if err := next.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "apply-scale-up.plan.json")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("plan differs from %s (run with -update after checking):\n%s", golden, buf.String())
	}
}

// TestStablePlannerExplicitWins: a value the profile now writes replaces
// the kept one (and the diff says restart).
func TestStablePlannerExplicitWins(t *testing.T) {
	base := planFrom(t, applyBase, nil)
	next := planFrom(t, edit(t, applyBase, "    gpus: [2]\n", "    gpus: [2]\n    dist_init_port: 13500\n"), base)
	if got := roleNamed(t, next, "decode").DistInitAddr; got != "127.0.0.1:13500" {
		t.Fatalf("decode dist_init_addr = %s, want the written 13500", got)
	}
}

func TestDiff(t *testing.T) {
	type want struct {
		roles   []string // "name action [was] field,field"
		gateway []string // fields
		fixed   []string
	}
	cases := []struct {
		name string
		src  func(t *testing.T) string
		want want
	}{
		{"same profile", func(t *testing.T) string { return applyBase },
			want{roles: []string{"prefill unchanged", "decode unchanged"}}},
		{"add a decode replica", func(t *testing.T) string { return edit(t, applyBase, decodeOne, twoDecodes) },
			want{roles: []string{"prefill unchanged", "decode-0 rename was=decode", "decode-1 start"}}},
		{"change decode's args", func(t *testing.T) string {
			return edit(t, applyBase, decodeOne, decodeOne+"    args: [--fake-tokens-per-s, \"50\"]\n")
		}, want{roles: []string{"prefill unchanged", "decode restart argv"}}},
		{"move decode to another GPU", func(t *testing.T) string { return edit(t, applyBase, "gpus: [2]", "gpus: [3]") },
			want{roles: []string{"prefill unchanged", "decode restart gpus"}}},
		{"every engine's args", func(t *testing.T) string { return edit(t, applyBase, "--fake-startup, 1s", "--fake-startup, 2s") },
			want{roles: []string{"prefill restart argv", "decode restart argv"}}},
		{"a secret in the env", func(t *testing.T) string {
			return edit(t, applyBase, decodeOne, decodeOne+"    env: {HF_TOKEN: abc}\n")
		}, want{roles: []string{"prefill unchanged", "decode restart env.HF_TOKEN"}}},
		{"restart policy only", func(t *testing.T) string { return applyBase + "restart:\n  budget: 2 in 1m\n" },
			want{roles: []string{"prefill update restart.budget_count,restart.budget_window", "decode update restart.budget_count,restart.budget_window"}}},
		{"prefill policy", func(t *testing.T) string {
			return edit(t, applyBase, "  port: 8000\n", "  port: 8000\n  policy: {prefill: random}\n")
		}, want{roles: []string{"prefill unchanged", "decode unchanged"}, gateway: []string{"gateway.policy.prefill"}}},
		{"limits, CORS and the API key variable", func(t *testing.T) string {
			return edit(t, applyBase, "  port: 8000\n", "  port: 8000\n  max_concurrent: 8\n  queue_timeout: 5s\n  cors_origins: [\"*\"]\n  api_key_env: TSD_KEY\n")
		}, want{roles: []string{"prefill unchanged", "decode unchanged"},
			gateway: []string{"gateway.api_key_env", "gateway.queue_timeout", "gateway.max_concurrent", "gateway.cors_origins"}}},
		{"tracing turned on is live", func(t *testing.T) string {
			return edit(t, applyBase, "  port: 8000\n", "  port: 8000\n  tracing: {endpoint: \"http://127.0.0.1:4318\", sample_ratio: 0.5}\n")
		}, want{roles: []string{"prefill unchanged", "decode unchanged"}, gateway: []string{"gateway.tracing"}}},
		{"the gateway's port", func(t *testing.T) string { return edit(t, applyBase, "port: 8000", "port: 8001") },
			want{roles: []string{"prefill unchanged", "decode unchanged"}, fixed: []string{"gateway.listen", "gateway.url"}}},
		{"the model", func(t *testing.T) string { return edit(t, applyBase, "/models/m", "/models/n") },
			want{roles: []string{"prefill restart argv", "decode restart argv"}, fixed: []string{"model", "tokenizer", "served_model_name"}}},
		{"a new role", func(t *testing.T) string {
			return applyBase + "  - name: decode2\n    kind: decode\n    gpus: [3]\n"
		}, want{roles: []string{"prefill unchanged", "decode unchanged", "decode2 start"}}},
		{"a renamed profile entry is a new one", func(t *testing.T) string { return edit(t, applyBase, "name: decode", "name: dec") },
			want{roles: []string{"prefill unchanged", "dec start", "decode stop"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := planFrom(t, applyBase, nil)
			next := planFrom(t, c.src(t), base)
			d := Diff(base, next)
			var roles []string
			for _, r := range d.Roles {
				s := r.Name + " " + r.Action
				if r.Was != "" {
					s += " was=" + r.Was
				}
				var fs []string
				for _, f := range r.Fields {
					fs = append(fs, f.Field)
				}
				if len(fs) > 0 {
					s += " " + strings.Join(fs, ",")
				}
				roles = append(roles, s)
			}
			fields := func(fc []FieldChange) []string {
				var out []string
				for _, f := range fc {
					out = append(out, f.Field)
				}
				return out
			}
			if !reflect.DeepEqual(roles, c.want.roles) {
				t.Errorf("roles:\n got %q\nwant %q", roles, c.want.roles)
			}
			if got := fields(d.Gateway); !reflect.DeepEqual(got, c.want.gateway) {
				t.Errorf("gateway: got %q, want %q", got, c.want.gateway)
			}
			if got := fields(d.Fixed); !reflect.DeepEqual(got, c.want.fixed) {
				t.Errorf("fixed: got %q, want %q", got, c.want.fixed)
			}
			if (d.Refusal() != nil) != (len(c.want.fixed) > 0) {
				t.Errorf("refusal = %v with fixed %v", d.Refusal(), c.want.fixed)
			}
			for _, l := range d.Lines() {
				if strings.Contains(l, "abc") {
					t.Errorf("the diff shows a secret: %s", l)
				}
			}
		})
	}
}

// TestDiffScaleDown: 2 → 1 replicas: decode-0 continues as decode, the
// other replica stops.
func TestDiffScaleDown(t *testing.T) {
	base := planFrom(t, applyBase, nil)
	two := planFrom(t, edit(t, applyBase, decodeOne, twoDecodes), base)
	one := planFrom(t, applyBase, two)
	d := Diff(two, one)
	got := []string{}
	for _, r := range d.Roles {
		got = append(got, r.Name+" "+r.Action+" "+r.Was)
	}
	want := []string{"prefill unchanged ", "decode rename decode-0", "decode-1 stop "}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if d.Summary() != "1 stop, 1 rename, 1 unchanged" {
		t.Errorf("summary %q", d.Summary())
	}
}

func TestArgvDiff(t *testing.T) {
	for _, c := range []struct {
		a, b          string
		removed, adds string
	}{
		{"ts serve --x 1", "ts serve --x 1", "", ""},
		{"ts serve --x 1", "ts serve --x 2", "--x 1", "--x 2"}, // the flag is named
		{"ts serve --tp 2 --mem 0.8", "ts serve --tp 4 --mem 0.8", "--tp 2", "--tp 4"},
		{"ts serve --bias -1", "ts serve --bias -2", "--bias -1", "--bias -2"},
		{"ts serve --list a b", "ts serve --list a c", "--list a b", "--list a c"},
		{"ts serve", "ts serve --y", "", "--y"},
		{"ts serve --a --b", "ts serve --b", "--a", ""},
		{"--hf-token abc", "--hf-token def", "", ""},
	} {
		rm, ad := argvDiff(MaskArgv(strings.Fields(c.a)), MaskArgv(strings.Fields(c.b)))
		if rm != c.removed || ad != c.adds {
			t.Errorf("%q → %q: -%q +%q, want -%q +%q", c.a, c.b, rm, ad, c.removed, c.adds)
		}
	}
}

// TestGatewayFieldsClassified: every gateway and plan-wide setting says
// how a running deployment takes its change, so a new one is a decision.
func TestGatewayFieldsClassified(t *testing.T) {
	for _, c := range []struct {
		table map[string]string
		typ   reflect.Type
	}{{gatewaySettings, reflect.TypeOf(GatewayPlan{})}, {planSettings, reflect.TypeOf(Plan{})}} {
		for i := 0; i < c.typ.NumField(); i++ {
			name := jsonName(c.typ.Field(i))
			if _, ok := c.table[name]; name != "" && !ok {
				t.Errorf("%s.%s (%s) has no row saying whether tsd apply takes it live, refuses it or skips it (profiles/diff.go)", c.typ.Name(), c.typ.Field(i).Name, name)
			}
		}
	}
}

// TestStablePlannerKeepsKVEventPorts: a continued prefill publishes its
// KV events where it did, and a new one gets ports of its own.
func TestStablePlannerKeepsKVEventPorts(t *testing.T) {
	src := edit(t, applyBase, "  port: 8000\n", "  port: 8000\n  policy: {prefill: kv_aware}\n")
	base := planFrom(t, src, nil)
	base.Roles[0].KVEvents.Port, base.Roles[0].KVEvents.ReplayPort = 9300, 9302 // as an earlier apply left it
	two := edit(t, src, "    gpus: [0, 1]\n    dp: 2\n", "    replicas: 2\n    gpus: [[0, 1], [4, 5]]\n    dp: 2\n")
	next := planFrom(t, two, base)
	p0, p1 := roleNamed(t, next, "prefill-0"), roleNamed(t, next, "prefill-1")
	if p0.KVEvents == nil || p0.KVEvents.Port != 9300 {
		t.Fatalf("prefill-0's KV events %+v, want port 9300 kept", p0.KVEvents)
	}
	if p1.KVEvents == nil || p1.KVEvents.Port >= 9300 && p1.KVEvents.Port < 9304 {
		t.Fatalf("prefill-1's KV events %+v collide with prefill-0's", p1.KVEvents)
	}
}

// TestDiffKVAwareRefusals: an apply that turns kv_aware on restarts each
// local prefill into its KV events; one that would leave a prefill
// publishing none is refused with the key to change, unless that engine
// published none under kv_aware before either.
func TestDiffKVAwareRefusals(t *testing.T) {
	kvAware := func(t *testing.T, src string) string {
		return edit(t, src, "  port: 8000\n", "  port: 8000\n  policy: {prefill: kv_aware}\n")
	}
	noEvents := func(t *testing.T, src string) string {
		return edit(t, src, "    dp: 2\n", "    dp: 2\n    kv_events: false\n")
	}
	withEvents := func(t *testing.T, src string) string {
		return edit(t, src, "    dp: 2\n", "    dp: 2\n    kv_events: true\n")
	}
	rows := []struct {
		name            string
		running, target func(t *testing.T) string
		prefill         string // the prefill's action
		refused         bool
	}{
		{"turned on: the prefill restarts into its events",
			func(t *testing.T) string { return applyBase },
			func(t *testing.T) string { return kvAware(t, applyBase) }, ActionRestart, false},
		{"turned on while a prefill says kv_events: false",
			func(t *testing.T) string { return applyBase },
			func(t *testing.T) string { return noEvents(t, kvAware(t, applyBase)) }, ActionUnchanged, true},
		{"events turned off under kv_aware",
			func(t *testing.T) string { return kvAware(t, applyBase) },
			func(t *testing.T) string { return noEvents(t, kvAware(t, applyBase)) }, ActionRestart, true},
		{"a prefill without events under kv_aware stays so",
			func(t *testing.T) string { return noEvents(t, kvAware(t, applyBase)) },
			func(t *testing.T) string { return noEvents(t, kvAware(t, applyBase)) + "restart:\n  budget: 2 in 1m\n" }, ActionUpdate, false},
		{"turned on where the engines published already",
			func(t *testing.T) string { return withEvents(t, applyBase) },
			func(t *testing.T) string { return withEvents(t, kvAware(t, applyBase)) }, ActionUnchanged, false},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			base := planFrom(t, r.running(t), nil)
			d := Diff(base, planFrom(t, r.target(t), base))
			if got := d.Roles[0].Action; got != r.prefill {
				t.Errorf("prefill %s, want %s (%v)", got, r.prefill, d.Lines())
			}
			err := d.Refusal()
			if (err != nil) != r.refused {
				t.Fatalf("refusal %v, want refused=%v", err, r.refused)
			}
			if err != nil && (!strings.Contains(err.Error(), `profile entry "prefill" says kv_events: false`) || !strings.Contains(err.Error(), "remove kv_events: false")) {
				t.Errorf("the refusal does not say what to change: %v", err)
			}
		})
	}
}
