package wire

import (
	"bytes"
	"testing"
)

// Decoders must never panic; whatever they accept must re-encode, and the
// re-encoding must be a fixed point (decode → encode → decode → encode).

func seedVectors(f *testing.F, socket string) {
	for _, v := range loadVectors(f) {
		if v.Socket == socket {
			f.Add(payloadOf(f, v))
		}
	}
}

func fixedPoint[T any](t *testing.T, b []byte, dec func([]byte) (T, error), enc func(T) ([]byte, error), norm func(*T)) {
	v, err := dec(b)
	if err != nil {
		return
	}
	if norm != nil {
		norm(&v)
	}
	e1, err := enc(v)
	if err != nil {
		t.Fatalf("accepted input does not re-encode: %v", err)
	}
	v2, err := dec(e1)
	if err != nil {
		t.Fatalf("re-encoding does not decode: %v\n%x", err, e1)
	}
	e2, err := enc(v2)
	if err != nil || !bytes.Equal(e1, e2) {
		t.Fatalf("encoding is not a fixed point: %v\n%x\n%x", err, e1, e2)
	}
}

func FuzzDecodeHandshake(f *testing.F) {
	seedVectors(f, "handshake")
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedPoint(t, b, DecodeHandshake, EncodeHandshake, nil)
		fixedPoint(t, b, DecodeInit, EncodeInit, nil)
	})
}

func FuzzDecodeRegistration(f *testing.F) {
	for _, v := range loadVectors(f) {
		if v.Socket == "input" && v.Direction == "engine->gateway" {
			f.Add(payloadOf(f, v))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedPoint(t, b, DecodeRegistration, EncodeRegistration, nil)
	})
}

func FuzzDecodeRequest(f *testing.F) {
	for _, v := range loadVectors(f) {
		if v.Socket == "input" && v.Direction == "gateway->engine" {
			f.Add(payloadOf(f, v))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedPoint(t, b, DecodeGenerateRequest, EncodeGenerateRequest, func(q *GenerateRequest) {
			q.WireLen = min(q.WireLen, RequestLenFull) // extra elements are not re-sent
		})
		fixedPoint(t, b, DecodeAbort, EncodeAbort, nil)
		_, _ = PeekTag(b)
		_, _ = DecodeInputFrames([][]byte{{TypeAdd}, b, b})
	})
}

func FuzzDecodeOutput(f *testing.F) {
	seedVectors(f, "output")
	full, _ := EncodeFullOutput(FullOutputBatch{RIDs: []string{"a"},
		FinishedReasons: []*FinishReason{{Type: FinishAbort, Message: ptr("m"), ErrType: ptr(522)}}})
	f.Add(full)
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedPoint(t, b, DecodeOutput, EncodeOutput, func(o *OutputBatch) {
			if o.WireLen > OutputLen {
				o.WireLen = OutputLen
			}
		})
		fixedPoint(t, b, DecodeFullOutput, EncodeFullOutput, nil)
		_, _ = DecodeOutputFrames([][]byte{b})
		if a, err := DecodeAnyOutput(b); err == nil {
			for i := range a.Batch.RIDs {
				_, _, _, _ = a.TopLogprobs(i)
				_, _, _, _ = a.PromptLogprobs(i)
			}
		}
	})
}

func FuzzDecodeEncodeRequest(f *testing.F) {
	e, _ := EncodeEncodeRequest(NewEncodeRequest("img-1", "127.0.0.1", 8999, 1<<40, testItem()))
	f.Add(e)
	it := testItem().ForPrefill(EncodeHandshakeInfo{BootstrapHost: "h", BootstrapPort: 1, BootstrapRoom: 2})
	it.Feature = &Tensor{Dtype: "bfloat16", Shape: []int{1}, AuxIndex: 1}
	e, _ = EncodeEncodeRequest(EncodeRequest{RID: "x", Items: []MultimodalDataItem{it}})
	f.Add(e)
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedPoint(t, b, DecodeEncodeRequest, EncodeEncodeRequest, nil)
	})
}
