// Package vision turns image bytes into the pixel patches a vision-language
// model's encoder expects (Qwen2-VL / Qwen3-VL family), in Go, so the
// gateway can preprocess images before the encode engine sees them
// (docs/protocol.md §9.8). Resizing reproduces the reference processor's
// fixed-point bicubic filter bit for bit: torch's uint8 kernel (what
// transformers 5.x uses) by default, or Pillow's.
package vision

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/draw"
	_ "image/jpeg" // register decoders
	_ "image/png"

	_ "golang.org/x/image/webp"
)

// Limits bound what the gateway is willing to decode.
type Limits struct {
	MaxBytes  int // encoded size
	MaxPixels int // width × height before resizing
}

// DefaultLimits accepts what a chat client reasonably sends.
var DefaultLimits = Limits{MaxBytes: 20 << 20, MaxPixels: 40_000_000}

// ErrBadImage is wrapped by every error about the image itself (as opposed
// to a server fault), so the HTTP layer can answer 400.
var ErrBadImage = errors.New("bad image")

// RGB is an 8-bit RGB raster, row-major, 3 bytes per pixel.
type RGB struct {
	W, H int
	Pix  []byte
}

// Decode decodes PNG, JPEG or WebP bytes into RGB, checking limits before the
// pixels are allocated.
func Decode(b []byte, lim Limits) (*RGB, string, error) {
	if lim.MaxBytes > 0 && len(b) > lim.MaxBytes {
		return nil, "", fmt.Errorf("%w: %d bytes is over the %d-byte limit", ErrBadImage, len(b), lim.MaxBytes)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return nil, "", fmt.Errorf("%w: read image header: %v (PNG, JPEG and WebP are supported)", ErrBadImage, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, format, fmt.Errorf("%w: empty image (%dx%d)", ErrBadImage, cfg.Width, cfg.Height)
	}
	if lim.MaxPixels > 0 && cfg.Width*cfg.Height > lim.MaxPixels {
		return nil, format, fmt.Errorf("%w: %dx%d is over the %d-pixel limit", ErrBadImage, cfg.Width, cfg.Height, lim.MaxPixels)
	}
	img, _, err := image.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, format, fmt.Errorf("%w: decode %s: %v", ErrBadImage, format, err)
	}
	return toRGB(img), format, nil
}

func toRGB(img image.Image) *RGB {
	bnd := img.Bounds()
	w, h := bnd.Dx(), bnd.Dy()
	out := &RGB{W: w, H: h, Pix: make([]byte, w*h*3)}
	// NRGBA keeps un-premultiplied values, which is what Pillow's convert("RGB")
	// yields for an opaque image.
	nrgba, ok := img.(*image.NRGBA)
	if !ok {
		nrgba = image.NewNRGBA(image.Rect(0, 0, w, h))
		draw.Draw(nrgba, nrgba.Bounds(), img, bnd.Min, draw.Src)
	}
	for y := 0; y < h; y++ {
		row := nrgba.Pix[y*nrgba.Stride:]
		for x := 0; x < w; x++ {
			copy(out.Pix[(y*w+x)*3:], row[x*4:x*4+3])
		}
	}
	return out
}
