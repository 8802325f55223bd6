package dispatch

import (
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/vision"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/testkit/testimg"
)

// An encode leg fails on a lane error or an engine abort (its message
// passed on); a normal finish is success.
func TestEncodeFailure(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		r    encodeResult
		want string
	}{
		{encodeResult{item: 0, out: lane.Output{Finished: wire.FinishStop}}, ""},
		{encodeResult{item: 1, out: lane.Output{Finished: wire.FinishAbort, AbortMessage: "no room"}}, "encode leg for image 1 failed: no room"},
		{encodeResult{item: 0, out: lane.Output{Finished: wire.FinishError}}, "the encode engine aborted it"},
		{encodeResult{item: 2, err: lane.ErrNotRouted}, "encode leg for image 2 failed"},
	} {
		err := encodeFailure(c.r)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.r, err, c.want)
		}
	}
}

// demoVL is the small vision config the gateway tests use too.
const demoVL = "../vision/testdata/demo-vl"

func testPNG(t testing.TB, w, h int, shade uint8) []byte { return testimg.PNG(t, w, h, shade) }

// The legs carry exactly what the intake prepared: each image's wire item
// holds the pixels of its own decode and preprocess (float32, little
// endian), its hash, and its pad span in the wire's inclusive form.
func TestPreparedImagesBecomeWireItems(t *testing.T) {
	t.Parallel()
	a, b := testPNG(t, 40, 30, 80), testPNG(t, 16, 64, 7)
	cfg, _ := vision.LoadConfig(demoVL)
	vt, _ := vision.LoadTokens(demoVL)
	ids := []int32{1, vt.Start, vt.Pad, vt.End, 2, vt.Start, vt.Pad, vt.End}
	out, imgs, err := vision.Prepare(ids, [][]byte{a, b}, cfg, vt, vision.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	for i, raw := range [][]byte{a, b} {
		img, _, err := vision.Decode(raw, vision.DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		p, err := cfg.Preprocess(img)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 4*len(p.Pixels))
		for k, v := range p.Pixels {
			binary.LittleEndian.PutUint32(want[4*k:], math.Float32bits(v))
		}
		_, id := vision.ItemHash(raw)
		it := epd.ImageItem(imgs[i])
		span := [2]int{imgs[i].Offset[0], imgs[i].Offset[1] - 1}
		if !reflect.DeepEqual(it.Feature.Data, want) || *it.Hash != id || it.Offsets[0] != span ||
			!reflect.DeepEqual(it.Feature.Shape, []int{p.Grid[0] * p.Grid[1] * p.Grid[2], p.Dim}) {
			t.Fatalf("image %d: item %+v", i, it.Offsets)
		}
		for k := span[0]; k <= span[1]; k++ {
			if out[k] != vt.Pad {
				t.Fatalf("image %d: token %d at %d is no pad", i, out[k], k)
			}
		}
	}
}
