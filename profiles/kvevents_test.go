package profiles

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// kvProfile is a 1P1D profile whose gateway and prefill take extra lines.
func kvProfile(gateway, prefill string) string {
	return `model: /m
engine: {command: [ts-fake, serve]}
gateway:
  port: 8000
` + gateway + `roles:
  - name: prefill
    gpus: [0, 1]
    dp: 2
` + prefill + `  - name: decode
    gpus: [2]
`
}

func planText(t *testing.T, text string, facts HostFacts) (*Plan, Errors) {
	t.Helper()
	p, errs := Parse("/profiles/kv.yaml", []byte(text))
	if len(errs) > 0 {
		return nil, errs
	}
	return MakePlan(p, facts)
}

// Pins: which engines get --kv-events-config, with which ports, and where
// the gateway dials them (docs/profiles.md "KV events").
func TestKVEventsPlan(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name      string
		gateway   string
		prefill   string
		free      func(int) bool
		config    string   // the prefill's --kv-events-config ("" none)
		publish   []string // its per-rank dial addresses
		replay    []string
		wantWarns []string
	}{
		{name: "round_robin: none"},
		{name: "kv_aware: the prefill publishes", gateway: "  policy: {prefill: kv_aware}\n",
			config:  `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:9100","replay_endpoint":"tcp://*:9102"}`,
			publish: []string{"tcp://127.0.0.1:9100", "tcp://127.0.0.1:9101"}, replay: []string{"tcp://127.0.0.1:9102", "tcp://127.0.0.1:9103"}},
		{name: "kv_events: true under round_robin", prefill: "    kv_events: true\n",
			config:  `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:9100","replay_endpoint":"tcp://*:9102"}`,
			publish: []string{"tcp://127.0.0.1:9100", "tcp://127.0.0.1:9101"}, replay: []string{"tcp://127.0.0.1:9102", "tcp://127.0.0.1:9103"}},
		{name: "kv_events: false under kv_aware", gateway: "  policy: {prefill: kv_aware}\n", prefill: "    kv_events: false\n"},
		{name: "an explicit port", prefill: "    kv_events_port: 7000\n",
			config:  `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:7000","replay_endpoint":"tcp://*:7002"}`,
			publish: []string{"tcp://127.0.0.1:7000", "tcp://127.0.0.1:7001"}, replay: []string{"tcp://127.0.0.1:7002", "tcp://127.0.0.1:7003"}},
		{name: "planned ports move past busy ones", prefill: "    kv_events: true\n", free: func(p int) bool { return p != 9101 },
			config:  `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:9102","replay_endpoint":"tcp://*:9104"}`,
			publish: []string{"tcp://127.0.0.1:9102", "tcp://127.0.0.1:9103"}, replay: []string{"tcp://127.0.0.1:9104", "tcp://127.0.0.1:9105"}},
		{name: "an explicit port in the handshake band is honoured with a warning", prefill: "    kv_events_port: 21000\n",
			config:  `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:21000","replay_endpoint":"tcp://*:21002"}`,
			publish: []string{"tcp://127.0.0.1:21000", "tcp://127.0.0.1:21001"}, replay: []string{"tcp://127.0.0.1:21002", "tcp://127.0.0.1:21003"},
			wantWarns: []string{"roles[0].kv_events_port: KV event ports 21000-21003 is inside the ipc handshake band"}},
		{name: "a remote prefill is dialled on its host", prefill: "    kv_events: true\n    host: gpu7\n    worker: tcp://10.0.0.5:31000\n",
			config:  `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:9100","replay_endpoint":"tcp://*:9102"}`,
			publish: []string{"tcp://gpu7:9100", "tcp://gpu7:9101"}, replay: []string{"tcp://gpu7:9102", "tcp://gpu7:9103"}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			plan, errs := planText(t, kvProfile(r.gateway, r.prefill), HostFacts{RunDir: "/run/t", LogDir: "/log/t", PortFree: r.free})
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			pf, _ := plan.Role("prefill")
			dec, _ := plan.Role("decode")
			argv := strings.Join(pf.Argv, "\x00")
			if dec.KVEvents != nil || strings.Contains(strings.Join(dec.Argv, " "), "--kv-events-config") {
				t.Errorf("decode got kv events: %+v", dec.KVEvents)
			}
			wp, _ := plan.Gateway.Worker("prefill")
			if r.config == "" {
				if pf.KVEvents != nil || wp.KVEvents != nil || strings.Contains(argv, "--kv-events-config") {
					t.Fatalf("kv events planned: %+v", pf.KVEvents)
				}
				return
			}
			if pf.KVEvents == nil || wp.KVEvents == nil {
				t.Fatalf("no kv events planned")
			}
			if !strings.Contains(argv, "--kv-events-config\x00"+r.config) {
				t.Errorf("argv %q lacks --kv-events-config %s", pf.Argv, r.config)
			}
			if k := wp.KVEvents; k.Config != r.config || !reflect.DeepEqual(k.Publish, r.publish) || !reflect.DeepEqual(k.Replay, r.replay) {
				t.Errorf("kv events %+v, want %s %v %v", k, r.config, r.publish, r.replay)
			}
			for _, w := range r.wantWarns {
				if !strings.Contains(strings.Join(plan.Warnings, "\n"), w) {
					t.Errorf("missing warning %q in %q", w, plan.Warnings)
				}
			}
		})
	}
}

