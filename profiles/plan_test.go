package profiles

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

// fixedFacts pins every host-dependent input so plans are reproducible.
func fixedFacts() HostFacts {
	return HostFacts{RunDir: "/run/tsd-test/run", LogDir: "/run/tsd-test/logs", UID: 1000}
}

// loadExample parses an example profile as if it lived in /profiles, so
// resolved paths do not depend on the checkout location.
func loadExample(t *testing.T, name string) *Profile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("examples", name))
	if err != nil {
		t.Fatal(err)
	}
	p, errs := Parse("/profiles/examples/"+name, data)
	if len(errs) > 0 {
		t.Fatalf("load %s: %v", name, errs)
	}
	return p
}

func planExample(t *testing.T, name string) *Plan {
	t.Helper()
	plan, errs := MakePlan(loadExample(t, name), fixedFacts())
	if len(errs) > 0 {
		t.Fatalf("plan %s: %v", name, errs)
	}
	return plan
}

// splitShell splits a POSIX shell line into words (single quotes, double
// quotes, backslashes): enough to prove printed commands paste correctly.
func splitShell(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\\' && i+1 < len(line):
			i++
			if line[i] != '\n' {
				cur.WriteByte(line[i])
				inWord = true
			}
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				t.Fatalf("unterminated single quote in %q", line)
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte("$`\"\\\n", line[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(line[i])
			}
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// The seed page's two PD command lines and its encode line, as printed
// there (docs/protocol.md §10.12).
const (
	seedPrefill = `CUDA_VISIBLE_DEVICES=0,1 ts serve --headless --model <model> --tp 2 \
  --disaggregation-mode prefill --disaggregation-bootstrap-port 8998 \
  --disaggregation-transfer-backend mooncake \
  --dist-init-addr 127.0.0.1:12579 \
  --data-parallel-address 10.0.0.5 --data-parallel-rpc-port 31000 \
  --zmq-engine-index 0`
	seedDecode = `CUDA_VISIBLE_DEVICES=0,1 ts serve --headless --model <model> --tp 2 \
  --disaggregation-mode decode \
  --disaggregation-transfer-backend mooncake \
  --dist-init-addr 127.0.0.1:13580 \
  --data-parallel-address 10.0.0.5 --data-parallel-rpc-port 31001 \
  --zmq-engine-index 0`
	seedEncode = `CUDA_VISIBLE_DEVICES=2 ts serve --headless --model <model> \
  --disaggregation-mode encode --disaggregation-bootstrap-port 18995 \
  --disaggregation-transfer-backend mooncake \
  --dist-init-addr 127.0.0.1:25000 \
  --data-parallel-address 10.0.0.5 --data-parallel-rpc-port 31002 \
  --zmq-engine-index 0`
)

// seedWords splits a seed line (written for a shell, but with a literal
// <model>) into its CUDA_VISIBLE_DEVICES value and argv.
func seedWords(line string) (cvd string, argv []string) {
	line = strings.ReplaceAll(line, "\\\n", " ")
	f := strings.Fields(line)
	return strings.TrimPrefix(f[0], "CUDA_VISIBLE_DEVICES="), f[1:]
}

// Pins: the seed examples plan to the seed page's command lines, flag for
// flag, with its CUDA_VISIBLE_DEVICES.
func TestSeedGolden(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file  string
		lines map[string]string
	}{
		{"seed-pd.yaml", map[string]string{"prefill": seedPrefill, "decode": seedDecode}},
		{"seed-epd.yaml", map[string]string{"prefill": seedPrefill, "decode": seedDecode, "encode": seedEncode}},
	}
	for _, c := range cases {
		plan := planExample(t, c.file)
		if len(plan.Roles) != len(c.lines) {
			t.Fatalf("%s: %d roles, want %d", c.file, len(plan.Roles), len(c.lines))
		}
		for name, line := range c.lines {
			r, ok := plan.Role(name)
			if !ok {
				t.Fatalf("%s: no role %s", c.file, name)
			}
			cvd, want := seedWords(line)
			if !reflect.DeepEqual(r.Argv, want) {
				t.Errorf("%s %s argv:\n got %q\nwant %q", c.file, name, r.Argv, want)
			}
			if r.Env["CUDA_VISIBLE_DEVICES"] != cvd {
				t.Errorf("%s %s CUDA_VISIBLE_DEVICES = %q, want %q", c.file, name, r.Env["CUDA_VISIBLE_DEVICES"], cvd)
			}
			for k, v := range map[string]string{"NO_PROXY": "*", "no_proxy": "*", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTHONUNBUFFERED": "1"} {
				if r.Env[k] != v {
					t.Errorf("%s %s env %s = %q, want %q", c.file, name, k, r.Env[k], v)
				}
			}
		}
		if c.file == "seed-epd.yaml" && plan.Gateway.Mode != ModeEPD {
			t.Errorf("seed-epd mode = %s", plan.Gateway.Mode)
		}
		d, _ := plan.Role("decode")
		if d.Local || d.Host != "decode-host" {
			t.Errorf("decode should be remote on decode-host: %+v", d)
		}
		pf, _ := plan.Role("prefill")
		if want := []int{12579, 12580, 12582, 12583, 12584, 12585}; !reflect.DeepEqual(pf.PortCluster, want) {
			t.Errorf("prefill cluster %v, want %v (the TokenSpeed CI launcher)", pf.PortCluster, want)
		}
		if pf.Bootstrap != "127.0.0.1:8998" {
			t.Errorf("prefill bootstrap %q", pf.Bootstrap)
		}
	}
}

// Pins: the seed's EPD example on Ascend NPUs plans the seed
// page's command lines flag for flag, with each role's devices in
// ASCEND_RT_VISIBLE_DEVICES and no CUDA variable at all.
func TestSeedAscendGolden(t *testing.T) {
	t.Parallel()
	plan := planExample(t, "seed-epd-ascend.yaml")
	if plan.Accelerator != AcceleratorAscend || plan.DevicesVar() != "ASCEND_RT_VISIBLE_DEVICES" {
		t.Fatalf("accelerator %q", plan.Accelerator)
	}
	for name, line := range map[string]string{"prefill": seedPrefill, "decode": seedDecode, "encode": seedEncode} {
		r, ok := plan.Role(name)
		if !ok {
			t.Fatalf("no role %s", name)
		}
		devs, want := seedWords(line)
		if !reflect.DeepEqual(r.Argv, want) {
			t.Errorf("%s argv:\n got %q\nwant %q", name, r.Argv, want)
		}
		if r.Env["ASCEND_RT_VISIBLE_DEVICES"] != devs {
			t.Errorf("%s ASCEND_RT_VISIBLE_DEVICES = %q, want %q", name, r.Env["ASCEND_RT_VISIBLE_DEVICES"], devs)
		}
		for k := range r.Env {
			if strings.HasPrefix(k, "CUDA_") {
				t.Errorf("%s env has %s", name, k)
			}
		}
		if line := r.CommandLine(); !strings.HasPrefix(line, "ASCEND_RT_VISIBLE_DEVICES="+devs+" ") {
			t.Errorf("%s command line starts %q", name, line[:40])
		}
	}
}

// Pins: the JSON plan's keys and values stay stable (docs/profiles.md
// documents them).
func TestPlanJSONGolden(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"seed-pd", "1e1p2d", "seed-epd-ascend", "agg-4", "mixed-conditional"} {
		plan := planExample(t, name+".yaml")
		var buf bytes.Buffer
		if err := plan.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		got := buf.Bytes()
		golden := filepath.Join("testdata", name+".plan.json")
		if *update {
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s plan JSON differs from %s:\n%s", name, golden, got)
		}
		var back Plan
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("plan JSON does not decode: %v", err)
		}
		if !reflect.DeepEqual(&back, plan) {
			t.Errorf("plan JSON does not round-trip")
		}
	}
}

