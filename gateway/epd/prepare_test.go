package epd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tsd-project/tsd/gateway/vision"
)

func TestLoadVisionTokens(t *testing.T) {
	t.Parallel()
	vt, err := LoadVisionTokens("../vision/testdata/demo-vl")
	if err != nil || vt != (VisionTokens{Start: 1003, Pad: 1005, End: 1004}) {
		t.Fatalf("%+v %v", vt, err)
	}
	dir := t.TempDir()
	nested := `{"text_config": {"vision_start_token_id": 1, "image_token_id": 2, "vision_end_token_id": 3}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(nested), 0o644); err != nil {
		t.Fatal(err)
	}
	if vt, err := LoadVisionTokens(dir); err != nil || vt != (VisionTokens{1, 2, 3}) {
		t.Fatalf("nested %+v %v", vt, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"vocab_size": 5}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadVisionTokens(dir); err == nil {
		t.Fatal("text-only config accepted")
	}
}

// Two images, the same bytes twice: one anchor each expands to the image's
// token count, both route to the same encoder, rooms differ, and every leg
// gets its view.
func TestPrepareAndPlanLegs(t *testing.T) {
	t.Parallel()
	cfg, err := vision.LoadConfig("../vision/testdata/demo-vl")
	if err != nil {
		t.Fatal(err)
	}
	vt := VisionTokens{Start: 1003, Pad: 1005, End: 1004}
	img := encodeImage(t, "png") // 8x8 → resized 56x56 → grid 1x4x4 → 4 tokens
	ids := []int32{1, 1003, 1005, 1004, 2, 1003, 1005, 1004, 3}
	p, err := PrepareImages(ids, [][]byte{img, img}, cfg, vt, vision.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(p.InputIDs) != "[1 1003 1005 1005 1005 1005 1004 2 1003 1005 1005 1005 1005 1004 3]" ||
		p.Items[0].Offsets[0] != [2]int{2, 5} || p.Items[1].Offsets[0] != [2]int{9, 12} || p.Hashes[0] != p.Hashes[1] {
		t.Fatalf("prepared %v %v %v", p.InputIDs, p.Items[0].Offsets, p.Items[1].Offsets)
	}
	ring := NewRing([]string{"enc-a", "enc-b", "enc-c"}, 0)
	addrs := map[string]Encoder{"enc-a": {"127.0.0.1", 1}, "enc-b": {"127.0.0.1", 2}, "enc-c": {"127.0.0.1", 3}}
	seq := uint64(0)
	rnd := func() uint64 { seq += 7; return seq }
	l, err := PlanLegs("r1", p, ring, func(w string) (Encoder, bool) { e, ok := addrs[w]; return e, ok }, 7, rnd)
	if err != nil {
		t.Fatal(err)
	}
	if l.Workers[0] != l.Workers[1] || l.Rooms[0] == l.Rooms[1] || l.Rooms[0] == 7 || len(l.Encode) != 2 ||
		*l.Encode[1].BootstrapPort != addrs[l.Workers[1]].Port || l.Prefill.Items[1].EncodeHandshake.BootstrapRoom != l.Rooms[1] ||
		l.Decode.Items[0].Feature != nil || *l.Prefill.ImTokenID != 1005 {
		t.Fatalf("legs %+v", l)
	}
	if _, err := PlanLegs("r1", p, ring, func(string) (Encoder, bool) { return Encoder{}, false }, 7, rnd); err == nil {
		t.Fatal("unknown encoder address accepted")
	}
	if _, err := PlanLegs("r1", p, NewRing(nil, 0), nil, 7, rnd); err == nil {
		t.Fatal("empty ring accepted")
	}
	if _, err := PrepareImages(ids, [][]byte{img}, cfg, vt, vision.DefaultLimits); !errors.Is(err, ErrPlaceholders) {
		t.Fatalf("one image for two anchors: %v", err)
	}
	if _, err := PrepareImages(ids, [][]byte{img, []byte("junk")}, cfg, vt, vision.DefaultLimits); !errors.Is(err, vision.ErrBadImage) {
		t.Fatalf("junk image: %v", err)
	}
}
