package epd

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
		k[i], _ = ItemHash([]byte(fmt.Sprintf("image-%d", i)))
	}
	return k
}

// The same image always lands on the same encoder, whatever the order the
// workers are listed in.
func TestPickEncoderStable(t *testing.T) {
	t.Parallel()
	w := workers(4)
	rev := []string{w[3], w[2], w[1], w[0]}
	for _, k := range keys(200) {
		a := PickEncoder(k, w)
		if b := PickEncoder(k, w); a != b {
			t.Fatalf("%s: %s then %s", k, a, b)
		}
		if c := PickEncoder(k, rev); a != c {
			t.Fatalf("%s: order changed the pick: %s vs %s", k, a, c)
		}
	}
	if PickEncoder("x", nil) != "" {
		t.Fatal("empty ring picked a worker")
	}
	if PickEncoder("x", []string{"only"}) != "only" {
		t.Fatal("single worker not picked")
	}
}

// Keys spread over the workers, and adding or removing one worker moves
// only the keys it gains or loses.
func TestPickEncoderSpreadAndMovement(t *testing.T) {
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

func testItem(pixels int) wire.MultimodalDataItem {
	p := &vision.Patches{Grid: [3]int{1, 4, 4}, Dim: 3, Pixels: make([]float32, pixels)}
	for i := range p.Pixels {
		p.Pixels[i] = float32(i) / 10
	}
	_, id := ItemHash([]byte("img"))
	return ImageItem(p, id, [2]int{3, 6})
}

// Pixels go to encode only, the handshake to prefill only, metadata to all.
func TestPerLegItems(t *testing.T) {
	t.Parallel()
	items := []wire.MultimodalDataItem{testItem(48), testItem(48)}
	encs := []Encoder{{"10.0.0.1", 9001}, {"10.0.0.2", 9002}}
	rooms := []uint64{11, 1 << 62}
	reqs, err := BuildEncodeRequests("chat-1", items, encs, rooms)
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range reqs {
		if q.RID != EncodeRID("chat-1", i) || *q.RequestID != "chat-1" || *q.BootstrapHost != encs[i].Host ||
			*q.BootstrapPort != encs[i].Port || *q.BootstrapRoom != rooms[i] || len(q.Items) != 1 || q.Items[0].Feature == nil {
			t.Fatalf("encode request %d: %+v", i, q)
		}
		b, err := wire.EncodeEncodeRequest(q)
		if err != nil {
			t.Fatal(err)
		}
		back, err := wire.DecodeEncodeRequest(b)
		if err != nil || !bytes.Equal(back.Items[0].Feature.Data, items[i].Feature.Data) {
			t.Fatalf("round trip: %v", err)
		}
	}
	pre, err := PrefillItems(items, encs, rooms)
	if err != nil {
		t.Fatal(err)
	}
	dec := DecodeItems(items)
	for i := range items {
		if pre[i].Feature != nil || pre[i].EncodeHandshake == nil || pre[i].EncodeHandshake.BootstrapRoom != rooms[i] ||
			pre[i].EncodeHandshake.BootstrapPort != encs[i].Port {
			t.Fatalf("prefill item %d: %+v", i, pre[i])
		}
		if dec[i].Feature != nil || dec[i].EncodeHandshake != nil || dec[i].Offsets[0] != [2]int{3, 6} || *dec[i].Hash != *items[i].Hash {
			t.Fatalf("decode item %d: %+v", i, dec[i])
		}
		if items[i].Feature == nil {
			t.Fatal("per-leg views changed the caller's item")
		}
	}
	if _, err := BuildEncodeRequests("r", items, encs[:1], rooms); err == nil {
		t.Fatal("mismatched lengths accepted")
	}
	if _, err := BuildEncodeRequests("r", dec[:1], encs[:1], rooms[:1]); err == nil {
		t.Fatal("item without pixels accepted for encode")
	}
	big := testItem(96)
	q := wire.EncodeRequest{Items: []wire.MultimodalDataItem{big}}
	aux := MoveFeaturesOutOfBand(&q)
	if len(aux) != 1 || q.Items[0].Feature.AuxIndex != 1 || len(aux[0]) != 96*4 || big.Feature.AuxIndex != 0 || big.Feature.Data == nil {
		t.Fatalf("out of band: %d frames, item %+v", len(aux), q.Items[0].Feature)
	}
	small := testItem(4)
	q2 := wire.EncodeRequest{Items: []wire.MultimodalDataItem{small}}
	if aux := MoveFeaturesOutOfBand(&q2); len(aux) != 0 {
		t.Fatal("a small tensor left the payload")
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
			got, err := ParseImageURL(tc.url, Limits{}, false, nil)
			if tc.err != "" {
				if !errors.Is(err, vision.ErrBadImage) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want ErrBadImage naming %q", err, tc.err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("got %d bytes, %v", len(got), err)
			}
		})
	}
	if _, err := ParseImageURL(dataURL("image/png", pngB), Limits{MaxBytes: 20}, false, nil); err == nil || !strings.Contains(err.Error(), "over the 20-byte limit") {
		t.Fatalf("size limit: %v", err)
	}
	if !errors.Is(func() error { _, err := ParseImageURL("https://x", Limits{}, false, nil); return err }(), ErrImageURLsDisabled) {
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
	lim := Limits{MaxBytes: 1024, Timeout: 200 * time.Millisecond}
	for _, tc := range []struct{ path, err string }{
		{"/ok.png", ""}, {"/mislabelled", ""}, {"/missing", "404"}, {"/big", "over the 1024-byte limit"}, {"/slow", "longer than 200ms"},
	} {
		got, err := ParseImageURL(srv.URL+tc.path, lim, true, srv.Client())
		if tc.err == "" {
			if err != nil || !bytes.Equal(got, pngB) {
				t.Errorf("%s: %d bytes, %v", tc.path, len(got), err)
			}
			continue
		}
		if !errors.Is(err, vision.ErrBadImage) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err %v, want %q", tc.path, err, tc.err)
		}
	}
}

func TestJoinPromptLogprobs(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	p := TokenLogprobs{Vals: []float64{nan, -0.5, -1}, IDs: []int32{7, 8, 9}}
	d := TokenLogprobs{Vals: []float64{-0.1, -0.2}, IDs: []int32{40, 41}}
	j, err := JoinPromptLogprobs(p, d)
	if err != nil || fmt.Sprint(j.IDs) != "[7 8 9 40 41]" || !IsMissing(j.Vals[0]) || j.Vals[4] != -0.2 {
		t.Fatalf("joined %+v %v", j, err)
	}
	if _, err := JoinPromptLogprobs(TokenLogprobs{Vals: []float64{1}}, d); err == nil {
		t.Fatal("ragged prefill accepted")
	}
	if _, err := JoinPromptLogprobs(p, TokenLogprobs{IDs: []int32{1}}); err == nil {
		t.Fatal("ragged decode accepted")
	}
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
