package vision

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// makeImage reproduces scripts/refs/gen_image_refs.py's formula, so the
// references need no committed image files.
func makeImage(i, w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.SetNRGBA(x, y, color.NRGBA{
				R: uint8((x*31 + y*17 + i*7) % 256),
				G: uint8(((x^y)*3 + i*5) % 256),
				B: uint8((x*y + i*29) % 256),
				A: 255,
			})
		}
	}
	return img
}

func pngBytes(t testing.TB, img image.Image) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type refStats struct {
	GridTHW   []int     `json:"grid_thw"`
	Shape     []int     `json:"shape"`
	Sum       float64   `json:"sum"`
	AbsSum    float64   `json:"abs_sum"`
	SqSum     float64   `json:"sq_sum"`
	SampleIdx []int     `json:"sample_idx"`
	Samples   []float64 `json:"samples"`
}

type refImage struct {
	Index      int       `json:"index"`
	Width      int       `json:"width"`
	Height     int       `json:"height"`
	InputSHA   string    `json:"input_sha256"`
	ResizedHW  []int     `json:"resized_hw"`
	ResizedSHA string    `json:"resized_sha256"`
	Slow       *refStats `json:"slow"`
	Fast       *refStats `json:"fast"`
	Numpy      *refStats `json:"numpy"`
}

