package wire

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestDecodeOutputVectors(t *testing.T) {
	t.Parallel()
	o, err := DecodeOutput(payloadOf(t, vectorByName(t, "output_finished_batch")))
	if err != nil {
		t.Fatal(err)
	}
	if len(o.RIDs) != 2 || o.OutputIDs[0][1] != 151645 || o.FinishedReasons[1] != FinishLength ||
		o.CachedTokens[1] != 2 || o.OutputTokenLogprobsVal[0][1] != -0.0625 || len(o.OutputTokenLogprobsIdx[1]) != 0 {
		t.Fatalf("%+v", o)
	}
	o, err = DecodeOutput(payloadOf(t, vectorByName(t, "output_legacy_9_element")))
	if err != nil || o.EngineIndex != 0 || o.WireLen != OutputLenLegacy || o.CachedTokens[0] != 1 {
		t.Fatalf("legacy %+v %v", o, err)
	}
	o, err = DecodeOutput(payloadOf(t, vectorByName(t, "output_dp_rank_engine_index4")))
	if err != nil || o.EngineIndex != 4 {
		t.Fatalf("dp %+v %v", o, err)
	}
}

// A fake engine builds the stream chunk from Go values and gets the engine's bytes.
func TestBuildStreamChunkMatchesVector(t *testing.T) {
	t.Parallel()
	o := OutputBatch{
		RIDs: []string{"chatcmpl-7f3a-0"}, OutputIDs: [][]int32{{791}}, FinishedReasons: []string{FinishRunning},
		PromptTokens: []int{5}, CompletionTokens: []int{1}, CachedTokens: []int{0},
		OutputTokenLogprobsVal: [][]float64{nil}, OutputTokenLogprobsIdx: [][]int32{nil},
	}
	got, err := EncodeOutput(o)
	if err != nil {
		t.Fatal(err)
	}
	if want := payloadOf(t, vectorByName(t, "output_stream_chunk")); !bytes.Equal(got, want) {
		t.Fatalf("got %x\nwant %x", got, want)
	}
}

func TestOutputFramesAndSentinel(t *testing.T) {
	t.Parallel()
	dead := frames(t, vectorByName(t, "engine_core_dead").Gateway)
	if !IsShutdownSentinel(dead[0]) || !bytes.Equal(EncodeShutdownSentinel(), dead[0]) {
		t.Fatal("sentinel mismatch")
	}
	if _, err := DecodeOutputFrames(dead); !errors.Is(err, ErrEngineDead) {
		t.Fatalf("sentinel: %v", err)
	}
	f := frames(t, vectorByName(t, "output_stream_chunk").Gateway)
	f = append(f, []byte("extra frame"))
	if o, err := DecodeOutputFrames(f); err != nil || o.RIDs[0] != "chatcmpl-7f3a-0" {
		t.Fatalf("extra frames must be ignored: %v", err)
	}
	if _, err := DecodeOutputFrames(nil); err == nil {
		t.Fatal("no frames accepted")
	}
}

func TestClassifyFinish(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][3]any{
		"":       {"", false, true},
		"stop":   {"stop", true, true},
		"length": {"length", true, true},
		"abort":  {"abort", true, true},
		"error":  {"error", true, true},
		"weird":  {"stop", true, false},
	} {
		r, fin, known := ClassifyFinish(in)
		if r != want[0] || fin != want[1] || known != want[2] {
			t.Errorf("ClassifyFinish(%q) = %q %v %v", in, r, fin, known)
		}
	}
}

func TestOutputDecodeErrorsNameField(t *testing.T) {
	t.Parallel()
	chunk := payloadOf(t, vectorByName(t, "output_stream_chunk"))
	ragged := bytes.Replace(chunk, []byte{0x91, 0x05}, []byte{0x92, 0x05, 0x06}, 1)
	badTok := bytes.Replace(chunk, []byte{0xcd, 0x03, 0x17}, []byte{0xa1, 'x'}, 1)
	badIdx := append(bytes.Clone(chunk[:len(chunk)-1]), 0xa1, 'x')
	short := append([]byte{0x98}, chunk[1:]...)
	wrongTag := append([]byte{0x92, 0xa3, 'F', 'o', 'o'}, 0x90)
	for _, c := range []struct {
		name string
		in   []byte
		want string
	}{
		{"ragged", ragged, "BatchTokenIDOutSlim: prompt_tokens has 2 entries for 1 rids"},
		{"token str", badTok, "BatchTokenIDOutSlim[2] output_ids[0][0]: want int, got str"},
		{"engine_index str", badIdx, "BatchTokenIDOutSlim[9] engine_index: want int, got str"},
		{"short", short, "array of 8 elements, want at least 9"},
		{"wrong tag", wrongTag, `tag "Foo", want "BatchTokenIDOutSlim"`},
		{"nil rids", bytes.Replace(chunk, []byte{0x91, 0xaf}, []byte{0xc0, 0xaf}, 1), "[1] rids: want array, got nil"},
	} {
		_, err := DecodeOutput(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
	if _, err := EncodeOutput(OutputBatch{RIDs: []string{"a"}}); err == nil {
		t.Error("encoded a ragged batch")
	}
}

// ErrEngineDead is what the frame decoders below return for the sentinel.
var ErrEngineDead = errors.New("engine sent " + EngineCoreDead)

// DecodeOutputFrames decodes one message of the output PULL: the sentinel
// yields ErrEngineDead, otherwise frame 0 is a slim batch and extra frames
// are ignored.
func DecodeOutputFrames(frames [][]byte) (OutputBatch, error) {
	if len(frames) == 0 {
		return OutputBatch{}, errors.New("decode output: no frames")
	}
	if IsShutdownSentinel(frames[0]) {
		return OutputBatch{}, ErrEngineDead
	}
	o, err := DecodeOutput(frames[0])
	if err != nil {
		return OutputBatch{}, fmt.Errorf("decode output: %w", err)
	}
	return o, nil
}

// DecodeAnyOutputFrames is DecodeOutputFrames in either variant, by its
// tag (DecodeAnyOutput): the slim batch every engine sends, or the full
// one an engine sends for prompt or top-k logprobs.
func DecodeAnyOutputFrames(frames [][]byte) (AnyOutput, error) {
	if len(frames) == 0 {
		return AnyOutput{}, errors.New("decode output: no frames")
	}
	if IsShutdownSentinel(frames[0]) {
		return AnyOutput{}, ErrEngineDead
	}
	return DecodeAnyOutput(frames[0])
}
