package main

// End-to-end runs of the shipped EPD example profiles themselves (seed-epd
// and 1e1p2d) through `tsd up --headless` on ts-fake. The only
// changes are the ones one GPU-less machine needs; fakeExample documents
// each of them.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/tsd-project/tsd/gateway/openai"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/testkit/testports"
)

// fakeExample loads profiles/examples/<name>, applies the changes every
// example needs to run here on ts-fake, then edit's example-specific ones,
// and writes the result into a fresh directory. It returns that directory
// and the profile path inside it.
//
// Changes every example gets, and why:
//   - engine.command → [ts-fake, serve]: there is no `ts` and no GPU here.
//   - model and tokenizer → gateway/vision/testdata/demo-vl: the examples
//     name weights that do not exist here; demo-vl is the tiny
//     vision-language stand-in the gateway can tokenize and preprocess
//     images for (served as "demo-vl", the model directory's base name).
//   - gateway.host → 127.0.0.1: tests bind loopback only (seed-epd listens
//     on 0.0.0.0); gateway.port → a free port: 8000 may be taken and tests
//     run in parallel.
//   - every explicit dist_init_port / bootstrap_port → a free one (a list
//     stays a list, one per replica): the examples' fixed ports (25000,
//     12579, 18995, 8998, CI's 26000/32000/33000/19311) may be taken here
//     and would collide between parallel tests.
//
// The profile lands in a private temporary directory, so its default run
// and log dirs (.tsd/NAME/run, .tsd/NAME/logs, beside the profile) are private.
func fakeExample(t *testing.T, name string, edit func(p map[string]any)) (dir, path string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("../../profiles/examples", name))
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := yaml.Unmarshal(src, &p); err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	model, err := filepath.Abs("../../gateway/vision/testdata/demo-vl")
	if err != nil {
		t.Fatal(err)
	}
	p["model"] = model
	p["tokenizer"] = model
	eng, _ := p["engine"].(map[string]any)
	if eng == nil {
		eng = map[string]any{}
	}
	eng["command"] = []any{fakeBin, "serve"}
	p["engine"] = eng
	gw, _ := p["gateway"].(map[string]any)
	if gw == nil {
		gw = map[string]any{}
	}
	gw["host"] = "127.0.0.1"
	gw["port"] = freePort(t)
	p["gateway"] = gw
	for _, r := range exampleRoles(t, p) {
		if v, ok := r["dist_init_port"]; ok {
			r["dist_init_port"] = freePorts(t, v, freeCluster)
		}
		if v, ok := r["bootstrap_port"]; ok {
			r["bootstrap_port"] = freePorts(t, v, freePort)
		}
	}
	if edit != nil {
		edit(p)
	}
	out, err := yaml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	path = filepath.Join(dir, name)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, path
}

func exampleRoles(t *testing.T, p map[string]any) []map[string]any {
	t.Helper()
	list, ok := p["roles"].([]any)
	if !ok {
		t.Fatalf("example has no roles list: %T", p["roles"])
	}
	var out []map[string]any
	for _, r := range list {
		m, ok := r.(map[string]any)
		if !ok {
			t.Fatalf("role is %T", r)
		}
		out = append(out, m)
	}
	return out
}

func exampleRole(t *testing.T, p map[string]any, name string) map[string]any {
	t.Helper()
	for _, r := range exampleRoles(t, p) {
		if r["name"] == name {
			return r
		}
	}
	t.Fatalf("example has no role %q", name)
	return nil
}

// freePorts replaces a port or a per-replica list of ports with free ones.
func freePorts(t *testing.T, v any, pick func(*testing.T) int) any {
	if list, ok := v.([]any); ok {
		out := make([]any, len(list))
		for i := range list {
			out[i] = pick(t)
		}
		return out
	}
	return pick(t)
}

// freeCluster is a dist-init port whose whole cluster (the port and the
// ClusterSpan ports above it, which the planner checks) is free and
// reserved for the test.
func freeCluster(t *testing.T) int {
	t.Helper()
	return testports.Range(t, 7)
}

