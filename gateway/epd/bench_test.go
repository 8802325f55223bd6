package epd

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"testing"

	"github.com/tsd-project/tsd/gateway/vision"
)

func BenchmarkRingPick(b *testing.B) {
	r := NewRing(workers(8), 0)
	ks := keys(1024)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = r.Pick(ks[i%len(ks)])
	}
}

func BenchmarkNewRing8(b *testing.B) {
	w := workers(8)
	for i := 0; i < b.N; i++ {
		_ = NewRing(w, 0)
	}
}

func BenchmarkPickEncoder4(b *testing.B) {
	w := workers(4)
	for i := 0; i < b.N; i++ {
		_ = PickEncoder("0123456789abcdef", w)
	}
}

// PrepareImages on one 448x448 PNG with the demo-vl config (256 pad
// tokens): decode + resize + normalise + patchify + expand + hash.
func BenchmarkPrepareImages448(b *testing.B) {
	cfg, err := vision.LoadConfig("../vision/testdata/demo-vl")
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
	vt := VisionTokens{1003, 1005, 1004}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, err := PrepareImages(ids, [][]byte{raw}, cfg, vt, vision.DefaultLimits)
		if err != nil || len(p.InputIDs) != 4+256 {
			b.Fatal(fmt.Sprint(len(p.InputIDs), err))
		}
	}
}
