package tokenizer

import (
	"strings"
)

// DecodeStream turns token ids into text one step at a time and never
// emits broken UTF-8: a trailing incomplete sequence is held back until
// the next token completes it (or Flush gives up on it).
//
// The supported decoders are byte-level, so a token's text is exactly its
// bytes and the prefix/read-offset re-decoding HF does for general
// decoders reduces to keeping the undecided tail bytes: O(1) per token.
type DecodeStream struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte
}

// NewDecodeStream starts incremental detokenization. skipSpecial hides
// added tokens marked special (the OpenAI API default).
func (t *Tokenizer) NewDecodeStream(skipSpecial bool) *DecodeStream {
	return &DecodeStream{t: t, skipSpecial: skipSpecial}
}

// Step adds one token and returns the text that became final.
func (d *DecodeStream) Step(id int32) string {
	if s, ok := d.whole(id); ok {
		return s
	}
	d.pending = d.t.DecodeBytes(d.pending, []int32{id}, d.skipSpecial)
	return d.take()
}

// StepMany adds several tokens and returns the text that became final.
func (d *DecodeStream) StepMany(ids []int32) string {
	if len(ids) == 1 {
		return d.Step(ids[0])
	}
	d.pending = d.t.DecodeBytes(d.pending, ids, d.skipSpecial)
	return d.take()
}

// whole is the steady path of a step: with nothing held back, a token
// whose bytes are complete UTF-8 on their own (most of any vocabulary)
// is final as it is, and its text is the tokenizer's own string, so the
// step allocates nothing. It gives the bytes take would: take emits all
// of valid UTF-8 (incompleteTail is 0) unchanged (lossyString copies
// valid input as is). Anything else (a piece of a character, bytes held
// from before, an id out of range) takes the byte path.
func (d *DecodeStream) whole(id int32) (string, bool) {
	t := d.t
	if len(d.pending) > 0 || id < 0 || int(id) >= len(t.idText) {
		return "", false
	}
	if d.skipSpecial && t.isSpecial[id] {
		return "", true
	}
	if !t.idWhole[id] {
		return "", false
	}
	return t.idText[id], true
}

func (d *DecodeStream) take() string {
	keep := incompleteTail(d.pending)
	n := len(d.pending) - keep
	if n == 0 {
		return ""
	}
	s := lossyString(d.pending[:n])
	d.pending = append(d.pending[:0], d.pending[n:]...)
	return s
}

// Flush returns whatever is held back (as U+FFFD when incomplete).
func (d *DecodeStream) Flush() string {
	s := lossyString(d.pending)
	d.pending = d.pending[:0]
	return s
}

// StopConfig says when a generation ends early.
type StopConfig struct {
	Strings     []string // stop strings matched on the decoded text
	TokenIDs    []int32  // stop_token_ids (the engine stops on them too)
	IgnoreEOS   bool     // do not treat the EOS set as stops
	IncludeStop bool     // keep the matched stop string in the output (no_stop_trim)
	SkipSpecial bool     // hide special tokens from the text (default in the API: true)
	// TokenStrings maps single-token stop strings' ids back to the string,
	// so matched_stop reports the string the client sent.
	TokenStrings map[int32]string
	// MinTokens (min_tokens): no stop — token, EOS or string — ends the
	// generation before this many tokens; such a token is plain output.
	MinTokens int
}

// StopResult is what one step produced.
type StopResult struct {
	Text    string // new final text (may be empty)
	Stopped bool   // the generation must end now (cancel it on the engine)
	// Matched is the stop string that matched, or "" for a token stop.
	Matched string
	// MatchedToken is the stop or EOS token id that ended it, or -1.
	MatchedToken int32
}

// StopDecoder is the incremental detokenizer plus the stop "jail": text
// that could still be the start of a stop string is held back until it
// is decided, so a client never sees part of a stop string.
type StopDecoder struct {
	ds      *DecodeStream
	cfg     StopConfig
	stopIDs map[int32]bool
	jail    string
	done    bool
	maxStop int
	n       int // tokens stepped
}

