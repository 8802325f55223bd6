package wire

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/internal/msgpack"
)

func TestEncodeHelloReadyMatchVectors(t *testing.T) {
	t.Parallel()
	for name, m := range map[string]HandshakeMsg{
		"handshake_hello_engine0": Hello(),
		"handshake_ready_engine0": Ready(),
	} {
		got, err := EncodeHandshake(m)
		if err != nil {
			t.Fatal(err)
		}
		if want := payloadOf(t, vectorByName(t, name)); !bytes.Equal(got, want) {
			t.Errorf("%s: got %x want %x", name, got, want)
		}
		if len(got) != 53 {
			t.Errorf("%s: %d bytes, spec says 53", name, len(got))
		}
	}
}

func TestEncodeInitMatchesVector(t *testing.T) {
	t.Parallel()
	m := NewInit("ipc:///run/smg/engine-0.ipc-in.sock", "ipc:///run/smg/engine-0.ipc-out.sock")
	got, err := EncodeInit(m)
	if err != nil {
		t.Fatal(err)
	}
	if want := payloadOf(t, vectorByName(t, "handshake_init_engine0")); !bytes.Equal(got, want) {
		t.Fatalf("got %x\nwant %x", got, want)
	}
	d, err := DecodeInit(got)
	if err != nil {
		t.Fatal(err)
	}
	in, err1 := d.Input()
	out, err2 := d.Output()
	if err1 != nil || err2 != nil || in != m.Addresses.Inputs[0] || out != m.Addresses.Outputs[0] {
		t.Fatalf("addresses %q %q (%v %v)", in, out, err1, err2)
	}
}

