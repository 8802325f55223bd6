package epd

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/vision"
	"github.com/tsd-project/tsd/gateway/wire"
)

func workers(n int) []string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("encode-%d", i)
	}
	return w
}

func keys(n int) []string {
	k := make([]string, n)
	for i := range k {
		k[i], _ = vision.ItemHash([]byte(fmt.Sprintf("image-%d", i)))
	}
	return k
}

// The same image always lands on the same encoder, on every ring built
// for the workers, whatever the order they are listed in.
func TestEncoderRingStable(t *testing.T) {
	t.Parallel()
	w := workers(4)
	rev := []string{w[3], w[2], w[1], w[0]}
	r1, r2, r3 := NewRing(w, 0), NewRing(w, 0), NewRing(rev, 0)
	for _, k := range keys(200) {
		a := r1.Pick(k)
		if b := r2.Pick(k); a != b {
			t.Fatalf("%s: %s then %s", k, a, b)
		}
		if c := r3.Pick(k); a != c {
			t.Fatalf("%s: order changed the pick: %s vs %s", k, a, c)
		}
	}
	if NewRing(nil, 0).Pick("x") != "" {
		t.Fatal("empty ring picked a worker")
	}
	if NewRing([]string{"only"}, 0).Pick("x") != "only" {
		t.Fatal("single worker not picked")
	}
}

// Keys spread over the workers, and adding or removing one worker moves
// only the keys it gains or loses.
func TestEncoderRingSpreadAndMovement(t *testing.T) {
	t.Parallel()
	ks := keys(8000)
	for _, tc := range []struct{ n int }{{2}, {3}, {5}} {
		r := NewRing(workers(tc.n), 0)
		count := map[string]int{}
		for _, k := range ks {
			count[r.Pick(k)]++
		}
		mean := float64(len(ks)) / float64(tc.n)
		for w, c := range count {
			if math.Abs(float64(c)-mean)/mean > 0.25 {
				t.Errorf("%d workers: %s got %d keys, mean %.0f", tc.n, w, c, mean)
			}
		}
		if len(count) != tc.n {
			t.Errorf("%d workers: only %d got keys", tc.n, len(count))
		}
	}
	before := NewRing(workers(4), 0)
	added := NewRing(workers(5), 0)
	removed := NewRing(workers(3), 0)
	movedAdd, movedRemove := 0, 0
	for _, k := range ks {
		a, b, c := before.Pick(k), added.Pick(k), removed.Pick(k)
		if a != b {
			movedAdd++
			if b != "encode-4" {
				t.Fatalf("adding encode-4 moved %s from %s to %s", k, a, b)
			}
		}
		if a != c {
			movedRemove++
			if a != "encode-3" {
				t.Fatalf("removing encode-3 moved %s off %s", k, a)
			}
		}
	}
	// Ideal: 1/5 of keys move to the new worker, 1/4 leave the removed one.
	if f := float64(movedAdd) / float64(len(ks)); f < 0.12 || f > 0.28 {
		t.Errorf("adding a 5th worker moved %.2f of the keys", f)
	}
	if f := float64(movedRemove) / float64(len(ks)); f < 0.17 || f > 0.33 {
		t.Errorf("removing a 4th worker moved %.2f of the keys", f)
	}
}

func TestMintItemRooms(t *testing.T) {
	t.Parallel()
	// A source that repeats, hits the avoided room and the excluded max.
	seq := []uint64{5, 5, 1 << 63, math.MaxUint64, 9, 7, 11}
	i := 0
	rnd := func() uint64 { v := seq[i%len(seq)]; i++; return v }
	got := MintItemRooms(3, 0, rnd)
	// 1<<63 masks to 0, the avoided PD room; MaxUint64 masks to 2^63-1, excluded.
	want := []uint64{5, 9, 7}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rooms %v, want %v", got, want)
	}
	if len(MintItemRooms(0, 0, rnd)) != 0 {
		t.Fatal("rooms for no items")
	}
}

// testImage is a prepared image of pixels values over a 1x4x4 grid, its
// pads at [3, 7) of the prompt.
func testImage(pixels int, content string) tokenapi.Image {
	px := make([]float32, pixels)
	for i := range px {
		px[i] = float32(i) / 10
	}
	h, id := vision.ItemHash([]byte(content))
	return tokenapi.Image{Hash: h, ID: id, Pixels: px, Dim: pixels / 16, GridTHW: [3]int{1, 4, 4}, Offset: [2]int{3, 7}, PadToken: 1005}
}

