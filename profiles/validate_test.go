package profiles

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// markedLine returns the 1-based line holding "#<", where a case expects
// its error.
func markedLine(src string) int {
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, "#<") {
			return i + 1
		}
	}
	return 0
}

type ruleCase struct {
	name string
	src  string // the line with "#<" is where the error must point
	key  string // key path the error must name
	msg  string // a substring of the message
}

// loadAndPlan runs both stages with fixed host facts, as `tsd validate`
// does, and returns every error.
func loadAndPlan(name, src string) Errors {
	p, errs := Parse(name, []byte(src))
	if p == nil || len(errs) > 0 {
		return errs
	}
	_, errs = MakePlan(p, fixedFacts())
	return errs
}

// Pins: every validation rule of docs/profiles.md reports an error naming the
// key and the line it is on.
func TestValidationRules(t *testing.T) {
	t.Parallel()
	cases := []ruleCase{
		{"gpu count differs from tp*dp", `model: m
roles:
  - name: prefill
    tp: 2
    gpus: [0] #<
  - {name: decode, gpus: [1]}
`, "roles[0].gpus", "1 GPU(s) listed but tp × dp = 2 × 1 = 2"},
		{"gpu count with dp", `model: m
roles:
  - {name: prefill, gpus: [0, 1], dp: 2}
  - name: decode
    dp: 2
    tp: 2
    gpus: [2, 3] #<
`, "roles[1].gpus", "tp × dp = 2 × 2 = 4"},
		{"gpu shared by two local roles", `model: m
roles:
  - {name: prefill, gpus: [0, 1], tp: 2}
  - name: decode
    tp: 2
    gpus: [1, 2] #<
`, "roles[1].gpus", "GPU 1 is already used by prefill"},
		{"gpu shared across replicas", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    replicas: 2
    gpus: [[1], [1]] #<
`, "roles[1].gpus[1]", "GPU 1 is already used by decode-0"},
		{"gpu listed twice", `model: m
roles:
  - name: prefill
    tp: 2
    gpus: [3, 3] #<
  - {name: decode, gpus: [1]}
`, "roles[0].gpus", "GPU 3 is listed twice"},
		{"encode with dp", `model: m
roles:
  - name: encode
    dp: 2 #<
    gpus: [0, 1]
  - {name: prefill, gpus: [2]}
  - {name: decode, gpus: [3]}
`, "roles[0].dp", "encode role cannot use data parallelism"},
		{"bootstrap_port on decode", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    gpus: [1]
    bootstrap_port: 9000 #<
`, "roles[1].bootstrap_port", "decode role has no bootstrap server"},
		{"duplicate names", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
  - {name: prefill, gpus: [2]} #<
`, "roles[2].name", `duplicate role instance name "prefill"`},
		{"duplicate instance name from replicas", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, replicas: 2, gpus: [[1], [2]]}
  - {name: decode-1, kind: decode, gpus: [3]} #<
`, "roles[2].name", `duplicate role instance name "decode-1"`},
		{"duplicate dist-init ports", `model: m
roles:
  - {name: prefill, gpus: [0], dist_init_port: 12000}
  - name: decode
    gpus: [1]
    dist_init_port: 12000 #<
`, "roles[1].dist_init_port", "dist-init port cluster of decode (12000-12006) collides with dist-init port cluster of prefill"},
		{"overlapping port clusters", `model: m
roles:
  - {name: prefill, gpus: [0], dist_init_port: 12000}
  - name: decode
    gpus: [1]
    dist_init_port: 12004 #<
`, "roles[1].dist_init_port", "collides with dist-init port cluster of prefill (12000-12006"},
		{"cluster overlaps gateway port", `model: m
gateway: {port: 12003}
roles:
  - name: prefill
    gpus: [0]
    dist_init_port: 12000 #<
  - {name: decode, gpus: [1]}
`, "roles[0].dist_init_port", "collides with gateway port (12003"},
		{"duplicate bootstrap ports", `model: m
roles:
  - {name: prefill, gpus: [0], bootstrap_port: 9000}
  - name: p2
    kind: prefill
    gpus: [2]
    bootstrap_port: 9000 #<
  - {name: decode, gpus: [1]}
`, "roles[1].bootstrap_port", "bootstrap port of p2 (9000) collides with bootstrap port of prefill"},
		{"duplicate tcp worker ports", `model: m
roles:
  - {name: prefill, gpus: [0], worker: "tcp://127.0.0.1:31000"}
  - name: decode
    gpus: [1]
    worker: tcp://127.0.0.1:31000 #<
`, "roles[1].worker", "handshake port of decode (31000) collides with handshake port of prefill"},
		{"tcp worker on gateway port", `model: m
gateway:
  port: 31000
roles:
  - name: prefill
    gpus: [0]
    worker: tcp://127.0.0.1:31000 #<
  - {name: decode, gpus: [1]}
`, "roles[0].worker", "collides with gateway port"},
		{"cluster overlaps derived handshake port", fmt.Sprintf(`model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    gpus: [1]
    dist_init_port: %d #<
`, HandshakePort("/run/tsd-test/run/prefill")-3), "roles[1].dist_init_port", "collides with handshake port of prefill (derived from ipc:///run/tsd-test/run/prefill)"},
		{"wildcard tcp host", `model: m
roles:
  - name: prefill
    gpus: [0]
    worker: tcp://0.0.0.0:31000 #<
  - {name: decode, gpus: [1]}
`, "roles[0].worker", "the host is a wildcard"},
		{"wildcard ipv6 tcp host", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    gpus: [1]
    worker: "tcp://[::]:31000" #<
`, "roles[1].worker", "the host is a wildcard"},
		{"bad worker scheme", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    gpus: [1]
    worker: http://127.0.0.1:31000 #<
`, "roles[1].worker", "a worker URL is ipc://PATH or tcp://HOST:PORT"},
		{"epd without encode", `model: m
gateway:
  mode: epd #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "gateway.mode", "epd mode needs an encode role"},
		{"no prefill", `model: m
roles: #<
  - {name: decode, gpus: [1]}
`, "roles", "no prefill role"},
		{"no decode", `model: m
roles: #<
  - {name: prefill, gpus: [1]}
`, "roles", "no decode role"},
		{"missing model", `name: x #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "model", "missing"},
		{"missing roles", `model: m #<
`, "roles", "missing"},
		{"unknown top key", `model: m
modle: n #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "modle", `unknown key (did you mean "model"?)`},
		{"unknown role key", `model: m
roles:
  - name: prefill
    gpu: [0] #<
  - {name: decode, gpus: [1]}
`, "roles[0].gpu", `unknown key (did you mean "gpus"?)`},
		{"unknown gateway key", `model: m
gateway:
  bootstrap_sever: tsd #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "gateway.bootstrap_sever", `did you mean "bootstrap_server"?`},
		{"duplicate key", `model: m
model: n #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "model", "duplicate key"},
		{"bad kind", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: d
    kind: decoder #<
    gpus: [1]
`, "roles[1].kind", `must be encode, prefill, decode or aggregated, got "decoder" (did you mean "decode"?)`},
		{"missing kind", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: d #<
    gpus: [1]
`, "roles[1]", "missing kind"},
		{"missing gpus", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode #<
    tp: 2
`, "roles[1]", "missing gpus"},
		{"bad gateway mode", `model: m
gateway: {mode: ep} #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "gateway.mode", "must be auto, pd or epd"},
		{"bad policy", `model: m
gateway:
  policy:
    decode: round-robin #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "gateway.policy.decode", `did you mean "round_robin"?`},
		{"bad bootstrap_server", `model: m
gateway:
  bootstrap_server: gateway #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "gateway.bootstrap_server", "must be engine or tsd"},
		{"image_urls not a boolean", `model: m
gateway:
  image_urls: yes #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "gateway.image_urls", `must be true or false, got "yes"`},
		{"image_urls misspelt", `model: m
gateway:
  image_url: true #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "gateway.image_url", `did you mean "image_urls"?`},
		{"stall_action unknown", `model: m
health:
  stall_action: reboot #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "health.stall_action", `must be restart or wait, got "reboot"`},
		{"stall_timeout not a duration", `model: m
health:
  stall_timeout: 30 #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "health.stall_timeout", `(write 30s for seconds)`},
		{"health key misspelt", `model: m
health:
  stall_timout: 30s #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "health.stall_timout", `did you mean "stall_timeout"?`},
		{"queue_timeout not positive", `model: m
gateway:
  queue_timeout: 0s #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "gateway.queue_timeout", `must be positive`},
		{"tokenizer_cache_mb negative", `model: m
gateway:
  tokenizer_cache_mb: -1 #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "gateway.tokenizer_cache_mb", `must be between 0 and 1048576, got -1`},
		{"drain_timeout on a role", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    gpus: [1]
    restart:
      drain_timeout: soon #<
`, "roles[1].restart.drain_timeout", `is not a duration`},
		{"gateway port range", `model: m
gateway:
  port: 70000 #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "gateway.port", "must be between 1 and 65535"},
		{"port not a number", `model: m
roles:
  - name: prefill
    gpus: [0]
    dist_init_port: high #<
  - {name: decode, gpus: [1]}
`, "roles[0].dist_init_port", "must be an integer"},
		{"tp zero", `model: m
roles:
  - name: prefill
    tp: 0 #<
    gpus: [0]
  - {name: decode, gpus: [1]}
`, "roles[0].tp", "must be between 1 and 1024"},
		{"engine index overflow", `model: m
roles:
  - name: prefill
    dp: 2
    gpus: [0, 1]
    engine_index: 65535 #<
  - {name: decode, gpus: [2]}
`, "roles[0].engine_index", "exceeds 65535"},
		{"bad restart budget", `model: m
restart:
  budget: five in ten #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "restart.budget", `must read like "5 in 10m"`},
		{"bad duration", `model: m
restart:
  backoff: 2 #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "restart.backoff", "write 2s for seconds"},
		{"bad restart policy", `model: m
roles:
  - name: prefill
    gpus: [0]
    restart:
      policy: sometimes #<
  - {name: decode, gpus: [1]}
`, "roles[0].restart.policy", "must be no, on-failure or always"},
		{"backoff above max", `model: m
restart: #<
  backoff: 5m
  max_backoff: 1m
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "restart", "backoff (5m0s) is longer than max_backoff (1m0s)"},
		{"replicas need gpu lists", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    replicas: 2
    gpus: [1, 2] #<
`, "roles[1].gpus", "needs one list per replica"},
		{"replicas need per-replica ports", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    replicas: 2
    gpus: [[1], [2]]
    dist_init_port: 12000 #<
`, "roles[1].dist_init_port", "needs a list of 2 values, one per replica"},
		{"remote role with ipc worker", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    host: box2
    gpus: [1]
    worker: ipc:///run/x #<
`, "roles[1].worker", "must be tcp://HOST:PORT"},
		{"remote role without worker", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    host: box2 #<
    gpus: [1]
`, "roles[1].host", "needs worker: tcp://"},
		{"env sets CUDA_VISIBLE_DEVICES", `model: m
engine:
  env:
    CUDA_VISIBLE_DEVICES: "0" #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "engine.env.CUDA_VISIBLE_DEVICES", "set from each role's gpus"},
		{"bad env name", `model: m
roles:
  - name: prefill
    gpus: [0]
    env:
      BAD-NAME: x #<
  - {name: decode, gpus: [1]}
`, "roles[0].env.BAD-NAME", "not a valid environment variable name"},
		{"engine command as string", `model: m
engine:
  command: python3 -m tokenspeed.cli serve #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "engine.command", "must be a list, e.g. [python3, -m, tokenspeed.cli, serve]"},
		{"bad role name", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: de/code #<
    kind: decode
    gpus: [1]
`, "roles[1].name", "use letters, digits"},
		{"reserved role name", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: gateway #<
    kind: decode
    gpus: [1]
`, "roles[1].name", "reserved for the gateway"},
		{"bad gpu id", `model: m
roles:
  - name: prefill
    gpus: [zero] #<
  - {name: decode, gpus: [1]}
`, "roles[0].gpus[0]", "neither a GPU index nor a GPU-/MIG- UUID"},
		{"ipc path too long", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    gpus: [1]
    worker: ipc:///` + strings.Repeat("x", 100) + ` #<
`, "roles[1].worker", "over the 107-byte Unix limit"},
		{"planned flag in args", `model: m
engine:
  args: [--trust-remote-code, "--tp=4"] #<
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`, "engine.args[1]", "--tp is planned by tsd (set it with the role's tp:)"},
		{"headless-refused flag in role args", `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    gpus: [1]
    args:
      - --drain-timeout #<
      - "30"
`, "roles[1].args[0]", "ts serve --headless refuses it"},
		{"yaml syntax", `model: m
roles:
  - name: prefill
    gpus: [0
  - {name: decode, gpus: [1]} #<
`, "", "YAML"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			errs := loadAndPlan("case.yaml", c.src)
			if len(errs) == 0 {
				t.Fatalf("no error; want %q", c.msg)
			}
			line := markedLine(c.src)
			prefix := fmt.Sprintf("case.yaml:%d:", line)
			for _, e := range errs {
				s := e.Error()
				if strings.Contains(s, c.msg) && strings.HasPrefix(s, prefix) && (c.key == "" || strings.Contains(s, ": "+c.key+": ")) {
					return
				}
			}
			t.Errorf("want an error at line %d naming %q with %q; got:\n%v", line, c.key, c.msg, errs)
		})
	}
}

// collidingNames builds a profile whose two default ipc workers derive the
// same handshake port under the fixed run dir.
// Pins: two roles whose ipc paths derive one handshake port (one pair in
// ten thousand, so a random run folder meets it now and then) both plan:
// the later role takes the next free port of the band, with a warning
// naming both, and the engines are told the ports they got.
func TestDerivedHandshakeCollisionMoves(t *testing.T) {
	t.Parallel()
	src := collidingNames()
	p, errs := Parse("case.yaml", []byte(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	plan, errs := MakePlan(p, fixedFacts())
	if len(errs) > 0 {
		t.Fatalf("colliding derived ports refused: %v", errs)
	}
	ports := map[string]bool{}
	for _, r := range plan.Roles {
		hs := addrPort(r.Handshake)
		if !strings.Contains(strings.Join(r.Argv, " "), "--data-parallel-rpc-port "+strconv.Itoa(hs)) {
			t.Errorf("%s: the engine is not told its handshake port %d: %v", r.Name, hs, r.Argv)
		}
		if ports[strconv.Itoa(hs)] {
			t.Fatalf("%s: handshake port %d planned twice", r.Name, hs)
		}
		ports[strconv.Itoa(hs)] = true
		if hs < HandshakeBandLo || hs > HandshakeBandHi {
			t.Errorf("%s: handshake port %d outside the band", r.Name, hs)
		}
	}
	prefix := fmt.Sprintf("case.yaml:%d:", markedLine(src))
	joined := strings.Join(plan.Warnings, "\n")
	if !strings.Contains(joined, prefix) || !strings.Contains(joined, "is taken by handshake port of") {
		t.Errorf("no warning at %s naming the collision in:\n%s", prefix, joined)
	}
	again, _ := MakePlan(p, fixedFacts())
	for i := range plan.Roles {
		if plan.Roles[i].Handshake != again.Roles[i].Handshake {
			t.Errorf("%s: ports differ between two plans of one profile", plan.Roles[i].Name)
		}
	}
}

func collidingNames() string {
	seen := map[int]string{}
	for i := 0; ; i++ {
		name := fmt.Sprintf("d%d", i)
		port := HandshakePort(filepath.Join(fixedFacts().RunDir, name))
		if prev, ok := seen[port]; ok {
			return fmt.Sprintf(`model: m
roles:
  - {name: prefill, gpus: [0]}
  - {name: %s, kind: decode, gpus: [1]}
  - {name: %s, kind: decode, gpus: [2]} #<
`, prev, name)
		}
		seen[port] = name
	}
}

// Pins: a profile with many mistakes reports all of them, in file order,
// not just the first.
func TestAllErrorsCollected(t *testing.T) {
	t.Parallel()
	src := `model: m
gatway: {}
roles:
  - name: prefill
    tp: 2
    gpus: [0]
  - name: decode
    kind: decod
    gpus: [1]
restart:
  budget: lots
`
	_, errs := Parse("many.yaml", []byte(src))
	want := []string{"many.yaml:2:1: gatway: unknown key", "many.yaml:6:5: roles[0].gpus: 1 GPU(s) listed but tp × dp = 2 × 1 = 2", "many.yaml:8:5: roles[1].kind", "many.yaml:11:3: restart.budget"}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), errs)
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d = %q, want prefix %q", i, errs[i], w)
		}
	}
	// Once those are fixed, the cross-role rules report together too.
	src2 := `model: m
gateway: {mode: epd}
roles:
  - {name: prefill, tp: 2, gpus: [0]}
  - {name: p2, kind: prefill, gpus: [0]}
`
	errs = loadAndPlan("many.yaml", src2)
	if len(errs) != 4 { // gpu count, gpu shared, no decode, epd without encode
		t.Errorf("got %d errors, want 4:\n%v", len(errs), errs)
	}
}

// Pins: GPUs may repeat across roles on different hosts (the seed's two
// machines), and anchors/merge keys work.
func TestValidProfiles(t *testing.T) {
	t.Parallel()
	for name, src := range map[string]string{
		"hosts differ": `model: m
roles:
  - {name: prefill, gpus: [0, 1], tp: 2}
  - {name: decode, gpus: [0, 1], tp: 2, host: box2, worker: "tcp://10.0.0.5:31001"}
`,
		"anchors and merge keys": `model: m
x-common: &common
  tp: 1
roles:
  - &p {name: prefill, gpus: [0]}
  - <<: *p
    name: decode
    gpus: [1]
`,
		"gpu uuids and string indices": `model: m
roles:
  - {name: prefill, gpus: ["GPU-0e2a7c9a-1111-2222-3333-444455556666"]}
  - {name: decode, gpus: ["1"]}
`,
		"policy no as yaml bool": `model: m
restart: {policy: no}
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`,
	} {
		errs := loadAndPlan(name+".yaml", src)
		if name == "anchors and merge keys" {
			// x-common is not a profile key: the anchor must still be
			// refused as unknown, but the merge itself must work.
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), "x-common: unknown key") {
				t.Errorf("%s: %v", name, errs)
			}
			continue
		}
		if len(errs) > 0 {
			t.Errorf("%s: %v", name, errs)
		}
	}
}

// Pins: when the host's GPU list is known, a local role naming a GPU that
// is not there is an error on its gpus line; remote roles are not checked.
func TestPlanChecksKnownGPUs(t *testing.T) {
	t.Parallel()
	src := `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    gpus: [GPU-abc] #<
  - {name: d2, kind: decode, host: box, gpus: [7], worker: "tcp://10.0.0.5:31000"}
`
	p, errs := Parse("gpu.yaml", []byte(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	facts := fixedFacts()
	facts.GPUs = []GPU{{Index: 0, UUID: "GPU-xyz"}}
	_, errs = MakePlan(p, facts)
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "gpu.yaml:5:5: roles[1].gpus: GPU GPU-abc does not exist") {
		t.Errorf("got %v", errs)
	}
	facts.GPUs = []GPU{{Index: 0}, {Index: 1, UUID: "GPU-abc"}}
	if _, errs = MakePlan(p, facts); len(errs) != 0 {
		t.Errorf("UUID match: %v", errs)
	}
}