// Pins: replicas and roles get disjoint port blocks; collisions with
// other planned or written ports are errors naming the key.
func TestKVEventsPorts(t *testing.T) {
	t.Parallel()
	text := `model: /m
engine: {command: [ts-fake, serve]}
gateway: {policy: {prefill: kv_aware}}
roles:
  - name: prefill
    replicas: 2
    gpus: [[0], [1]]
  - name: big
    kind: prefill
    dp: 4
    gpus: [2, 3, 4, 5]
  - name: decode
    gpus: [6]
`
	plan, errs := planText(t, text, HostFacts{RunDir: "/run/t", LogDir: "/log/t"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got := map[string][]int{}
	for _, r := range plan.Roles {
		got[r.Name] = r.KVEvents.Ports()
	}
	want := map[string][]int{"prefill-0": {9100, 9101}, "prefill-1": {9102, 9103}, "big": {9104, 9105, 9106, 9107, 9108, 9109, 9110, 9111}, "decode": nil}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ports %v, want %v", got, want)
	}
	refused := []struct {
		name, prefill, want string
	}{
		{"collides with the bootstrap port", "    bootstrap_port: 9101\n    kv_events_port: 9100\n", "KV event ports of prefill (9100-9103) collides with bootstrap port of prefill"},
		{"on a decode", "", ""},
		{"past 65535", "    kv_events_port: 65534\n", "the KV event ports 65534-65537 run past 65535"},
		{"port while off", "    kv_events: false\n    kv_events_port: 7000\n", "kv_events is false: no KV event sockets to place"},
		{"the flag in args", "    args: [--kv-events-config, '{}']\n", "--kv-events-config is planned by tsd (set it with the role's kv_events:"},
	}
	for _, r := range refused {
		if r.want == "" {
			continue
		}
		t.Run(r.name, func(t *testing.T) {
			_, errs := planText(t, kvProfile("", r.prefill), HostFacts{RunDir: "/run/t", LogDir: "/log/t"})
			if !strings.Contains(errs.Error(), r.want) {
				t.Fatalf("errors %v, want %q", errs, r.want)
			}
		})
	}
	bad := `model: /m
roles:
  - name: prefill
    gpus: [0]
  - name: decode
    gpus: [1]
    kv_events: true
`
	if _, errs := planText(t, bad, HostFacts{}); !strings.Contains(errs.Error(), "kv.yaml:7:5: roles[1].kv_events: kv events are followed from prefill and aggregated engines only; a decode role") {
		t.Fatalf("decode kv_events: %v", errs)
	}
}

// Pins: the plan JSON of a kv_aware deployment (the keys `tsd plan
// --json` documents), preflight's port checks, and `tsd plan`'s line.
func TestKVEventsPlanJSONGolden(t *testing.T) {
	t.Parallel()
	plan, errs := planText(t, kvProfile("  policy: {prefill: kv_aware}\n", ""), fixedFacts())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var buf bytes.Buffer
	if err := plan.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "kv-events.plan.json")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("plan JSON differs from %s:\n%s", golden, buf.Bytes())
	}
	busy := map[int]bool{9102: true}
	ps := Preflight(plan, PreflightEnv{PortFree: func(p int) bool { return !busy[p] }})
	found := false
	for _, p := range ps {
		if strings.Contains(p.String(), "port 9102 (KV event port) is in use") {
			found = true
		}
	}
	if !found {
		t.Errorf("preflight did not name the busy KV event port: %v", ps)
	}
}