func testItem(pixels int) wire.MultimodalDataItem { return ImageItem(testImage(pixels, "img")) }

// Every leg of an image request in one pass: each image's encoder on the
// ring and its own room, the encode request with its pixels (out of band
// when big) and the client's rid, the prefill's items without pixels but
// with the handshake naming that encoder and room, the decode's metadata
// only; the caller's images are untouched.
func TestBuildLegs(t *testing.T) {
	t.Parallel()
	imgs := []tokenapi.Image{testImage(96, "a"), testImage(96, "a"), testImage(48, "b")}
	imgs[2].Offset = [2]int{8, 12}
	ring := NewRing([]string{"enc-a", "enc-b", "enc-c"}, 0)
	addrs := map[string]Encoder{"enc-a": {"10.0.0.1", 9001}, "enc-b": {"10.0.0.2", 9002}, "enc-c": {"10.0.0.3", 9003}}
	addr := func(w string) (Encoder, bool) { e, ok := addrs[w]; return e, ok }
	seq := uint64(0)
	rnd := func() uint64 { seq += 7; return seq }
	l, err := BuildLegs("chat-1", imgs, ring, addr, 7, rnd)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Encode) != 3 || l.Encode[0].Worker != l.Encode[1].Worker || l.Encode[0].Worker != ring.Pick(imgs[0].Hash) {
		t.Fatalf("workers %+v", l.Encode)
	}
	rooms := map[uint64]bool{7: true}
	for i, e := range l.Encode {
		q, enc := e.Request, addrs[e.Worker]
		if rooms[e.Room] {
			t.Fatalf("image %d: room %d not distinct", i, e.Room)
		}
		rooms[e.Room] = true
		if q.RID != EncodeRID("chat-1", i) || *q.RequestID != "chat-1" || *q.BootstrapHost != enc.Host ||
			*q.BootstrapPort != enc.Port || *q.BootstrapRoom != e.Room || len(q.Items) != 1 {
			t.Fatalf("encode request %d: %+v", i, q)
		}
		full := ImageItem(imgs[i])
		// 96 values (384 bytes) go out of band, 48 (192 bytes) stay inline.
		if big := len(full.Feature.Data) > InlineLimit; big != (len(e.Aux) == 1) || big != (q.Items[0].Feature.AuxIndex == 1) {
			t.Fatalf("image %d: %d aux frames, feature %+v", i, len(e.Aux), q.Items[0].Feature)
		}
		back, err := wire.DecodeEncodeRequest(e.Payload)
		if err != nil || back.RID != q.RID {
			t.Fatalf("image %d: payload %v", i, err)
		}
		data := back.Items[0].Feature.Data
		if len(e.Aux) == 1 {
			data = e.Aux[0]
		}
		if !bytes.Equal(data, full.Feature.Data) {
			t.Fatalf("image %d: pixels differ", i)
		}
		p, d := l.Prefill.Items[i], l.Decode.Items[i]
		if p.Feature != nil || p.EncodeHandshake == nil || p.EncodeHandshake.BootstrapRoom != e.Room || p.EncodeHandshake.BootstrapPort != enc.Port ||
			p.EncodeHandshake.BootstrapHost != enc.Host {
			t.Fatalf("prefill item %d: %+v", i, p)
		}
		if d.Feature != nil || d.EncodeHandshake != nil || d.Offsets[0] != [2]int{imgs[i].Offset[0], imgs[i].Offset[1] - 1} || *d.Hash != imgs[i].ID {
			t.Fatalf("decode item %d: %+v", i, d)
		}
	}
	if *l.Prefill.ImTokenID != 1005 || *l.Decode.ImTokenID != 1005 {
		t.Fatal("image pad id not set on the legs")
	}
	if len(imgs[0].Pixels) != 96 {
		t.Fatal("the caller's image changed")
	}
	if _, err := BuildLegs("r", imgs, ring, func(string) (Encoder, bool) { return Encoder{}, false }, 7, rnd); err == nil {
		t.Fatal("unknown encoder address accepted")
	}
	if _, err := BuildLegs("r", imgs, NewRing(nil, 0), addr, 7, rnd); err == nil {
		t.Fatal("empty ring accepted")
	}
	if l, err := BuildLegs("r", nil, NewRing(nil, 0), addr, 7, rnd); err != nil || len(l.Encode) != 0 || l.Prefill != nil {
		t.Fatalf("no images: %+v %v", l, err)
	}
	big := testItem(96)
	q := wire.EncodeRequest{Items: []wire.MultimodalDataItem{big}}
	aux := MoveFeaturesOutOfBand(&q)
	if len(aux) != 1 || q.Items[0].Feature.AuxIndex != 1 || len(aux[0]) != 96*4 || big.Feature.AuxIndex != 0 || big.Feature.Data == nil {
		t.Fatalf("out of band: %d frames, item %+v", len(aux), q.Items[0].Feature)
	}
}