// Pins: the FNV-1a handshake derivation matches docs/protocol.md's worked
// examples (the first two are SMG's own unit-test pair).
func TestHandshakePort(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]int{
		"/tmp/smg-zmq/ts0.ipc":        25152,
		"/tmp/smg-zmq/engine-31000":   22714,
		"/run/smg/prefill-0.ipc":      24875,
		"/run/smg/engine-0.ipc":       25625,
		"":                            26037,
		"/run/tsd/a-very-long-path/x": HandshakePort("/run/tsd/a-very-long-path/x"),
	} {
		if got := HandshakePort(path); got != want {
			t.Errorf("HandshakePort(%q) = %d, want %d", path, got, want)
		}
	}
	w, err := ParseWorker("ipc:///run/smg/engine-0.ipc")
	if err != nil {
		t.Fatal(err)
	}
	if w.Handshake() != "tcp://127.0.0.1:25625" || w.Input() != "ipc:///run/smg/engine-0.ipc-in.sock" || w.Output() != "ipc:///run/smg/engine-0.ipc-out.sock" {
		t.Errorf("ipc worker addresses: %s %s %s", w.Handshake(), w.Input(), w.Output())
	}
	w, err = ParseWorker("tcp://[::1]:31000")
	if err != nil {
		t.Fatal(err)
	}
	if w.Handshake() != "tcp://[::1]:31000" || w.Input() != "tcp://[::1]:0" || w.DialHost() != "::1" {
		t.Errorf("tcp worker addresses: %s %s %s", w.Handshake(), w.Input(), w.DialHost())
	}
}