func loadRefs(t *testing.T) []refImage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "image_refs.json"))
	if err != nil {
		t.Skipf("no reference file (generate with scripts/refs/gen_image_refs.py): %v", err)
	}
	var f struct {
		Transformers string     `json:"transformers"`
		Images       []refImage `json:"images"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	t.Logf("references from transformers %q, %d images", f.Transformers, len(f.Images))
	return f.Images
}

func rgbSHA(r *RGB) string {
	s := sha256.Sum256(r.Pix)
	return hex.EncodeToString(s[:])
}

// TestParityWithReferenceProcessor pins our patches to the Python processor's
// (transformers, torchvision arithmetic) and, with the Pillow backend, to
// Pillow's resized raster byte for byte.
func TestParityWithReferenceProcessor(t *testing.T) {
	refs := loadRefs(t)
	cfg, err := LoadConfig("testdata")
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) < 10 {
		t.Fatalf("want >= 10 reference images, have %d", len(refs))
	}
	for _, ref := range refs {
		img := makeImage(ref.Index, ref.Width, ref.Height)
		rgb, _, err := Decode(pngBytes(t, img), DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		if got := rgbSHA(rgb); got != ref.InputSHA {
			t.Fatalf("image %d: generated input differs from the script's", ref.Index)
		}
		p, err := cfg.Preprocess(rgb)
		if err != nil {
			t.Fatalf("image %d: %v", ref.Index, err)
		}
		for name, st := range map[string]*refStats{"transformers": ref.Slow, "transformers-fast": ref.Fast} {
			if st != nil {
				checkStats(t, ref.Index, name, p, st, 1e-5)
			}
		}
		pcfg := cfg
		pcfg.Backend = BackendPillow
		if p, err = pcfg.Preprocess(rgb); err != nil {
			t.Fatalf("image %d (pillow): %v", ref.Index, err)
		}
		if ref.ResizedHW != nil && (p.Resized.H != ref.ResizedHW[0] || p.Resized.W != ref.ResizedHW[1]) {
			t.Errorf("image %d: resized to %dx%d, want %dx%d", ref.Index, p.Resized.H, p.Resized.W, ref.ResizedHW[0], ref.ResizedHW[1])
		}
		if ref.ResizedSHA != "" && rgbSHA(p.Resized) != ref.ResizedSHA {
			t.Errorf("image %d (%dx%d): resized raster differs from Pillow's bicubic", ref.Index, ref.Width, ref.Height)
		}
		if ref.Numpy != nil {
			checkStats(t, ref.Index, "pillow+numpy", p, ref.Numpy, 1e-5)
		}
	}
}

func checkStats(t *testing.T, idx int, name string, p *Patches, st *refStats, tol float64) {
	t.Helper()
	if st.GridTHW[0] != p.Grid[0] || st.GridTHW[1] != p.Grid[1] || st.GridTHW[2] != p.Grid[2] {
		t.Errorf("image %d (%s): grid %v, want %v", idx, name, p.Grid, st.GridTHW)
		return
	}
	rows := p.Grid[0] * p.Grid[1] * p.Grid[2]
	if st.Shape[0] != rows || st.Shape[1] != p.Dim {
		t.Errorf("image %d (%s): shape [%d %d], want %v", idx, name, rows, p.Dim, st.Shape)
		return
	}
	var sum, abs, sq float64
	for _, v := range p.Pixels {
		f := float64(v)
		sum += f
		abs += math.Abs(f)
		sq += f * f
	}
	n := float64(len(p.Pixels))
	if math.Abs(sum-st.Sum) > tol*n || math.Abs(abs-st.AbsSum) > tol*n || math.Abs(sq-st.SqSum) > tol*n*4 {
		t.Errorf("image %d (%s): sums (%g, %g, %g), want (%g, %g, %g)", idx, name, sum, abs, sq, st.Sum, st.AbsSum, st.SqSum)
	}
	for k, j := range st.SampleIdx {
		if d := math.Abs(float64(p.Pixels[j]) - st.Samples[k]); d > tol {
			t.Errorf("image %d (%s): pixel value %d = %g, want %g", idx, name, j, p.Pixels[j], st.Samples[k])
			return
		}
	}
}

func TestSmartResizeRoundsHalfToEven(t *testing.T) {
	c := Qwen2VLDefaults()
	// 42/28 = 1.5 rounds to 2 (even); 70/28 = 2.5 rounds to 2 (even), not 3.
	h, w, err := c.SmartResize(70, 42*4)
	if err != nil {
		t.Fatal(err)
	}
	if h != 56 || w != 168 {
		t.Fatalf("got %dx%d, want 56x168", h, w)
	}
}

func TestNumTokens(t *testing.T) {
	cfg := Qwen2VLDefaults()
	p, err := cfg.Preprocess(&RGB{W: 224, H: 224, Pix: make([]byte, 224*224*3)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Grid != [3]int{1, 16, 16} || p.NumTokens(cfg.MergeSize) != 64 || p.Dim != 1176 {
		t.Fatalf("grid %v tokens %d dim %d", p.Grid, p.NumTokens(cfg.MergeSize), p.Dim)
	}
}

func TestBadImagesNameTheProblem(t *testing.T) {
	good := pngBytes(t, makeImage(0, 64, 64))
	huge := image.NewNRGBA(image.Rect(0, 0, 1, 1))
	_ = huge
	cases := []struct {
		name string
		data []byte
		lim  Limits
		want string
	}{
		{"truncated", good[:len(good)/2], DefaultLimits, "decode png"},
		{"not an image", []byte("GIF89a not really"), DefaultLimits, "read image header"},
		{"text", []byte("hello"), DefaultLimits, "read image header"},
		{"too many bytes", good, Limits{MaxBytes: 10}, "byte limit"},
		{"too many pixels", good, Limits{MaxPixels: 100}, "pixel limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Decode(c.data, c.lim)
			if err == nil || !errors.Is(err, ErrBadImage) || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
				t.Fatalf("err = %v, want ErrBadImage mentioning %q", err, c.want)
			}
		})
	}
	if _, _, err := Qwen2VLDefaults().SmartResize(10, 5000); err == nil || !errors.Is(err, ErrBadImage) {
		t.Fatalf("aspect ratio 500 accepted: %v", err)
	}
}

func BenchmarkPreprocess640x480(b *testing.B) {
	cfg := Qwen2VLDefaults()
	data := pngBytes(b, makeImage(1, 640, 480))
	b.ReportAllocs()
	for b.Loop() {
		rgb, _, err := Decode(data, DefaultLimits)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cfg.Preprocess(rgb); err != nil {
			b.Fatal(err)
		}
	}
}