// seedEPDLocal are seed-epd.yaml's changes beyond fakeExample's:
//   - the tcp workers name 10.0.0.5, which is not this machine, so the
//     gateway could not bind them → tcp://127.0.0.1 with free ports (tcp
//     workers stay tcp, as in the seed);
//   - decode lives on `decode-host`, reusing GPUs 0,1 there → local (tsd
//     spawns it, nothing here would dial in otherwise) on fake GPUs 3,4,
//     because two local roles may not share GPUs. ts-fake ignores the
//     indices, so tp=2 stays as in the seed.
func seedEPDLocal(t *testing.T) func(map[string]any) {
	return func(p map[string]any) {
		for _, r := range exampleRoles(t, p) {
			if w, ok := r["worker"].(string); ok {
				if !strings.HasPrefix(w, "tcp://10.0.0.5:") {
					t.Fatalf("seed-epd.yaml changed: worker %q", w)
				}
				r["worker"] = fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
			}
		}
		dec := exampleRole(t, p, "decode")
		if dec["host"] != "decode-host" {
			t.Fatalf("seed-epd.yaml changed: decode host %v", dec["host"])
		}
		delete(dec, "host")
		dec["gpus"] = []any{3, 4}
	}
}

// pngURL is a data: URL of a small PNG whose pixels depend on shade, so
// each shade is a different image (and a different encode hash).
func pngURL(t *testing.T, shade int) string {
	t.Helper()
	m := image.NewNRGBA(image.Rect(0, 0, 40, 30))
	for y := 0; y < 30; y++ {
		for x := 0; x < 40; x++ {
			m.Set(x, y, color.NRGBA{uint8(x*6 + shade), uint8(y*8 + 3*shade), uint8(50 + 7*shade), 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

// chat sends one chat completion (with an image when url is set) and
// requires an answer.
func chat(t *testing.T, d *deployment, base, url string) {
	t.Helper()
	body := `{"model":"demo-vl","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`
	if url != "" {
		body = fmt.Sprintf(`{"model":"demo-vl","messages":[{"role":"user","content":[{"type":"text","text":"What is it?"},{"type":"image_url","image_url":{"url":%q}}]}],"max_tokens":4}`, url)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, d.output())
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r openai.ChatCompletion
	if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil || len(r.Choices) != 1 || r.Choices[0].FinishReason == "" || r.Usage.CompletionTokens == 0 {
		t.Fatalf("chat (image %v): %d %s\n%s", url != "", resp.StatusCode, b, d.output())
	}
}

var encodeSelection = regexp.MustCompile(`(?m)^smg_worker_selection_total\{([^}]*)\} (\S+)$`)

// encodeChoices reads the gateway's /metrics: encode legs per encode worker.
func encodeChoices(t *testing.T, base string) map[string]int {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	out := map[string]int{}
	for _, m := range encodeSelection.FindAllStringSubmatch(string(b), -1) {
		if !strings.Contains(m[1], `worker_type="encode"`) {
			continue
		}
		w := regexp.MustCompile(`worker="([^"]*)"`).FindStringSubmatch(m[1])
		v, err := strconv.ParseFloat(m[2], 64)
		if w == nil || err != nil {
			t.Fatalf("metric line %q", m[0])
		}
		out[w[1]] += int(v)
	}
	return out
}

// chatImageOn sends an image chat and returns the one encode worker whose
// counter grew by exactly one (and fails unless exactly one did).
func chatImageOn(t *testing.T, d *deployment, base, url string) string {
	t.Helper()
	before := encodeChoices(t, base)
	chat(t, d, base, url)
	after := encodeChoices(t, base)
	var grew []string
	for w, n := range after {
		if n != before[w] {
			if n != before[w]+1 {
				t.Fatalf("encode worker %s counted %d → %d for one image", w, before[w], n)
			}
			grew = append(grew, w)
		}
	}
	if len(grew) != 1 {
		t.Fatalf("one image chat moved encode counters %v → %v", before, after)
	}
	return grew[0]
}

// runExample brings the profile up, checks every role is ready and routed,
// serves a text chat and an image chat, checks encode choice is stable for
// a repeated image, then stops tsd and checks nothing is left. It returns
// the encode workers that served images.
func runExample(t *testing.T, dir, path string, roles []string, wantEncoders int) map[string]bool {
	t.Helper()
	start := time.Now()
	d := runTSD(t, dir, "up", "--headless", filepath.Base(path))
	s := waitAllReady(t, d, roles)
	t.Logf("ready in %s", time.Since(start))
	if !s.Gateway.Ready || s.Gateway.Mode != "epd" {
		t.Fatalf("gateway %+v", s.Gateway)
	}
	base := s.Gateway.URL
	var pids []int
	encoders := 0
	for _, r := range s.Roles {
		if !r.Routed || r.RanksRegistered != r.RanksExpected || r.PID <= 0 {
			t.Fatalf("role not admitted: %+v", r)
		}
		if r.Kind == "encode" {
			encoders++
		}
		pids = append(pids, groupProcs(r.PID)...)
	}
	if encoders != wantEncoders {
		t.Fatalf("%d encode instances, want %d", encoders, wantEncoders)
	}

	chat(t, d, base, "")
	img := pngURL(t, 0)
	first := chatImageOn(t, d, base, img)
	for range 2 {
		if w := chatImageOn(t, d, base, img); w != first {
			t.Fatalf("the same image went to %s, then %s", first, w)
		}
	}
	used := map[string]bool{first: true}
	// Different images until one lands elsewhere (with one encoder: one
	// different image); each is then repeated and must stay put.
	for shade := 1; shade <= 8; shade++ {
		other := pngURL(t, shade)
		w := chatImageOn(t, d, base, other)
		if again := chatImageOn(t, d, base, other); again != w {
			t.Fatalf("image %d went to %s, then %s", shade, w, again)
		}
		used[w] = true
		if len(used) == wantEncoders {
			break
		}
	}
	if len(used) != wantEncoders {
		t.Fatalf("images only ever went to %v of %d encoders", used, wantEncoders)
	}
	// The counters agree with what the encode engines logged.
	for w, n := range encodeChoices(t, base) {
		b, err := os.ReadFile(filepath.Join(stateDir(t, dir), "logs", w+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(string(b), "EncodeRequest received"); got != n {
			t.Fatalf("%s: /metrics counts %d encode legs, its log %d", w, n, got)
		}
	}

	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
	waitExited(t, pids, 2*time.Second)
	for _, r := range s.Roles {
		assertGone(t, r.PID)
	}
	if ents, _ := os.ReadDir(filepath.Join(stateDir(t, dir), "run")); len(ents) != 0 {
		t.Fatalf("run dir not clean: %v", ents)
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), time.Second); err == nil {
		t.Fatalf("gateway %s still listening after stop", base)
	}
	t.Logf("whole run %s", time.Since(start))
	return used
}

// waitAllReady waits for every role's "→ ready" line (a role is ready once
// the gateway admitted its ranks) and returns the status then.
func waitAllReady(t *testing.T, d *deployment, roles []string) snapshot.Snapshot {
	t.Helper()
	for _, r := range roles {
		d.waitLine(0, r, "→ ready")
	}
	s := d.status()
	if len(s.Roles) != len(roles) {
		t.Fatalf("roles %+v, want %v", s.Roles, roles)
	}
	return s
}

// TestE2EExampleSeedEPD: profiles/examples/seed-epd.yaml, made local (see
// fakeExample, seedEPDLocal), runs end to end on ts-fake.
func TestE2EExampleSeedEPD(t *testing.T) {
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	t.Parallel()
	dir, path := fakeExample(t, "seed-epd.yaml", seedEPDLocal(t))
	runExample(t, dir, path, []string{"encode", "prefill", "decode"}, 1)
}

// TestE2EExample1E1P2D: profiles/examples/1e1p2d.yaml (TP1 encode, prefill,
// two decode replicas) runs end to end on ts-fake.
func TestE2EExample1E1P2D(t *testing.T) {
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	t.Parallel()
	dir, path := fakeExample(t, "1e1p2d.yaml", nil)
	runExample(t, dir, path, []string{"encode", "prefill", "decode-0", "decode-1"}, 1)
}

// TestE2EExample1E1P2DTwoEncoders: 1e1p2d.yaml with `replicas: 2` on its
// encode role (encode-0, encode-1: separate engines, dp stays 1): a
// repeated image always goes to the same encoder, and images do reach
// both.
func TestE2EExample1E1P2DTwoEncoders(t *testing.T) {
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	t.Parallel()
	dir, path := fakeExample(t, "1e1p2d.yaml", func(p map[string]any) {
		enc := exampleRole(t, p, "encode")
		enc["replicas"] = 2
		enc["gpus"] = []any{[]any{0}, []any{4}} // GPU 4: the example's four are taken
		enc["dist_init_port"] = []any{freeCluster(t), freeCluster(t)}
		enc["bootstrap_port"] = []any{freePort(t), freePort(t)}
	})
	used := runExample(t, dir, path, []string{"encode-0", "encode-1", "prefill", "decode-0", "decode-1"}, 2)
	if !used["encode-0"] || !used["encode-1"] {
		t.Fatalf("encoders used: %v", used)
	}
}
