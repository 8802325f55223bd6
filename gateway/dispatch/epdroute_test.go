package dispatch

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/gen"
	"github.com/tsd-project/tsd/gateway/vision"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/internal/testimg"
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

// The dispatcher rebuilds exactly the wire items epd.PrepareImages makes
// from the gen.Images the front end sends (half-open spans → inclusive).
func TestPreparedMatchesPrepareImages(t *testing.T) {
	t.Parallel()
	a, b := testPNG(t, 40, 30, 80), testPNG(t, 16, 64, 7)
	cfg, _ := vision.LoadConfig(demoVL)
	vt, _ := epd.LoadVisionTokens(demoVL)
	ids := []int32{1, vt.Start, vt.Pad, vt.End, 2, vt.Start, vt.Pad, vt.End}
	want, err := epd.PrepareImages(ids, [][]byte{a, b}, cfg, vt, vision.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	out, imgs, err := epd.PrepareGen(ids, [][]byte{a, b}, cfg, vt, vision.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	got := prepared(gen.Request{InputIDs: out, Images: imgs})
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("items differ:\n%+v\n%+v", got.Items, want.Items)
	}
}
