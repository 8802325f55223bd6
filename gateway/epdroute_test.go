package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/vision"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/testkit/testimg"
)

const demoVL = "vision/testdata/demo-vl"

func testPNG(t testing.TB, w, h int, shade uint8) []byte { return testimg.PNG(t, w, h, shade) }

// imageRequest is a prompt with one anchor per image, prepared the way
// the OpenAI front end does (vision.Prepare with the demo-vl model).
func imageRequest(t testing.TB, seed int64, maxTokens int, raws ...[]byte) tokenapi.Request {
	t.Helper()
	cfg, err := vision.LoadConfig(demoVL)
	if err != nil {
		t.Fatal(err)
	}
	vt, err := vision.LoadTokens(demoVL)
	if err != nil {
		t.Fatal(err)
	}
	ids := []int32{1, 2}
	for range raws {
		ids = append(ids, vt.Start, vt.Pad, vt.End, 3)
	}
	out, imgs, err := vision.Prepare(ids, raws, cfg, vt, vision.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	r := genRequest(seed, maxTokens)
	r.InputIDs, r.Images = out, imgs
	return r
}

// collect drains a generation.
func collectGen(t testing.TB, ch <-chan tokenapi.Event) ([]int32, *tokenapi.Finish, error) {
	t.Helper()
	var ids []int32
	for ev := range ch {
		if ev.Err != nil {
			for range ch {
			}
			return ids, nil, ev.Err
		}
		ids = append(ids, ev.TokenIDs...)
		if ev.Finish != nil {
			return ids, ev.Finish, nil
		}
	}
	return ids, nil, nil
}

func epdRoles(encoders, decoders int) []role {
	var rs []role
	for i := 0; i < encoders; i++ {
		rs = append(rs, role{name: "encode-" + string(rune('a'+i)), kind: profiles.KindEncode})
	}
	rs = append(rs, role{name: "prefill", kind: profiles.KindPrefill})
	for i := 0; i < decoders; i++ {
		rs = append(rs, role{name: "decode-" + string(rune('a'+i)), kind: profiles.KindDecode})
	}
	return rs
}

func roleNames(rs []role) []string {
	var n []string
	for _, r := range rs {
		n = append(n, r.name)
	}
	return n
}

// 1E-1P-1D: an image request goes encode → prefill → decode and answers
// with the decode's tokens; a text request skips the encoder.
func TestEPDImageAndText(t *testing.T) {
	t.Parallel()
	rs := epdRoles(1, 1)
	c := newClusterPlan(t, Options{}, "tsd", profiles.ModeEPD, rs...)
	c.waitRegistered(roleNames(rs)...)
	if st := c.g.Status(); !st.Ready || st.Note != "encode: 1/1 worker(s) ready, consistent_hashing" {
		t.Fatalf("status %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	ch, err := c.g.Generate(ctx, imageRequest(t, 5, 4, testPNG(t, 40, 30, 80)))
	if err != nil {
		t.Fatal(err)
	}
	ids, fin, err := collectGen(t, ch)
	if err != nil || fin == nil || !equalIDs(ids, expected(5, 4)) {
		t.Fatalf("image request: %v %+v %v", ids, fin, err)
	}
	t.Logf("EPD request (1 image, 4 tokens) through ts-fake: %s", time.Since(start))
	ch, err = c.g.Generate(ctx, genRequest(6, 3))
	if err != nil {
		t.Fatal(err)
	}
	if ids, fin, err := collectGen(t, ch); err != nil || fin == nil || !equalIDs(ids, expected(6, 3)) {
		t.Fatalf("text request: %v %+v %v", ids, fin, err)
	}
	if n := strings.Count(c.log("encode-a"), "EncodeRequest received"); n != 1 {
		t.Errorf("encoder saw %d requests, want 1 (the text request must skip it)\n%s", n, c.log("encode-a"))
	}
}

// log is a role's output so far.
func (c *cluster) log(name string) string {
	c.mu.Lock()
	b := c.outs[name]
	c.mu.Unlock()
	if b == nil {
		return ""
	}
	return b.String()
}

// 2E-1P-2D: the same image always goes to the same encoder (the one the
// ring over both encoders names), different images spread, every request
// answers.
func TestEPDStableEncoderChoice(t *testing.T) {
	t.Parallel()
	rs := epdRoles(2, 2)
	c := newClusterPlan(t, Options{}, "tsd", profiles.ModeEPD, rs...)
	c.waitRegistered(roleNames(rs)...)
	ring := epd.NewRing([]string{"encode-a", "encode-b"}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	owners := map[string]bool{}
	for k := 0; k < 6; k++ {
		img := testPNG(t, 24+4*k, 20, uint8(40*k))
		hash, _ := vision.ItemHash(img)
		owner := ring.Pick(hash)
		owners[owner] = true
		for rep := 0; rep < 2; rep++ {
			r := imageRequest(t, int64(k), 2, img)
			r.RID = "img" + string(rune('0'+k)) + "x"
			ch, err := c.g.Generate(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if ids, fin, err := collectGen(t, ch); err != nil || fin == nil || !equalIDs(ids, expected(int64(k), 2)) {
				t.Fatalf("image %d rep %d: %v %+v %v", k, rep, ids, fin, err)
			}
		}
		for _, enc := range []string{"encode-a", "encode-b"} {
			n := strings.Count(c.log(enc), "EncodeRequest received: rid="+"img"+string(rune('0'+k))+"x-")
			if want := map[bool]int{true: 2, false: 0}[enc == owner]; n != want {
				t.Errorf("image %d: %s saw %d encode requests, want %d (owner %s)", k, enc, n, want, owner)
			}
		}
	}
	if len(owners) != 2 {
		t.Logf("all six images hashed to one encoder: %v", owners)
	}
	// Per-encoder selection counters agree with the encode logs.
	for _, enc := range []string{"encode-a", "encode-b"} {
		got := testutil.ToFloat64(c.g.metrics.selection.WithLabelValues(enc, profiles.KindEncode, "0"))
		if want := strings.Count(c.log(enc), "EncodeRequest received"); int(got) != want {
			t.Errorf("%s: smg_worker_selection_total %v, encode log %d", enc, got, want)
		}
	}
	// The ring follows the ready set: with encode-a out of routing every
	// image goes to encode-b; back in, the original owners return.
	img := testPNG(t, 24, 20, 0)
	hash, _ := vision.ItemHash(img)
	setRouted(c.g, "encode-a", false)
	if got := c.g.encodeRing().Pick(hash); got != "encode-b" {
		t.Fatalf("with encode-a out: %s", got)
	}
	ch, err := c.g.Generate(ctx, imageRequest(t, 9, 2, img))
	if err != nil {
		t.Fatal(err)
	}
	if _, fin, err := collectGen(t, ch); err != nil || fin == nil {
		t.Fatalf("with encode-a out: %+v %v", fin, err)
	}
	setRouted(c.g, "encode-a", true)
	if got := c.g.encodeRing().Pick(hash); got != ring.Pick(hash) {
		t.Fatalf("back in: %s, want %s", got, ring.Pick(hash))
	}
	for _, r := range rs {
		if n, _ := c.g.InFlight(r.name); n != 0 {
			t.Errorf("%s: %d in flight after all finished", r.name, n)
		}
	}
}

// An encode leg that ends without an embedding (here: the encoder hangs on
// its request and the supervisor ends the role's requests, as it does when
// a restart's drain gives up) fails the image request at once with an
// error naming the encode leg and the reason, instead of after the
// prefill's embedding timeout; the prefill and decode legs are aborted.
func TestEPDEncodeFailureFailsEarly(t *testing.T) {
	t.Parallel()
	rs := []role{{name: "encode-a", kind: profiles.KindEncode, extra: []string{"--fake-hang-after-requests", "1"}},
		{name: "prefill", kind: profiles.KindPrefill}, {name: "decode-a", kind: profiles.KindDecode}}
	c := newClusterPlan(t, Options{}, "tsd", profiles.ModeEPD, rs...)
	c.waitRegistered(roleNames(rs)...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ch, err := c.g.Generate(ctx, imageRequest(t, 1, 4, testPNG(t, 40, 30, 80)))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	setRouted(c.g, "encode-a", false)
	if n := c.g.DrainCount("encode-a"); n != 1 {
		t.Fatalf("DrainCount(encode-a) %d, want 1", n)
	}
	c.g.AbortRole("encode-a", "restart requested")
	_, fin, err := collectGen(t, ch)
	if err == nil || !strings.Contains(err.Error(), "encode leg for image 0 failed") || !strings.Contains(err.Error(), "restart requested") {
		t.Fatalf("err %v, finish %+v", err, fin)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("failed after %s", el)
	}
	for _, r := range []string{"prefill", "decode-a"} {
		if n, _ := c.g.InFlight(r); n != 0 {
			t.Errorf("%s: %d in flight", r, n)
		}
	}
	if c.g.Ready() {
		t.Error("ready without a routed encoder in epd mode")
	}
}

// BenchmarkEPDImageRequest measures one image request end to end through
// unpaced ts-fake engines (1E-1P-1D): gateway preparation is excluded (the
// request is prepared once); encode, embedding transfer, prefill, KV
// transfer and 4 decode tokens are included.
func BenchmarkEPDImageRequest(b *testing.B) {
	unpaced := []string{"--fake-tokens-per-s", "0"}
	rs := []role{{name: "encode-a", kind: profiles.KindEncode, extra: unpaced}, {name: "prefill", kind: profiles.KindPrefill, extra: unpaced},
		{name: "decode-a", kind: profiles.KindDecode, extra: unpaced}}
	c := newClusterPlan(b, Options{}, "tsd", profiles.ModeEPD, rs...)
	c.waitRegistered(roleNames(rs)...)
	r := imageRequest(b, 1, 4, testPNG(b, 40, 30, 80))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ch, err := c.g.Generate(context.Background(), r)
		if err != nil {
			b.Fatal(err)
		}
		if _, fin, err := collectGen(b, ch); err != nil || fin == nil {
			b.Fatal(fin, err)
		}
	}
}

// BenchmarkPDTextRequest is the same without the image (for comparison).
func BenchmarkPDTextRequest(b *testing.B) {
	unpaced := []string{"--fake-tokens-per-s", "0"}
	rs := []role{{name: "prefill", kind: profiles.KindPrefill, extra: unpaced}, {name: "decode-a", kind: profiles.KindDecode, extra: unpaced}}
	c := newClusterPlan(b, Options{}, "tsd", profiles.ModeEPD, rs...)
	c.waitRegistered(roleNames(rs)...)
	r := genRequest(1, 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ch, err := c.g.Generate(context.Background(), r)
		if err != nil {
			b.Fatal(err)
		}
		if _, fin, err := collectGen(b, ch); err != nil || fin == nil {
			b.Fatal(fin, err)
		}
	}
}

// EPD readiness needs an encode rank too: with the encode role out of
// routing (stopped, restarting) /readiness answers 503 like the status's
// Ready, and the worker counts include the encoders.
func TestEPDReadinessNeedsEncode(t *testing.T) {
	t.Parallel()
	rs := epdRoles(1, 1)
	c := newClusterPlan(t, Options{}, "tsd", profiles.ModeEPD, rs...)
	c.waitRegistered(roleNames(rs)...)
	readiness := func() (int, map[string]any) {
		t.Helper()
		code, body := httpGet(t, c.base+"/readiness")
		var v map[string]any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("readiness %d %q: %v", code, body, err)
		}
		return code, v
	}
	if code, v := readiness(); code != 200 || v["healthy_workers"] != 3.0 || v["total_workers"] != 3.0 {
		t.Fatalf("all ready: %d %v", code, v)
	}
	setRouted(c.g, "encode-a", false)
	if code, v := readiness(); code != 503 || v["healthy_workers"] != 2.0 || v["total_workers"] != 3.0 || c.g.Status().Ready {
		t.Fatalf("encode out of routing: %d %v, status ready %v", code, v, c.g.Status().Ready)
	}
	setRouted(c.g, "encode-a", true)
	if code, _ := readiness(); code != 200 {
		t.Fatalf("encode back: %d", code)
	}
}