// NewStopDecoder starts a stop-aware decode of one generation.
func (t *Tokenizer) NewStopDecoder(cfg StopConfig) *StopDecoder {
	s := &StopDecoder{ds: t.NewDecodeStream(cfg.SkipSpecial), cfg: cfg, stopIDs: map[int32]bool{}}
	for _, id := range cfg.TokenIDs {
		s.stopIDs[id] = true
	}
	if !cfg.IgnoreEOS {
		for _, id := range t.eos {
			s.stopIDs[id] = true
		}
	}
	var strs []string
	for _, x := range cfg.Strings {
		if x != "" {
			strs = append(strs, x)
			s.maxStop = max(s.maxStop, len(x))
		}
	}
	s.cfg.Strings = strs
	return s
}

// Done reports whether a stop already matched; later tokens are ignored.
func (s *StopDecoder) Done() bool { return s.done }

// Step feeds one token.
func (s *StopDecoder) Step(id int32) StopResult {
	if s.done {
		return StopResult{MatchedToken: -1}
	}
	s.n++
	if s.stopIDs[id] && s.n >= s.cfg.MinTokens {
		s.done = true
		text := s.jail + s.ds.Flush()
		s.jail = ""
		if s.cfg.IncludeStop && !(s.cfg.SkipSpecial && s.ds.t.IsSpecial(id)) {
			text += s.ds.t.Decode([]int32{id}, false)
		}
		return StopResult{Text: text, Stopped: true, Matched: s.cfg.TokenStrings[id], MatchedToken: id}
	}
	s.jail += s.ds.Step(id)
	return s.scan()
}

// scan looks for a stop string in the jail and releases what is decided.
func (s *StopDecoder) scan() StopResult {
	if len(s.cfg.Strings) == 0 {
		out := s.jail
		s.jail = ""
		return StopResult{Text: out, MatchedToken: -1}
	}
	best, bestAt := "", -1
	for _, x := range s.cfg.Strings {
		if i := strings.Index(s.jail, x); i >= 0 && (bestAt < 0 || i < bestAt) {
			best, bestAt = x, i
		}
	}
	if bestAt >= 0 && s.n < s.cfg.MinTokens {
		// Too early to stop (min_tokens): the match is output; a stop
		// string may still complete later.
		out := s.jail[:len(s.jail)-s.holdLen()]
		s.jail = s.jail[len(out):]
		return StopResult{Text: out, MatchedToken: -1}
	}
	if bestAt >= 0 {
		s.done = true
		end := bestAt
		if s.cfg.IncludeStop {
			end += len(best)
		}
		out := s.jail[:end]
		s.jail = ""
		return StopResult{Text: out, Stopped: true, Matched: best, MatchedToken: -1}
	}
	hold := s.holdLen()
	out := s.jail[:len(s.jail)-hold]
	s.jail = s.jail[len(s.jail)-hold:]
	return StopResult{Text: out, MatchedToken: -1}
}

// holdLen is the longest suffix of the jail that is a prefix of some
// stop string: held back until decided.
func (s *StopDecoder) holdLen() int {
	hold := 0
	for _, x := range s.cfg.Strings {
		for k := min(len(x)-1, len(s.jail)); k > hold; k-- {
			if strings.HasSuffix(s.jail, x[:k]) {
				hold = k
				break
			}
		}
	}
	return hold
}

// Finish ends the generation (engine finished by itself) and returns the
// text still held back.
func (s *StopDecoder) Finish() string {
	if s.done {
		return ""
	}
	s.done = true
	out := s.jail + s.ds.Flush()
	s.jail = ""
	return out
}

// SplitStops turns stop strings that are exactly one token into
// stop_token_ids for the engine (the TokenSpeed wire takes ids only) and
// returns the map back to the strings. All strings stay string stops too:
// a single-token stop can also appear inside a longer token.
func (t *Tokenizer) SplitStops(stops []string) (ids []int32, byID map[int32]string) {
	byID = map[int32]string{}
	for _, s := range stops {
		if s == "" {
			continue
		}
		enc, err := t.Encode(s, false)
		if err != nil || len(enc) != 1 {
			continue
		}
		if _, dup := byID[enc[0]]; !dup {
			ids = append(ids, enc[0])
			byID[enc[0]] = s
		}
	}
	return ids, byID
}
