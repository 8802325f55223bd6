// Package loadgen is tsd's load generator: a pure HTTP client that builds a
// dataset of prompts, sends them on a schedule (Poisson arrivals, bounded
// concurrency), reads the streamed answers and computes the serving
// metrics `tsd bench` prints and writes (TTFT, TPOT, ITL, E2E latency,
// request and token throughput). It imports nothing from the gateway: it
// sees tsd exactly as any client does.
package loadgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Prompt is one request of a dataset. Text feeds the text endpoints
// (chat, completions); IDs feed /generate. A prompt from a file may carry
// only one of them; the other is derived where possible.
type Prompt struct {
	Text      string
	IDs       []int32
	InputLen  int // expected prompt tokens (exact for IDs, approximate for Text)
	OutputLen int // tokens asked for (max_tokens, with ignore_eos)
	// Turns are a conversation's later questions (multi-turn datasets):
	// turn t sends the conversation so far (every question before it and
	// the answer it got) and Turns[t-1]. Each turn is one request.
	Turns []Turn
	// RoutingKey, when set, goes out as X-SMG-Routing-Key (SMG's header
	// for sticky routing), on every turn.
	RoutingKey string
	// Class names the kind of request (a mixed dataset's "chat" or "rag");
	// its results carry it, so a report can tell the kinds apart.
	Class string

	// messages is a chat turn's whole conversation (set by Run for
	// multi-turn chat); nil: one user message of Text.
	messages []chatMessage
}

// Turn is one later question of a conversation.
type Turn struct {
	Text      string
	IDs       []int32
	OutputLen int
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// RandomOptions shape the random dataset.
type RandomOptions struct {
	N          int     // prompts
	InputLen   int     // prompt tokens
	OutputLen  int     // output tokens
	RangeRatio float64 // lengths drawn from [len·(1−r), len·(1+r)]; 0 = exact
	Seed       uint64
	// IDs are drawn from [MinID, Vocab); the defaults (256, 1000) stay inside
	// the demo tokenizer's vocabulary and above its raw-byte tokens.
	MinID, Vocab int
	// Count, when set, is the served model's token count: text prompts
	// are then built to InputLen tokens of that tokenizer; without it a
	// word counts as one token.
	Count TokenCounter
}

// words make random text prompts: short lowercase words that a byte-level
// BPE splits into about one token each, so InputLen words ≈ InputLen tokens.
var words = strings.Fields(`the of and to in is was for on that with as by at from his her its are
be this had not but were or an which one you all their has been would there they who more when
will can than out into only time other some could them these two may first then do any like my now
over such our man me even most made after also did many before must through back years where much
your way well down should because each just those people how too little state good very make world
still own see men work long get here between both life being under never day same another know while
last might us great old year off come since against go came right used take three`)

// Random builds the random dataset: reproducible from Seed.
func Random(o RandomOptions) ([]Prompt, error) {
	if o.N <= 0 {
		return nil, fmt.Errorf("--num-prompts must be positive, got %d", o.N)
	}
	if o.InputLen <= 0 || o.OutputLen <= 0 {
		return nil, fmt.Errorf("--random-input-len and --random-output-len must be positive, got %d and %d", o.InputLen, o.OutputLen)
	}
	if o.RangeRatio < 0 || o.RangeRatio >= 1 {
		return nil, fmt.Errorf("--random-range-ratio must be in [0, 1), got %g", o.RangeRatio)
	}
	s, err := newSynth(o.Seed, 0x7473642d62656e63, o.MinID, o.Vocab, o.Count)
	if err != nil {
		return nil, err
	}
	length := func(n int) int {
		if o.RangeRatio == 0 {
			return n
		}
		lo := max(1, int(float64(n)*(1-o.RangeRatio)))
		hi := max(lo, int(float64(n)*(1+o.RangeRatio)))
		return lo + s.rng.IntN(hi-lo+1)
	}
	out := make([]Prompt, o.N)
	for i := range out {
		in := length(o.InputLen)
		p := Prompt{InputLen: in, OutputLen: length(o.OutputLen)}
		p.IDs, p.Text = s.piece(in)
		out[i] = p
	}
	return out, nil
}

// LoadFile reads a prompt file: one prompt per line, either plain text or
// a JSON object with "prompt" or "text" (a string) and/or "input_ids"
// (token ids), optionally "output_len". Blank lines are skipped. Prompts
// cycle when the file has fewer than n; outputLen applies where a line
// names none.
func LoadFile(path string, n, outputLen int) ([]Prompt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open --dataset-path: %w", err)
	}
	defer f.Close()
	var base []Prompt
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		p, err := parseLine(raw, outputLen)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		base = append(base, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(base) == 0 {
		return nil, fmt.Errorf("%s: no prompts", path)
	}
	if n <= 0 {
		n = len(base)
	}
	out := make([]Prompt, n)
	for i := range out {
		out[i] = base[i%len(base)]
	}
	return out, nil
}

func parseLine(raw []byte, outputLen int) (Prompt, error) {
	p := Prompt{OutputLen: outputLen}
	if raw[0] != '{' {
		p.Text = string(raw)
		p.InputLen = len(strings.Fields(p.Text))
		return p, nil
	}
	var v struct {
		Prompt    *string `json:"prompt"`
		Text      *string `json:"text"`
		InputIDs  []int32 `json:"input_ids"`
		OutputLen *int    `json:"output_len"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&v); err != nil {
		return p, fmt.Errorf("invalid JSON line: %w", err)
	}
	switch {
	case v.Prompt != nil:
		p.Text = *v.Prompt
	case v.Text != nil:
		p.Text = *v.Text
	}
	for i, id := range v.InputIDs {
		if id < 0 {
			return p, fmt.Errorf("input_ids[%d] = %d is negative", i, id)
		}
	}
	p.IDs = v.InputIDs
	if p.Text == "" && len(p.IDs) == 0 {
		return p, errors.New(`a JSON line needs "prompt", "text" or "input_ids"`)
	}
	if len(p.IDs) > 0 {
		p.InputLen = len(p.IDs)
	} else {
		p.InputLen = len(strings.Fields(p.Text))
	}
	if v.OutputLen != nil {
		if *v.OutputLen <= 0 {
			return p, fmt.Errorf("output_len must be positive, got %d", *v.OutputLen)
		}
		p.OutputLen = *v.OutputLen
	}
	return p, nil
}
