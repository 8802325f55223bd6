package vision

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadTokens(t *testing.T) {
	t.Parallel()
	vt, err := LoadTokens("testdata/demo-vl")
	if err != nil || vt != (Tokens{Start: 1003, Pad: 1005, End: 1004}) {
		t.Fatalf("%+v %v", vt, err)
	}
	dir := t.TempDir()
	nested := `{"text_config": {"vision_start_token_id": 1, "image_token_id": 2, "vision_end_token_id": 3}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(nested), 0o644); err != nil {
		t.Fatal(err)
	}
	if vt, err := LoadTokens(dir); err != nil || vt != (Tokens{1, 2, 3}) {
		t.Fatalf("nested %+v %v", vt, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"vocab_size": 5}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokens(dir); err == nil {
		t.Fatal("text-only config accepted")
	}
}

// Two images, the same bytes twice: one anchor each expands to the image's
// token count (spans half-open over the pads), both get the same content
// hash, and a count or an image that does not fit is refused.
func TestPrepare(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig("testdata/demo-vl")
	if err != nil {
		t.Fatal(err)
	}
	vt := Tokens{Start: 1003, Pad: 1005, End: 1004}
	img := encodeImage(t, "png") // 8x8 → resized 56x56 → grid 1x4x4 → 4 tokens
	ids := []int32{1, 1003, 1005, 1004, 2, 1003, 1005, 1004, 3}
	out, imgs, err := Prepare(ids, [][]byte{img, img}, cfg, vt, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out) != "[1 1003 1005 1005 1005 1005 1004 2 1003 1005 1005 1005 1005 1004 3]" ||
		imgs[0].Offset != [2]int{2, 6} || imgs[1].Offset != [2]int{9, 13} || imgs[0].Hash != imgs[1].Hash || imgs[0].ID != imgs[1].ID {
		t.Fatalf("prepared %v %v %v", out, imgs[0].Offset, imgs[1].Offset)
	}
	if imgs[0].GridTHW != [3]int{1, 4, 4} || imgs[0].PadToken != 1005 || len(imgs[0].Pixels) != 16*imgs[0].Dim {
		t.Fatalf("image %+v", imgs[0])
	}
	if h, id := ItemHash(img); imgs[0].Hash != h || imgs[0].ID != id {
		t.Fatalf("hash %s %d, want %s %d", imgs[0].Hash, imgs[0].ID, h, id)
	}
	if _, _, err := Prepare(ids, [][]byte{img}, cfg, vt, DefaultLimits); !errors.Is(err, ErrPlaceholders) {
		t.Fatalf("one image for two anchors: %v", err)
	}
	if _, _, err := Prepare(ids, [][]byte{img, []byte("junk")}, cfg, vt, DefaultLimits); !errors.Is(err, ErrBadImage) {
		t.Fatalf("junk image: %v", err)
	}
}

func TestExpandImagePads(t *testing.T) {
	t.Parallel()
	const vs, pad, ve = 100, 101, 102
	for _, tc := range []struct {
		name    string
		ids     []int32
		counts  []int
		want    []int32
		offsets [][2]int
		err     string
	}{
		{"one image", []int32{1, vs, pad, ve, 2}, []int{3}, []int32{1, vs, pad, pad, pad, ve, 2}, [][2]int{{2, 4}}, ""},
		{"two images", []int32{vs, pad, ve, 7, vs, pad, ve}, []int{2, 1}, []int32{vs, pad, pad, ve, 7, vs, pad, ve}, [][2]int{{1, 2}, {6, 6}}, ""},
		{"no images", []int32{1, 2}, nil, []int32{1, 2}, [][2]int{}, ""},
		{"too few anchors", []int32{1, vs, pad, ve}, []int{2, 2}, nil, nil, "1 image anchors for 2 images"},
		{"zero tokens", []int32{vs, pad, ve}, []int{0}, nil, nil, "at least 1"},
		{"bare pad is no anchor", []int32{1, pad, 2}, []int{1}, nil, nil, "0 image anchors for 1 images"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pos, err := FindImagePlaceholders(tc.ids, vs, pad, ve, len(tc.counts))
			var got []int32
			var offs [][2]int
			if err == nil {
				got, offs, err = ExpandImagePads(tc.ids, pos, tc.counts, pad)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) || fmt.Sprint(offs) != fmt.Sprint(tc.offsets) {
				t.Fatalf("got %v %v %v, want %v %v", got, offs, err, tc.want, tc.offsets)
			}
		})
	}
	for _, bad := range []struct {
		pos    []int
		counts []int
	}{{[]int{5}, []int{1}}, {[]int{1, 1}, []int{1, 1}}, {[]int{0}, []int{1}}, {[]int{1}, []int{1, 2}}} {
		if _, _, err := ExpandImagePads([]int32{9, pad, 9, pad}, bad.pos, bad.counts, pad); !errors.Is(err, ErrPlaceholders) {
			t.Errorf("%v %v: err %v, want ErrPlaceholders", bad.pos, bad.counts, err)
		}
	}
}

func encodeImage(t *testing.T, format string) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, 8, 8))
	for i := range img.Pix {
		img.Pix[i] = uint8(i)
	}
	img.Set(0, 0, color.White)
	var b bytes.Buffer
	var err error
	if format == "png" {
		err = png.Encode(&b, img)
	} else {
		err = jpeg.Encode(&b, img, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func dataURL(mime string, b []byte) string {
	return "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(b)
}

func TestParseImageURLData(t *testing.T) {
	t.Parallel()
	pngB, jpgB := encodeImage(t, "png"), encodeImage(t, "jpeg")
	webp := append([]byte("RIFF\x10\x00\x00\x00WEBPVP8 "), make([]byte, 8)...)
	for _, tc := range []struct {
		name string
		url  string
		want []byte
		err  string
	}{
		{"png", dataURL("image/png", pngB), pngB, ""},
		{"jpeg", dataURL("image/jpeg", jpgB), jpgB, ""},
		{"jpg alias", dataURL("image/jpg", jpgB), jpgB, ""},
		{"webp", dataURL("image/webp", webp), webp, ""},
		{"no mime", "data:;base64," + base64.StdEncoding.EncodeToString(pngB), pngB, ""},
		{"unpadded", "data:image/png;base64," + base64.RawStdEncoding.EncodeToString(pngB), pngB, ""},
		{"gif", dataURL("image/gif", []byte("GIF89a")), nil, `media type "image/gif" is not supported`},
		{"not base64 flag", "data:image/png," + string(pngB[:4]), nil, "not base64"},
		{"bad base64", "data:image/png;base64,!!!!", nil, "not valid base64"},
		{"no comma", "data:image/png;base64", nil, "no comma"},
		{"lying mime", dataURL("image/png", jpgB), nil, "says image/png but the bytes are jpeg"},
		{"not an image", dataURL("image/png", []byte("hello world")), nil, "not PNG, JPEG or WebP"},
		{"empty", dataURL("image/png", nil), nil, "empty"},
		{"ftp", "ftp://x/y.png", nil, `scheme "ftp" is not supported`},
		{"blank", "", nil, "empty image_url"},
		{"http disabled", "http://127.0.0.1/x.png", nil, "disabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseImageURL(t.Context(), tc.url, URLLimits{}, false, nil)
			if tc.err != "" {
				if !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want ErrBadImage naming %q", err, tc.err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("got %d bytes, %v", len(got), err)
			}
		})
	}
	if _, err := ParseImageURL(t.Context(), dataURL("image/png", pngB), URLLimits{MaxBytes: 20}, false, nil); err == nil || !strings.Contains(err.Error(), "over the 20-byte limit") {
		t.Fatalf("size limit: %v", err)
	}
	if !errors.Is(func() error { _, err := ParseImageURL(t.Context(), "https://x", URLLimits{}, false, nil); return err }(), ErrImageURLsDisabled) {
		t.Fatal("disabled http does not wrap ErrImageURLsDisabled")
	}
}

func TestParseImageURLHTTP(t *testing.T) {
	t.Parallel()
	pngB := encodeImage(t, "png")
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok.png":
			w.Header().Set("Content-Type", "image/png")
			_, _ = w.Write(pngB)
		case "/mislabelled":
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(pngB)
		case "/big":
			_, _ = w.Write(bytes.Repeat([]byte{0x89}, 4096))
		case "/slow":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	lim := URLLimits{MaxBytes: 1024, Timeout: 200 * time.Millisecond}
	for _, tc := range []struct{ path, err string }{
		{"/ok.png", ""}, {"/mislabelled", ""}, {"/missing", "404"}, {"/big", "over the 1024-byte limit"}, {"/slow", "longer than 200ms"},
	} {
		got, err := ParseImageURL(t.Context(), srv.URL+tc.path, lim, true, srv.Client())
		if tc.err == "" {
			if err != nil || !bytes.Equal(got, pngB) {
				t.Errorf("%s: %d bytes, %v", tc.path, len(got), err)
			}
			continue
		}
		if !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err %v, want %q", tc.path, err, tc.err)
		}
	}
}

// Prepare on one 448x448 PNG with the demo-vl config (256 pad tokens):
// decode + resize + normalise + patchify + expand + hash.
func BenchmarkPrepare448(b *testing.B) {
	cfg, err := LoadConfig("testdata/demo-vl")
	if err != nil {
		b.Fatal(err)
	}
	img := image.NewNRGBA(image.Rect(0, 0, 448, 448))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		b.Fatal(err)
	}
	raw := buf.Bytes()
	ids := []int32{1, 1003, 1005, 1004, 2}
	vt := Tokens{1003, 1005, 1004}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, _, err := Prepare(ids, [][]byte{raw}, cfg, vt, DefaultLimits)
		if err != nil || len(out) != 4+256 {
			b.Fatal(fmt.Sprint(len(out), err))
		}
	}
}
