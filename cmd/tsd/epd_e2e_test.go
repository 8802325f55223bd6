package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// TestE2EDemoEPD: `tsd up` on the demo-epd profile (1E1P1D ts-fake on the
// demo-vl model; ports made free for the test) serves an image chat and a
// text chat; `tsd status` shows the encode role like the others and the
// gateway's encode routing.
func TestE2EDemoEPD(t *testing.T) {
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	model := absPath(t, "../../gateway/vision/testdata/demo-vl")
	port := freePort(t)
	prof := privateProfile(t, "demo-epd.yaml",
		[2]string{"../../gateway/vision/testdata/demo-vl", model},
		[2]string{"command: [ts-fake, serve]", "command: [" + fakeBin + ", serve]"},
		[2]string{"port: 8000", fmt.Sprintf("port: %d", port)},
		[2]string{"bootstrap_port: 18995", fmt.Sprintf("bootstrap_port: %d", freePort(t))},
		[2]string{"kind: prefill\n", fmt.Sprintf("kind: prefill\n    bootstrap_port: %d\n", freePort(t))},
	)
	d := runTSD(t, filepath.Dir(prof), "up", "--headless", filepath.Base(prof))
	for _, r := range []string{"encode", "prefill", "decode"} {
		d.waitLine(0, r, "→ ready")
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	// State comes from the ranks' registration, phase from the engine's
	// "ready" log line: two independent events, so wait for both.
	s := d.waitStatus(func(s snapshot.Snapshot) bool {
		for _, r := range s.Roles {
			if r.State != snapshot.StateReady || r.Phase != "ready" {
				return false
			}
		}
		return len(s.Roles) == 3
	})
	enc := roleStatus(t, s, "encode")
	if enc.Kind != "encode" || enc.RanksRegistered != 1 || enc.RanksExpected != 1 || !enc.Routed || !s.Gateway.Ready || s.Gateway.Mode != "epd" ||
		!strings.Contains(s.Gateway.Note, "encode: 1/1 worker(s) ready, consistent_hashing") {
		t.Fatalf("encode role %+v, gateway %+v", enc, s.Gateway)
	}
	// The encode is ready when its rank registers; its launcher's ready
	// line (the PHASE column) may come a moment later.
	d.waitLine(0, "encode", "headless scheduler(s) ready")
	encodeRow := regexp.MustCompile(`(?m)^\s*encode\s+encode\s+ready\s+ready\s+1/1\s`)
	out, err := d.ctl("status")
	for i := 0; i < 50 && err == nil && !encodeRow.MatchString(out); i++ {
		time.Sleep(100 * time.Millisecond) // the actor folds the milestone in right after the line; no event to wait on from here
		out, err = d.ctl("status")
	}
	if err != nil || !encodeRow.MatchString(out) || !strings.Contains(out, "consistent_hashing") {
		t.Fatalf("tsd status: %v\n%s", err, out)
	}
	t.Logf("tsd status:\n%s", out)

	var img bytes.Buffer
	m := image.NewNRGBA(image.Rect(0, 0, 40, 30))
	for y := 0; y < 30; y++ {
		for x := 0; x < 40; x++ {
			m.Set(x, y, color.NRGBA{uint8(x * 6), uint8(y * 8), 50, 255})
		}
	}
	_ = png.Encode(&img, m)
	url := "data:image/png;base64," + base64.StdEncoding.EncodeToString(img.Bytes())
	hc := &http.Client{Timeout: 30 * time.Second}
	for _, body := range []string{
		fmt.Sprintf(`{"model":"demo-vl","messages":[{"role":"user","content":[{"type":"text","text":"What is it?"},{"type":"image_url","image_url":{"url":%q}}]}],"max_tokens":4}`, url),
		`{"model":"demo-vl","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`,
	} {
		start := time.Now()
		resp, err := hc.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var r struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil || len(r.Choices) != 1 || r.Choices[0].FinishReason == "" {
			t.Fatalf("chat: %d %s\n%s", resp.StatusCode, b, d.output())
		}
		t.Logf("chat answered in %s", time.Since(start))
	}
	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
}
