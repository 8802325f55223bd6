// Package testimg makes the small deterministic images the EPD tests of
// the gateway, its dispatcher and ts-fake send (one generator, so every
// test's "same image" hashes the same).
package testimg

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"testing"
)

// PNG is a w×h gradient PNG; shade varies the blue channel so two calls
// with different shades are different images.
func PNG(t testing.TB, w, h int, shade uint8) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.NRGBA{uint8(x * 9), uint8(y * 7), shade, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