func TestImageItem(t *testing.T) {
	t.Parallel()
	it := testItem(48)
	if it.Modality != wire.ModalityImage || it.Feature.Dtype != "float32" || fmt.Sprint(it.Feature.Shape) != "[16 3]" ||
		*it.PadValue != *it.Hash%(1<<30) || *it.PadValue < 0 {
		t.Fatalf("item %+v", it)
	}
	// model_specific_data is one valid msgpack value the wire accepts.
	in := wire.MultimodalInputs{Items: []wire.MultimodalDataItem{it}}
	q := wire.NewGenerateRequest("r", []int32{1, 2, 3, 4, 5, 6, 7}, wire.DefaultSamplingParams())
	q.MultimodalInputs = &in
	b, err := wire.EncodeGenerateRequest(q)
	if err != nil {
		t.Fatal(err)
	}
	back, err := wire.DecodeGenerateRequest(b)
	if err != nil || !bytes.Equal(back.MultimodalInputs.Items[0].ModelSpecificData, GridTHWRaw([3]int{1, 4, 4})) {
		t.Fatalf("round trip %v", err)
	}
	if g := GridTHWRaw([3]int{1, 300, 70000}); !bytes.HasSuffix(g, []byte{0x01, 0xcd, 0x01, 0x2c, 0xce, 0, 1, 0x11, 0x70}) {
		t.Fatalf("grid encoding % x", g)
	}
}

func TestCheckPromptLogprobs(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	p := TokenLogprobs{Vals: []float64{nan, -0.5, -1}, IDs: []int32{7, 8, 9}}
	if err := CheckPromptLogprobs(p, []int32{6, 7, 8, 9}, 1); err != nil {
		t.Fatal(err)
	}
	for _, start := range []int{0, 2, 5, -1} {
		if err := CheckPromptLogprobs(p, []int32{6, 7, 8, 9}, start); err == nil {
			t.Errorf("start %d accepted", start)
		}
	}
	if err := CheckPromptLogprobs(p, []int32{6, 7, 0, 9}, 1); err == nil {
		t.Error("wrong token accepted")
	}
}

func TestPromptLogprobFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		finish, msg string
		got         bool
		unsupported bool
		isNil       bool
	}{
		{"length", "", true, false, true},
		{"abort", "prompt logprobs (logprob_start_len >= 0) are not supported by this engine", false, true, false},
		{"abort", "logprobs were requested but the server was started without --enable-output-logprobs", false, true, false},
		{"abort", "KV transfer failed", false, false, true},
		{"abort", "", false, false, true},
		{"stop", "", false, true, false},
	} {
		err := PromptLogprobFailure(tc.finish, tc.msg, tc.got)
		if (err == nil) != tc.isNil || errors.Is(err, ErrPromptLogprobsUnsupported) != tc.unsupported {
			t.Errorf("%+v: %v", tc, err)
		}
	}
}

// The encoder ring's assignment is pinned: an encoder's embedding cache is
// warm for the images it was given, so a change of ring (its hash, its
// points per worker, its tie rule) must show up here, not as a fleet of
// cold caches. Image i's worker is the i-th letter (encode-a, -b, -c).
func TestEncoderRingAssignmentPinned(t *testing.T) {
	t.Parallel()
	const want = "bbbabccababaccabcabbbcacbcbaabba"
	r := NewRing([]string{"encode-a", "encode-b", "encode-c"}, 0)
	got := ""
	for i := range len(want) {
		got += strings.TrimPrefix(r.Pick(fmt.Sprintf("image-%d", i)), "encode-")
	}
	if got != want {
		t.Fatalf("encoder ring assigns images as %s, pinned %s", got, want)
	}
}
