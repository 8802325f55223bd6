package wire

import (
	"bytes"
	"strings"
	"testing"
)

func testItem() MultimodalDataItem {
	return MultimodalDataItem{
		Modality: ModalityImage,
		Hash:     ptr(int64(-12345678901)),
		PadValue: ptr(int64(151655)),
		Offsets:  [][2]int{{3, 67}},
		Feature:  &Tensor{Dtype: "float32", Shape: []int{2, 2}, Data: make([]byte, 16)},
		ModelSpecificData: Raw{0x81, 0xae, 'i', 'm', 'a', 'g', 'e', '_', 'g', 'r', 'i', 'd', '_', 't', 'h', 'w',
			0x91, 0x93, 0x01, 0x02, 0x02},
	}
}

func TestEncodeRequestRoundTrip(t *testing.T) {
	t.Parallel()
	it := testItem()
	e := NewEncodeRequest("img-1", "127.0.0.1", 8999, 1<<40, it)
	b, err := EncodeEncodeRequest(e)
	if err != nil {
		t.Fatal(err)
	}
	if tag, _ := PeekTag(b); tag != TagEncodeRequest {
		t.Fatalf("tag %q", tag)
	}
	d, err := DecodeEncodeRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if d.RID != "img-1" || *d.RequestID != "img-1" || *d.BootstrapHost != "127.0.0.1" || *d.BootstrapPort != 8999 ||
		*d.BootstrapRoom != 1<<40 || len(d.Items) != 1 || d.Items[0].Feature == nil ||
		len(d.Items[0].Feature.Data) != 16 || d.Items[0].Offsets[0] != [2]int{3, 67} {
		t.Fatalf("decoded %+v", d)
	}
	b2, _ := EncodeEncodeRequest(d)
	if !bytes.Equal(b, b2) {
		t.Fatalf("round trip differs\n%x\n%x", b, b2)
	}
}

// The fixed-size inline tensor uses fixext 16; larger buffers ext8, and an
// out-of-band buffer is an int frame index.
func TestTensorEncodings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		t    Tensor
		want []byte
	}{
		{Tensor{Dtype: "<f4", Shape: []int{4}, Data: make([]byte, 16)}, []byte{0xd8, 0x03}},
		{Tensor{Dtype: "<f4", Shape: []int{5}, Data: make([]byte, 20)}, []byte{0xc7, 20, 0x03}},
		{Tensor{Dtype: "<f4", Shape: []int{1 << 20}, AuxIndex: 1}, []byte{0x01}},
	} {
		b := appendTensor(nil, c.t)
		if !bytes.Contains(b, c.want) {
			t.Errorf("%+v: %x lacks %x", c.t.Shape, b, c.want)
		}
		r := newReader(b)
		got, err := r.readTensor()
		if err != nil || got.AuxIndex != c.t.AuxIndex || len(got.Data) != len(c.t.Data) || r.End() != nil {
			t.Errorf("%+v: decoded %+v %v", c.t.Shape, got, err)
		}
	}
}

func TestPrefillAndDecodeItems(t *testing.T) {
	t.Parallel()
	it := testItem()
	h := EncodeHandshakeInfo{BootstrapHost: "10.0.0.7", BootstrapPort: 8999, BootstrapRoom: 77}
	p := it.ForPrefill(h)
	if p.Feature != nil || p.EncodeHandshake == nil || it.Feature == nil {
		t.Fatal("ForPrefill must drop pixels on a copy and add the handshake")
	}
	d := it.ForDecode()
	if d.Feature != nil || d.EncodeHandshake != nil || d.PadValue == nil {
		t.Fatal("ForDecode must keep metadata only")
	}
	b := appendItem(nil, p)
	// encode_handshake keys in the order the engine reads them
	if !bytes.Contains(b, append([]byte{0x83, 0xae}, "bootstrap_host"...)) {
		t.Fatalf("handshake map missing: %x", b)
	}
	r := newReader(b)
	got, err := r.readItem()
	if err != nil || *got.EncodeHandshake != h {
		t.Fatalf("%+v %v", got, err)
	}
}

func TestEncodeRequestDecodeErrorsNameField(t *testing.T) {
	t.Parallel()
	e := NewEncodeRequest("img-1", "h", 1, 2, testItem())
	good, _ := EncodeEncodeRequest(e)
	bad := bytes.Replace(good, []byte{0xa7, 'f', 'l', 'o', 'a', 't', '3', '2'}, []byte{0x07, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0}, 1)
	for _, c := range []struct {
		in   []byte
		want string
	}{
		{bad, "EncodeRequest[7] items[0][4] feature[0] dtype: want str, got int"},
		{append([]byte{0x92, 0xa1, 'X'}, 0xc0), `tag "X", want "EncodeRequest"`},
		{good[:len(good)-3], "unexpected end of input"},
	} {
		_, err := DecodeEncodeRequest(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want it to contain %q", err, c.want)
		}
	}
}
