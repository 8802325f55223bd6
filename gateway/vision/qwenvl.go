package vision

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// Config is the part of a Qwen2-VL / Qwen3-VL preprocessor_config.json that
// decides the pixels.
type Config struct {
	PatchSize         int       `json:"patch_size"`
	MergeSize         int       `json:"merge_size"`
	TemporalPatchSize int       `json:"temporal_patch_size"`
	ImageMean         []float64 `json:"image_mean"`
	ImageStd          []float64 `json:"image_std"`
	MinPixels         int       `json:"min_pixels"`
	MaxPixels         int       `json:"max_pixels"`
	Size              *struct {
		ShortestEdge int `json:"shortest_edge"`
		LongestEdge  int `json:"longest_edge"`
	} `json:"size"`
	RescaleFactor *float64 `json:"rescale_factor"`
	DoResize      *bool    `json:"do_resize"`
	DoRescale     *bool    `json:"do_rescale"`
	DoNormalize   *bool    `json:"do_normalize"`

	// Backend picks the arithmetic to reproduce: BackendTorch (default:
	// transformers 5.x, torchvision resize in float32 and a fused
	// rescale-normalise) or BackendPillow (the older Pillow-based processor).
	Backend string `json:"-"`
}

// Arithmetic backends of the reference processor.
const (
	BackendTorch  = "torch"
	BackendPillow = "pillow"
)

// Qwen2VLDefaults are the processor's defaults when the file is silent.
func Qwen2VLDefaults() Config {
	return Config{
		PatchSize: 14, MergeSize: 2, TemporalPatchSize: 2,
		ImageMean: []float64{0.48145466, 0.4578275, 0.40821073},
		ImageStd:  []float64{0.26862954, 0.26130258, 0.27577711},
		MinPixels: 56 * 56, MaxPixels: 28 * 28 * 1280,
	}
}

// LoadConfig reads preprocessor_config.json from a model directory, filling
// unset keys with the Qwen2-VL defaults.
func LoadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "preprocessor_config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read image processor config: %w", err)
	}
	return ParseConfig(b, path)
}

// ParseConfig parses preprocessor_config.json bytes; name is used in errors.
func ParseConfig(b []byte, name string) (Config, error) {
	c := Qwen2VLDefaults()
	// Decode over the defaults: absent keys keep them.
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("parse %s: %w", name, err)
	}
	if c.Size != nil {
		// Newer configs carry the pixel bounds in size{} and they win.
		if c.Size.ShortestEdge > 0 {
			c.MinPixels = c.Size.ShortestEdge
		}
		if c.Size.LongestEdge > 0 {
			c.MaxPixels = c.Size.LongestEdge
		}
	}
	switch {
	case c.PatchSize <= 0:
		return Config{}, fmt.Errorf("%s: patch_size must be positive", name)
	case c.MergeSize <= 0:
		return Config{}, fmt.Errorf("%s: merge_size must be positive", name)
	case c.TemporalPatchSize <= 0:
		return Config{}, fmt.Errorf("%s: temporal_patch_size must be positive", name)
	case len(c.ImageMean) != 3 || len(c.ImageStd) != 3:
		return Config{}, fmt.Errorf("%s: image_mean and image_std need 3 values", name)
	case c.MinPixels <= 0 || c.MaxPixels < c.MinPixels:
		return Config{}, fmt.Errorf("%s: min/max pixels out of order (%d, %d)", name, c.MinPixels, c.MaxPixels)
	}
	return c, nil
}

func (c Config) flag(p *bool) bool { return p == nil || *p }

// SmartResize picks the output size: both sides multiples of
// patch×merge, the pixel count within [min, max], the aspect kept.
// Python's round() rounds halves to even; so do we.
func (c Config) SmartResize(h, w int) (int, int, error) {
	factor := c.PatchSize * c.MergeSize
	if h <= 0 || w <= 0 {
		return 0, 0, fmt.Errorf("%w: empty image", ErrBadImage)
	}
	if r := float64(max(h, w)) / float64(min(h, w)); r > 200 {
		return 0, 0, fmt.Errorf("%w: aspect ratio %.0f is over 200", ErrBadImage, r)
	}
	f := float64(factor)
	hb := int(math.RoundToEven(float64(h)/f)) * factor
	wb := int(math.RoundToEven(float64(w)/f)) * factor
	switch {
	case hb*wb > c.MaxPixels:
		beta := math.Sqrt(float64(h*w) / float64(c.MaxPixels))
		hb = max(factor, int(math.Floor(float64(h)/beta/f))*factor)
		wb = max(factor, int(math.Floor(float64(w)/beta/f))*factor)
	case hb*wb < c.MinPixels:
		beta := math.Sqrt(float64(c.MinPixels) / float64(h*w))
		hb = int(math.Ceil(float64(h)*beta/f)) * factor
		wb = int(math.Ceil(float64(w)*beta/f)) * factor
	}
	return hb, wb, nil
}