func TestInitEmptyAddressesDecodeButFailAccessors(t *testing.T) {
	t.Parallel()
	b, _ := EncodeInit(InitMsg{})
	m, err := DecodeInit(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Input(); err == nil {
		t.Error("Input() accepted empty inputs")
	}
	if _, err := m.Output(); err == nil {
		t.Error("Output() accepted empty outputs")
	}
}

func TestDecodeRegistrationVectors(t *testing.T) {
	t.Parallel()
	g, err := DecodeRegistration(payloadOf(t, vectorByName(t, "input_registration_engine0")))
	if err != nil {
		t.Fatal(err)
	}
	if g.MaxModelLen != 32768 || g.NumGPUBlocks != 2048 || g.Granularity() != 64 || g.BlockSize != nil ||
		g.Dtype != "bfloat16" || g.VllmVersion != "tokenspeed-0.0.0" || g.DataParallelSize != 1 ||
		g.DataParallelRank != 0 || g.MaxNumSeqs != 160 || g.MaxNumBatchedTokens != 8192 ||
		g.InstanceID != "Qwen/Qwen3-0.6B" || g.KVCacheSizeTokens == nil || *g.KVCacheSizeTokens != 131072 ||
		g.KVCacheMaxConcurrency != nil || g.KVEventsConfig != nil || g.BootstrapHost != nil {
		t.Fatalf("unexpected registration %+v", g)
	}
	v := vectorByName(t, "input_registration_dp_rank1_identity4")
	g, err = DecodeRegistration(payloadOf(t, v))
	if err != nil {
		t.Fatal(err)
	}
	id, err := DecodeIdentity(frames(t, v.Gateway)[0])
	if err != nil || id != 4 || g.DataParallelSize != 2 || g.DataParallelRank != 1 || g.WorldSize != 2 {
		t.Fatalf("identity %d (%v), D=%d rank=%d", id, err, g.DataParallelSize, g.DataParallelRank)
	}
	if base := int(id) - g.DataParallelRank; base != 3 {
		t.Fatalf("base %d, want 3", base)
	}
}

// Registration decoding must tolerate what different engines send (docs/protocol.md §3.6, §13).
func TestDecodeRegistrationTolerant(t *testing.T) {
	t.Parallel()
	// {"block_size": 16, "max_model_len": nil, "future": [1,{"x":2}],
	//  "bootstrap_host": "10.0.0.5", "bootstrap_port": 9000, "disaggregation_mode": "prefill"}
	var b []byte
	b = msgpack.AppendMapHeader(b, 6)
	b = msgpack.AppendStr(msgpack.AppendStr(b, "future"), "")
	b = b[:len(b)-1]
	b = msgpack.AppendArrayHeader(b, 2)
	b = msgpack.AppendInt(b, 1)
	b = msgpack.AppendMapHeader(b, 1)
	b = msgpack.AppendInt(msgpack.AppendStr(b, "x"), 2)
	b = msgpack.AppendInt(msgpack.AppendStr(b, "block_size"), 16)
	b = msgpack.AppendNil(msgpack.AppendStr(b, "max_model_len"))
	b = msgpack.AppendStr(msgpack.AppendStr(b, "bootstrap_host"), "10.0.0.5")
	b = msgpack.AppendInt(msgpack.AppendStr(b, "bootstrap_port"), 9000)
	b = msgpack.AppendStr(msgpack.AppendStr(b, "disaggregation_mode"), "prefill")
	g, err := DecodeRegistration(b)
	if err != nil {
		t.Fatal(err)
	}
	if g.Granularity() != 16 || g.MaxModelLen != 0 || g.DataParallelSize != 1 || g.WorldSize != 1 ||
		*g.BootstrapHost != "10.0.0.5" || *g.BootstrapPort != 9000 || *g.DisaggregationMode != "prefill" {
		t.Fatalf("unexpected %+v", g)
	}
	// and the optional keys survive a round trip
	enc, err := EncodeRegistration(g)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := DecodeRegistration(enc)
	if err != nil || *g2.BootstrapPort != 9000 || *g2.BlockSize != 16 || *g2.DisaggregationMode != "prefill" {
		t.Fatalf("round trip %+v %v", g2, err)
	}
	if _, err := DecodeRegistration([]byte{0x80}); err != nil {
		t.Fatalf("empty map: %v", err)
	}
}

func TestHandshakeDecodeErrorsNameField(t *testing.T) {
	t.Parallel()
	bad := func(k string, v []byte) []byte {
		b := msgpack.AppendMapHeader(nil, 1)
		return append(msgpack.AppendStr(b, k), v...)
	}
	cases := []struct {
		name string
		dec  func([]byte) error
		in   []byte
		want string
	}{
		{"hello status int", decH, bad("status", []byte{0x01}), "WireReadyMessage.status: want str, got int"},
		{"hello not a map", decH, []byte{0x90}, "want map, got array"},
		{"hello no status", decH, []byte{0x80}, "missing key status"},
		{"init no addresses", decI, []byte{0x80}, "missing key addresses"},
		{"init inputs wrong", decI, bad("addresses", bad("inputs", []byte{0x91, 0x05})), "WireHandshakeInitMessage.addresses.inputs[0]: want str, got int"},
		{"reg max_model_len str", decR, bad("max_model_len", []byte{0xa1, 'x'}), "WireEngineCoreReadyResponse.max_model_len: want int, got str"},
		{"reg dtype int", decR, bad("dtype", []byte{0x01}), "WireEngineCoreReadyResponse.dtype: want str, got int"},
		{"reg empty", decR, nil, "empty payload"},
		{"reg huge map", decR, []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, "exceeds"},
		{"reg trailing", decR, []byte{0x80, 0x00}, "trailing"},
	}
	for _, c := range cases {
		err := c.dec(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

func decH(b []byte) error { _, err := DecodeHandshake(b); return err }
func decI(b []byte) error { _, err := DecodeInit(b); return err }
func decR(b []byte) error { _, err := DecodeRegistration(b); return err }

func TestIdentity(t *testing.T) {
	t.Parallel()
	for idx, h := range map[uint16]string{0: "0000", 1: "0100", 4: "0400", 258: "0201", 65535: "ffff"} {
		if got := hex.EncodeToString(EncodeIdentity(idx)); got != h {
			t.Errorf("EncodeIdentity(%d) = %s, want %s", idx, got, h)
		}
		b, _ := hex.DecodeString(h)
		if got, err := DecodeIdentity(b); err != nil || got != idx {
			t.Errorf("DecodeIdentity(%s) = %d, %v", h, got, err)
		}
	}
	for _, bad := range [][]byte{nil, {1}, {1, 2, 3}} {
		if _, err := DecodeIdentity(bad); err == nil {
			t.Errorf("DecodeIdentity(%x) accepted", bad)
		}
	}
}

func TestHandshakePortWorkedExamples(t *testing.T) {
	t.Parallel()
	for path, port := range map[string]int{
		"/tmp/smg-zmq/ts0.ipc":      25152,
		"/tmp/smg-zmq/engine-31000": 22714,
		"/run/smg/prefill-0.ipc":    24875,
		"/run/smg/engine-0.ipc":     25625,
		"":                          26037,
	} {
		if got := HandshakePort(path); got != port {
			t.Errorf("HandshakePort(%q) = %d, want %d", path, got, port)
		}
	}
}
