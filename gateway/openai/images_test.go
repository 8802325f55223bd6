package openai

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/gateway/vision"
)

const demoVLDir = "../vision/testdata/demo-vl"

func pngBytes(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.NRGBA{uint8(x * 5), uint8(y * 3), 90, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// hugePNG is a valid PNG header claiming w×h pixels (no pixel data): the
// decoder must refuse it by its dimensions before allocating anything.
func hugePNG(w, h uint32) []byte {
	var b bytes.Buffer
	b.Write([]byte("\x89PNG\r\n\x1a\n"))
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 2 // 8-bit RGB
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

func dataURL(mime string, b []byte) string {
	return "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(b)
}

func chatWithImage(url string) string {
	return fmt.Sprintf(`{"messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":%q}}]}],"max_tokens":3}`, url)
}

// imageEngine adds ImageSupport to the fake engine.
type imgFake struct {
	*fakeEngine
	support error
}

func (f imgFake) ImageSupport() error { return f.support }

func vlServer(t *testing.T, support error, allowHTTP bool) (*fakeEngine, string) {
	t.Helper()
	return vlServerWith(t, support, func(v *vision.Intake) { v.AllowHTTP = allowHTTP })
}

func vlServerWith(t *testing.T, support error, set func(*vision.Intake)) (*fakeEngine, string) {
	t.Helper()
	tk, err := tokenizer.Load(demoVLDir)
	if err != nil {
		t.Fatal(err)
	}
	v, err := vision.Load(demoVLDir)
	if err != nil || v == nil {
		t.Fatalf("vision %v %v", v, err)
	}
	v.URL = vision.URLLimits{Timeout: 2 * time.Second}
	set(v)
	eng := newFake(tk, "A picture.")
	return eng, serveEngine(t, imgFake{eng, support}, tk, Options{Vision: v}, "").URL
}

// An image part becomes one anchor expanded to the image's pad tokens and
// a tokenapi.Image whose span covers exactly those pads.
func TestChatImagePrepared(t *testing.T) {
	t.Parallel()
	eng, base := vlServer(t, nil, false)
	resp, body := post(t, base+"/v1/chat/completions", chatWithImage(dataURL("image/png", pngBytes(t, 40, 30))))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	reqs := eng.requests()
	if len(reqs) != 1 || len(reqs[0].Images) != 1 {
		t.Fatalf("requests %+v", reqs)
	}
	r, im := reqs[0], reqs[0].Images[0]
	pads := 0
	for _, id := range r.InputIDs {
		if id == im.PadToken {
			pads++
		}
	}
	rows := im.GridTHW[0] * im.GridTHW[1] * im.GridTHW[2]
	if pads != im.Offset[1]-im.Offset[0] || pads != rows/4 || len(im.Pixels) != rows*im.Dim || im.Hash == "" {
		t.Fatalf("pads %d, image %+v (pixels %d)", pads, im.Offset, len(im.Pixels))
	}
	for p := im.Offset[0]; p < im.Offset[1]; p++ {
		if r.InputIDs[p] != im.PadToken {
			t.Fatalf("position %d is %d", p, r.InputIDs[p])
		}
	}
	// A text-only chat on the same model carries no images.
	post(t, base+"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":2}`)
	if reqs := eng.requests(); len(reqs[1].Images) != 0 {
		t.Fatalf("text chat got images")
	}
}

// Bad images are 400s naming the problem, and nothing reaches the engine.
func TestChatBadImages(t *testing.T) {
	t.Parallel()
	eng, base := vlServer(t, nil, false)
	_, httpBase := vlServer(t, nil, true)
	good := pngBytes(t, 40, 30)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/cat.png"
	_ = l.Close()
	for _, c := range []struct {
		base, body, want string
	}{
		{base, chatWithImage(dataURL("image/png", good[:len(good)/2])), "image 0"},
		{base, chatWithImage(dataURL("image/png", hugePNG(100000, 100000))), "pixel limit"},
		{base, chatWithImage(dataURL("image/gif", []byte("GIF89a..."))), "image/gif"},
		{base, chatWithImage(dataURL("text/plain", []byte("hello"))), "text/plain"},
		{base, chatWithImage("http://127.0.0.1:1/cat.png"), "disabled"},
		{httpBase, chatWithImage(closed), "could not be fetched"},
		{base, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}`, "image_url.url"},
	} {
		resp, body := post(t, c.base+"/v1/chat/completions", c.body)
		wantError(t, resp, body, 400, c.want)
	}
	if n := len(eng.requests()); n != 0 {
		t.Fatalf("%d requests reached the engine", n)
	}
}

// A deployment without an encode role, or a text-only model: a clear 400.
func TestChatImagesRefused(t *testing.T) {
	t.Parallel()
	eng, base := vlServer(t, errors.New("this deployment cannot take images: no encode role"), false)
	resp, body := post(t, base+"/v1/chat/completions", chatWithImage(dataURL("image/png", pngBytes(t, 8, 8))))
	wantError(t, resp, body, 400, "no encode role")
	if len(eng.requests()) != 0 {
		t.Fatal("engine got the request")
	}
	if v, err := vision.Load("../tokenizer/testdata/demo"); v != nil || err != nil {
		t.Fatalf("text-only model dir: %v %v", v, err)
	}
	if !strings.Contains(string(body), "encode") {
		t.Fatal(string(body))
	}
}

var (
	fuzzVLOnce sync.Once
	fuzzVLMux  http.Handler
	fuzzVLEng  *fakeEngine
)

// Chat bodies with image parts on a vision model always get a JSON object
// or a finished SSE stream, never a panic (image intake is untrusted).
func FuzzImageChat(f *testing.F) {
	fuzzVLOnce.Do(func() {
		tk, err := tokenizer.Load(demoVLDir)
		if err != nil {
			f.Fatal(err)
		}
		v, err := vision.Load(demoVLDir)
		if err != nil {
			f.Fatal(err)
		}
		fuzzVLEng = newFake(tk, "ok")
		mux := http.NewServeMux()
		New(fuzzVLEng, tk, Options{Vision: v}).Register(mux)
		fuzzVLMux = behindDoor(fuzzVLEng, "", mux)
	})
	small := dataURL("image/png", pngBytes(f, 8, 8))
	for _, s := range []string{
		chatWithImage(small),
		chatWithImage("data:image/png;base64,AAAA"),
		chatWithImage("data:,"),
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":"` + small + `"},{"type":"image","image":{"url":"x"}}]}],"stream":true}`,
		`{"messages":[{"role":"user","content":[{"type":"image_url"},{"type":"text"}]}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		fuzzVLMux.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body)))
		noPanics(t, fuzzVLEng)
		out := rec.Body.String()
		if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
			if !strings.HasSuffix(out, "data: [DONE]\n\n") {
				t.Fatalf("stream without [DONE]: %q", out)
			}
			return
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("status %d, body not a JSON object: %q", rec.Code, out)
		}
	})
}