// normalize returns channel-first float32 planes. The Pillow-era processor
// rescales then normalises; the torch one folds the rescale into mean and
// std first. Both are float32 throughout, and the order changes the last bit.
func (c Config) normalize(r *RGB, pillow bool) []float32 {
	n := r.W * r.H
	plane := make([]float32, 3*n)
	scale := 1.0 / 255
	if c.RescaleFactor != nil {
		scale = *c.RescaleFactor
	}
	rescale, norm := c.flag(c.DoRescale), c.flag(c.DoNormalize)
	var mean, std [3]float32
	for ch := 0; ch < 3; ch++ {
		mean[ch], std[ch] = float32(c.ImageMean[ch]), float32(c.ImageStd[ch])
		if !pillow && rescale && norm {
			inv := float32(1 / scale)
			mean[ch], std[ch] = mean[ch]*inv, std[ch]*inv
		}
	}
	for i := 0; i < n; i++ {
		for ch := 0; ch < 3; ch++ {
			v := float32(r.Pix[i*3+ch])
			switch {
			case !pillow && rescale && norm:
				v = (v - mean[ch]) / std[ch]
			default:
				if rescale {
					v = float32(float64(r.Pix[i*3+ch]) * scale)
				}
				if norm {
					v = (v - mean[ch]) / std[ch]
				}
			}
			plane[ch*n+i] = v
		}
	}
	return plane
}

// Patches is one preprocessed image.
type Patches struct {
	Grid    [3]int    // t, h, w in patches
	Dim     int       // values per patch: 3 × temporal × patch × patch
	Pixels  []float32 // Grid[0]*Grid[1]*Grid[2] rows of Dim values
	Resized *RGB      // the raster after resizing (for checks and hashing)
}

// NumTokens is how many image pad tokens the prompt needs for this image.
func (p *Patches) NumTokens(mergeSize int) int {
	return p.Grid[0] * p.Grid[1] * p.Grid[2] / (mergeSize * mergeSize)
}

// Preprocess resizes, rescales, normalises and patchifies one image the way
// the Qwen2-VL image processor does.
func (c Config) Preprocess(img *RGB) (*Patches, error) {
	rh, rw := img.H, img.W
	if c.flag(c.DoResize) {
		var err error
		if rh, rw, err = c.SmartResize(img.H, img.W); err != nil {
			return nil, err
		}
	}
	pillow := c.Backend == BackendPillow
	var r *RGB
	if pillow {
		r = Resize(img, rw, rh)
	} else {
		r = ResizeTorch(img, rw, rh)
	}
	plane := c.normalize(r, pillow)
	ps, ms, tp := c.PatchSize, c.MergeSize, c.TemporalPatchSize
	if rh%(ps*ms) != 0 || rw%(ps*ms) != 0 {
		return nil, fmt.Errorf("%w: %dx%d is not a multiple of %d", ErrBadImage, rw, rh, ps*ms)
	}
	gh, gw := rh/ps, rw/ps
	dim := 3 * tp * ps * ps
	out := &Patches{Grid: [3]int{1, gh, gw}, Dim: dim, Resized: r}
	out.Pixels = make([]float32, 0, gh*gw*dim)
	// Patch order: merge blocks row-major, patches inside a block row-major;
	// inside a patch: channel, temporal copy, row, column. One still image
	// fills every temporal slot with the same frame.
	for bh := 0; bh < gh/ms; bh++ {
		for bw := 0; bw < gw/ms; bw++ {
			for mh := 0; mh < ms; mh++ {
				for mw := 0; mw < ms; mw++ {
					py, px := (bh*ms+mh)*ps, (bw*ms+mw)*ps
					for ch := 0; ch < 3; ch++ {
						base := plane[ch*rh*rw:]
						for t := 0; t < tp; t++ {
							for y := 0; y < ps; y++ {
								row := base[(py+y)*rw+px:]
								out.Pixels = append(out.Pixels, row[:ps]...)
							}
						}
					}
				}
			}
		}
	}
	return out, nil
}
