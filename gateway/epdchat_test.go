package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/openai"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/gateway/vision"
	"github.com/tsd-project/tsd/profiles"
)

// mountOpenAI serves the OpenAI front end on the demo-vl model, as tsd up
// does for a vision-language model directory.
func mountOpenAI(t testing.TB, allowHTTP bool) func(tokenapi.Engine, *http.ServeMux) {
	t.Helper()
	tok, err := tokenizer.Load(demoVL)
	if err != nil {
		t.Fatal(err)
	}
	vis, err := vision.Load(demoVL)
	if err != nil || vis == nil {
		t.Fatalf("vision %v %v", vis, err)
	}
	vis.AllowHTTP = allowHTTP
	vis.URLAllow = []string{"127.0.0.1"} // the test image server is on loopback
	vis.URL = vision.URLLimits{Timeout: 3 * time.Second}
	return func(e tokenapi.Engine, mux *http.ServeMux) {
		openai.New(e, tok, openai.Options{Vision: vis}).Register(mux)
	}
}

func imageChat(url string) string {
	return fmt.Sprintf(`{"messages":[{"role":"user","content":[{"type":"text","text":"Describe"},{"type":"image_url","image_url":{"url":%q}}]}],"max_tokens":4}`, url)
}

func postChat(t testing.TB, base, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// 1E-1P-2D over HTTP: an image chat and a text chat are answered; bad
// images are 400s naming the problem and reach no engine.
func TestEPDChatHTTP(t *testing.T) {
	t.Parallel()
	rs := epdRoles(1, 2)
	c := newClusterPlan(t, Options{Mount: mountOpenAI(t, true)}, "tsd", profiles.ModeEPD, rs...)
	c.waitRegistered(roleNames(rs)...)
	img := "data:image/png;base64," + base64.StdEncoding.EncodeToString(testPNG(t, 40, 30, 80))
	var lat []time.Duration
	for i := 0; i < 4; i++ {
		start := time.Now()
		st, body := postChat(t, c.base, imageChat(img))
		lat = append(lat, time.Since(start))
		var r struct {
			Choices []struct {
				Message      struct{ Content string }
				FinishReason string `json:"finish_reason"`
			}
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			}
		}
		if st != 200 || json.Unmarshal([]byte(body), &r) != nil || len(r.Choices) != 1 || r.Choices[0].FinishReason == "" {
			t.Fatalf("image chat: %d %s", st, body)
		}
	}
	t.Logf("EPD chat latency through ts-fake (1 image, 4 tokens, 1E-1P-2D): %v", lat)
	stream := strings.Replace(imageChat(img), `"max_tokens":4`, `"max_tokens":4,"stream":true`, 1)
	if st, body := postChat(t, c.base, stream); st != 200 || !strings.HasSuffix(body, "data: [DONE]\n\n") || !strings.Contains(body, `"finish_reason":"length"`) {
		t.Fatalf("streaming image chat: %d %s", st, body)
	}
	if st, body := postChat(t, c.base, `{"messages":[{"role":"user","content":"hello"}],"max_tokens":3}`); st != 200 {
		t.Fatalf("text chat: %d %s", st, body)
	}
	if n := strings.Count(c.log("encode-a"), "EncodeRequest received"); n != 5 {
		t.Errorf("encoder saw %d requests, want 5", n)
	}

	before := dispatched(c.g)
	encBefore := strings.Count(c.log("encode-a"), "EncodeRequest received")
	good := testPNG(t, 40, 30, 80)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + l.Addr().String() + "/img.png"
	_ = l.Close()
	for _, tc := range []struct{ url, want string }{
		{"data:image/png;base64," + base64.StdEncoding.EncodeToString(good[:len(good)/2]), "image 0"},
		{"data:image/png;base64," + base64.StdEncoding.EncodeToString(hugePNGHeader(60000, 60000)), "pixel limit"},
		{"data:text/plain;base64," + base64.StdEncoding.EncodeToString([]byte("not an image")), "text/plain"},
		{closedURL, "could not be fetched"},
	} {
		st, body := postChat(t, c.base, imageChat(tc.url))
		if st != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%.40s: %d %s (want 400 mentioning %q)", tc.url, st, body, tc.want)
		}
	}
	if after := dispatched(c.g); after != before {
		t.Errorf("bad images dispatched %v requests", after-before)
	}
	if n := strings.Count(c.log("encode-a"), "EncodeRequest received"); n != encBefore {
		t.Errorf("bad images reached the encoder (%d new requests)", n-encBefore)
	}
	for _, r := range rs {
		if n, _ := c.g.InFlight(r.name); n != 0 {
			t.Errorf("%s: %d in flight", r.name, n)
		}
	}
}

// PD mode (no encode role): an image chat is a 400 that says so.
func TestPDChatImageRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t, Options{Mount: mountOpenAI(t, false)}, role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode})
	c.waitRegistered("prefill", "decode")
	img := "data:image/png;base64," + base64.StdEncoding.EncodeToString(testPNG(t, 8, 8, 1))
	st, body := postChat(t, c.base, imageChat(img))
	if st != 400 || !strings.Contains(body, "no encode role") {
		t.Fatalf("%d %s", st, body)
	}
	if dispatched(c.g) != 0 {
		t.Fatal("dispatched")
	}
}

// hugePNGHeader is a PNG claiming w×h pixels (no pixel data): refused by
// its dimensions before anything is allocated.
func hugePNGHeader(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 2
	chunk := func(typ string, data []byte) {
		_ = binary.Write(&b, binary.BigEndian, uint32(len(data)))
		b.WriteString(typ)
		b.Write(data)
		_ = binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(append([]byte(typ), data...)))
	}
	chunk("IHDR", ihdr)
	chunk("IEND", nil)
	return b.Bytes()
}