// Pins: the documented defaults (docs/profiles.md) land in the plan.
func TestPlanDefaults(t *testing.T) {
	t.Parallel()
	src := `model: ./m
roles:
  - name: prefill
    gpus: [0]
  - name: decode
    kind: decode
    replicas: 2
    gpus: [[1], [2]]
    env: {NO_PROXY: "10.0.0.0/8", EXTRA: "x y"}
`
	p, errs := Parse("/srv/prof/x.yaml", []byte(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	plan, errs := MakePlan(p, HostFacts{UID: 7})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if plan.Name != "x" || plan.Model != "/srv/prof/m" || plan.Tokenizer != "/srv/prof/m" || plan.ServedModelName != "m" {
		t.Errorf("names/paths: %q %q %q %q", plan.Name, plan.Model, plan.Tokenizer, plan.ServedModelName)
	}
	if plan.RunDir != "/srv/prof/.tsd/x/run" || plan.LogDir != "/srv/prof/.tsd/x/logs" || plan.ControlSocket != "/srv/prof/.tsd/x/run/tsd.sock" {
		t.Errorf("dirs: %q %q %q", plan.RunDir, plan.LogDir, plan.ControlSocket)
	}
	g := plan.Gateway
	if g.Listen != "127.0.0.1:8000" || g.URL != "http://127.0.0.1:8000" || g.Mode != ModePD || g.BootstrapServer != "engine" ||
		g.Policy != DefaultPolicy() || g.LogFile != "/srv/prof/.tsd/x/logs/gateway.log" {
		t.Errorf("gateway: %+v", g)
	}
	var names []string
	for _, r := range plan.Roles {
		names = append(names, r.Name)
	}
	if !reflect.DeepEqual(names, []string{"prefill", "decode-0", "decode-1"}) {
		t.Errorf("instances %v", names)
	}
	d1, _ := plan.Role("decode-1")
	if d1.Group != "decode" || d1.Env["CUDA_VISIBLE_DEVICES"] != "2" || d1.Env["NO_PROXY"] != "10.0.0.0/8" ||
		d1.Env["no_proxy"] != "*" || d1.Env["EXTRA"] != "x y" || d1.Worker != "ipc:///srv/prof/.tsd/x/run/decode-1" ||
		d1.LogFile != "/srv/prof/.tsd/x/logs/decode-1.log" || d1.Bootstrap != "" {
		t.Errorf("decode-1: %+v", d1)
	}
	want := RestartPlan{Policy: "on-failure", Backoff: Duration(2 * time.Second), MaxBackoff: Duration(2 * time.Minute),
		ResetAfter: Duration(10 * time.Minute), BudgetCount: 5, BudgetWindow: Duration(10 * time.Minute), StopGrace: Duration(30 * time.Second), DrainTimeout: Duration(30 * time.Second)}
	if d1.Restart != want {
		t.Errorf("restart %+v", d1.Restart)
	}
	pf, _ := plan.Role("prefill")
	if pf.Kind != KindPrefill || pf.BootstrapPort != 8998 || pf.Bootstrap != "127.0.0.1:8998" {
		t.Errorf("prefill: %+v", pf)
	}
	if len(plan.Warnings) != 0 {
		t.Errorf("warnings: %v", plan.Warnings)
	}
	// Planned dist-init bases stay ≥100 apart and out of both bands.
	for i, a := range plan.Roles {
		d := a.PortCluster[0]
		if inBand(d, d+6) || inEphemeral(d, d+6) {
			t.Errorf("%s planned into a reserved band: %d", a.Name, d)
		}
		for _, b := range plan.Roles[i+1:] {
			if diff := d - b.PortCluster[0]; diff > -100 && diff < 100 {
				t.Errorf("%s and %s bases %d, %d are closer than 100", a.Name, b.Name, d, b.PortCluster[0])
			}
		}
	}
}

// Pins: gateway.image_urls is off unless the profile says true, and the
// plan carries it (the OpenAI front end fetches http(s) images only then).
func TestGatewayImageURLs(t *testing.T) {
	t.Parallel()
	roles := "roles:\n  - {name: prefill, gpus: [0]}\n  - {name: decode, gpus: [1]}\n"
	for src, want := range map[string]bool{
		"model: m\n" + roles: false,
		"model: m\ngateway: {image_urls: false}\n" + roles:            false,
		"model: m\ngateway:\n  image_urls:\n" + roles:                 false,
		"model: m\ngateway:\n  image_urls: true\n" + roles:            true,
		"model: m\ngateway: {port: 9000, image_urls: true}\n" + roles: true,
	} {
		p, errs := Parse("x.yaml", []byte(src))
		if len(errs) > 0 {
			t.Fatalf("%s: %v", src, errs)
		}
		plan, errs := MakePlan(p, fixedFacts())
		if len(errs) > 0 {
			t.Fatalf("%s: %v", src, errs)
		}
		if plan.Gateway.ImageURLs != want {
			t.Errorf("%q: image_urls %v, want %v", src, plan.Gateway.ImageURLs, want)
		}
		var buf bytes.Buffer
		if err := plan.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		if key := fmt.Sprintf(`"image_urls": %v`, want); !strings.Contains(buf.String(), key) {
			t.Errorf("plan JSON lacks %s:\n%s", key, buf.String())
		}
	}
}

// Pins: a role's restart block overrides the profile's field by field, and
// budgets parse as "N in DURATION".
func TestRestartOverride(t *testing.T) {
	t.Parallel()
	src := `model: m
restart: {policy: always, backoff: 1s, budget: 3 in 1m}
roles:
  - {name: prefill, gpus: [0], restart: {stop_grace: 5s}}
  - {name: decode, gpus: [1], restart: {policy: no}}
`
	p, errs := Parse("r.yaml", []byte(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pf, dc := p.Roles[0].Restart, p.Roles[1].Restart
	if pf.Policy != "always" || pf.Backoff != time.Second || pf.StopGrace != 5*time.Second || pf.BudgetCount != 3 || pf.BudgetWindow != time.Minute {
		t.Errorf("prefill restart %+v", pf)
	}
	if dc.Policy != "no" || dc.StopGrace != 30*time.Second {
		t.Errorf("decode restart %+v", dc)
	}
}

// Pins: ipc sockets move to a short directory when run_dir would make
// them longer than the Unix limit, and tsd plan says so.
func TestSocketFallback(t *testing.T) {
	t.Parallel()
	long := "/" + strings.Repeat("d", 100)
	src := "model: m\nrun_dir: " + long + "\nroles:\n  - {name: prefill, gpus: [0]}\n  - {name: decode, gpus: [1]}\n"
	p, errs := Parse("/p/prof.yaml", []byte(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, c := range []struct {
		facts  HostFacts
		prefix string
	}{
		{HostFacts{UID: 1234, XDGRuntimeDir: "/run/user/1234"}, "/run/user/1234/tsd-"},
		{HostFacts{UID: 1234}, "/tmp/tsd-1234/"},
	} {
		plan, errs := MakePlan(p, c.facts)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		for _, r := range plan.Roles {
			path := strings.TrimPrefix(r.Worker, "ipc://")
			if !strings.HasPrefix(path, c.prefix) || len(path)+len("-out.sock") > MaxSocketPath {
				t.Errorf("worker %s not in short dir %s", r.Worker, c.prefix)
			}
		}
		if !strings.HasPrefix(plan.ControlSocket, c.prefix) {
			t.Errorf("control socket %s not moved", plan.ControlSocket)
		}
		if len(plan.Warnings) != 1 || !strings.Contains(plan.Warnings[0], "run_dir") {
			t.Errorf("warnings %v", plan.Warnings)
		}
	}
	if SocketDir("/a.yaml", HostFacts{}) == SocketDir("/b.yaml", HostFacts{}) {
		t.Error("two profiles share a socket directory")
	}
}

// Pins: the 1E1P2D example honours the CI's ports and warns about those in
// the handshake band and the ephemeral range instead of refusing them.
func TestExplicitPortsWarn(t *testing.T) {
	t.Parallel()
	plan := planExample(t, "1e1p2d.yaml")
	var dists []string
	for _, r := range plan.Roles {
		dists = append(dists, r.Name+"="+r.DistInitAddr)
	}
	want := []string{"encode=127.0.0.1:25000", "prefill=127.0.0.1:26000", "decode-0=127.0.0.1:32000", "decode-1=127.0.0.1:33000"}
	if !reflect.DeepEqual(dists, want) {
		t.Errorf("dist-init %v, want %v", dists, want)
	}
	joined := strings.Join(plan.Warnings, "\n")
	for _, w := range []string{"1e1p2d.yaml:15:5: roles[0].dist_init_port", "roles[1].dist_init_port", "roles[2].dist_init_port[1]: dist-init port cluster 33000-33006 is inside the ephemeral range"} {
		if !strings.Contains(joined, w) {
			t.Errorf("missing warning %q in:\n%s", w, joined)
		}
	}
	if plan.Gateway.Mode != ModeEPD {
		t.Errorf("mode %s", plan.Gateway.Mode)
	}
}

// Pins: every example profile loads and plans cleanly; the demo resolves
// its tokenizer relative to the profile and gets the DP prefill flag.
func TestExamples(t *testing.T) {
	t.Parallel()
	// Only the example files: `make demo` leaves its run and log folder
	// (.tsd/) beside them, which is no profile.
	files, err := filepath.Glob(filepath.Join("examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example profiles: %v", err)
	}
	for _, f := range files {
		p, errs := Load(f)
		if len(errs) > 0 {
			t.Errorf("%s: %v", filepath.Base(f), errs)
			continue
		}
		if _, errs := MakePlan(p, fixedFacts()); len(errs) > 0 {
			t.Errorf("%s: %v", filepath.Base(f), errs)
		}
	}
	plan := planExample(t, "demo.yaml")
	if plan.Tokenizer != "/gateway/tokenizer/testdata/demo" {
		t.Errorf("demo tokenizer %s", plan.Tokenizer)
	}
	pf, _ := plan.Role("prefill")
	if !strings.Contains(strings.Join(pf.Argv, " "), "ts-fake serve --headless") ||
		!strings.Contains(strings.Join(pf.Argv, " "), "--data-parallel-size 2 --disaggregation-mode prefill --disaggregation-bootstrap-port 8998 --load-balance-method round_robin") {
		t.Errorf("demo prefill argv %q", pf.Argv)
	}
	if len(pf.PortCluster) != 7 || pf.PortCluster[6]-pf.PortCluster[0] != 7 {
		t.Errorf("dp2 cluster %v should reach D+7", pf.PortCluster)
	}
}

// Pins: CommandLine output pastes into a real shell and yields the planned
// env and argv, whatever characters they hold.
func TestCommandLineRoundTrip(t *testing.T) {
	t.Parallel()
	r := RolePlan{
		Env:  map[string]string{"CUDA_VISIBLE_DEVICES": "0,1", "NO_PROXY": "*", "Q": `it's "q" $HOME`, "E": ""},
		Argv: []string{"ts", "serve", "--model", "<model>", "--x", "a b", "--y", `$(rm -rf /)`, "--z", "~/m", "--w", "a=b"},
	}
	line := r.CommandLine()
	if !strings.HasPrefix(line, "CUDA_VISIBLE_DEVICES=0,1 ") {
		t.Errorf("CUDA_VISIBLE_DEVICES should come first: %s", line)
	}
	words := splitShell(t, line)
	var gotEnv []string
	i := 0
	for ; i < len(words) && strings.Contains(words[i], "=") && !strings.HasPrefix(words[i], "-"); i++ {
		gotEnv = append(gotEnv, words[i])
	}
	if !reflect.DeepEqual(words[i:], r.Argv) {
		t.Errorf("argv round trip:\n got %q\nwant %q", words[i:], r.Argv)
	}
	var wantEnv []string
	for _, k := range EnvOrder(r.Env) {
		wantEnv = append(wantEnv, k+"="+r.Env[k])
	}
	if !reflect.DeepEqual(gotEnv, wantEnv) {
		t.Errorf("env round trip:\n got %q\nwant %q", gotEnv, wantEnv)
	}
	// And through a real shell, when there is one.
	sh, err := exec.LookPath("sh")
	if err != nil {
		return
	}
	argq := make([]string, len(r.Argv))
	for i, a := range r.Argv {
		argq[i] = ShellQuote(a)
	}
	out, err := exec.Command(sh, "-c", `printf '%s\0' `+strings.Join(argq, " ")+`; printf '%s\0' "$Q"`).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !reflect.DeepEqual(got[:len(r.Argv)], r.Argv) {
		t.Errorf("sh saw %q", got)
	}
	out, err = exec.Command(sh, "-c", "Q="+ShellQuote(r.Env["Q"])+` sh -c 'printf %s "$Q"'`).Output()
	if err != nil || string(out) != r.Env["Q"] {
		t.Errorf("env through sh = %q (%v), want %q", out, err, r.Env["Q"])
	}
}

// Pins: health.stall_action, health.stall_timeout, gateway.queue_timeout
// and restart.drain_timeout default as documented (restart, 30s, 30s,
// 30s), are read when set, and a role's restart block overrides
// drain_timeout like its other restart keys.
func TestHealthDrainQueueKeys(t *testing.T) {
	t.Parallel()
	roles := "roles:\n  - {name: prefill, gpus: [0]}\n  - {name: decode, gpus: [1], restart: {drain_timeout: 2m}}\n"
	cases := []struct {
		src                   string
		action                string
		stall, queue, drainPF time.Duration
	}{
		{"model: m\n" + roles, StallRestart, 30 * time.Second, 30 * time.Second, 30 * time.Second},
		{"model: m\nhealth: {stall_action: wait, stall_timeout: 5s}\ngateway: {queue_timeout: 1m}\nrestart: {drain_timeout: 10s}\n" + roles,
			StallWait, 5 * time.Second, time.Minute, 10 * time.Second},
	}
	for _, c := range cases {
		p, errs := Parse("x.yaml", []byte(c.src))
		if len(errs) > 0 {
			t.Fatalf("%s: %v", c.src, errs)
		}
		plan, errs := MakePlan(p, fixedFacts())
		if len(errs) > 0 {
			t.Fatalf("%s: %v", c.src, errs)
		}
		if plan.Gateway.StallTimeout.D() != c.stall || plan.Gateway.QueueTimeout.D() != c.queue {
			t.Errorf("%q: stall_timeout %s queue_timeout %s", c.src, plan.Gateway.StallTimeout, plan.Gateway.QueueTimeout)
		}
		pf, _ := plan.Role("prefill")
		dc, _ := plan.Role("decode")
		if pf.StallAction != c.action || dc.StallAction != c.action {
			t.Errorf("%q: stall_action %q %q, want %q", c.src, pf.StallAction, dc.StallAction, c.action)
		}
		if pf.Restart.DrainTimeout.D() != c.drainPF || dc.Restart.DrainTimeout.D() != 2*time.Minute {
			t.Errorf("%q: drain_timeout %s %s", c.src, pf.Restart.DrainTimeout, dc.Restart.DrainTimeout)
		}
	}
}

// Pins: an ipc worker whose derived handshake port another deployment
// holds gets the next free port of the band, in the gateway's bind address
// and the engine's --data-parallel-rpc-port alike, with a warning.
func TestHandshakePortMovesWhenTaken(t *testing.T) {
	p := loadExample(t, "demo.yaml")
	plain, errs := MakePlan(p, fixedFacts())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pre, _ := plain.Role("prefill")
	taken := addrPort(pre.Handshake)
	facts := fixedFacts()
	facts.PortFree = func(port int) bool { return port != taken }
	plan, errs := MakePlan(p, facts)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	rp, _ := plan.Role("prefill")
	moved := addrPort(rp.Handshake)
	if moved == taken || moved < HandshakeBandLo || moved > HandshakeBandHi {
		t.Fatalf("handshake %s, derived %d was taken", rp.Handshake, taken)
	}
	if !strings.Contains(strings.Join(rp.Argv, " "), "--data-parallel-rpc-port "+strconv.Itoa(moved)) {
		t.Fatalf("argv %q lacks the moved port %d", rp.Argv, moved)
	}
	for _, w := range plan.Gateway.Workers {
		if w.Role == "prefill" && w.Handshake != rp.Handshake {
			t.Fatalf("gateway binds %s, engine dials %s", w.Handshake, rp.Handshake)
		}
	}
	if !strings.Contains(strings.Join(plan.Warnings, "\n"), "is in use on this host; using "+strconv.Itoa(moved)) {
		t.Fatalf("warnings %q", plan.Warnings)
	}
}
