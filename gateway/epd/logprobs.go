package epd

import (
	"errors"
	"fmt"
	"strings"
)

// TokenLogprobs is one run of per-token logprobs: Vals[i] belongs to token
// IDs[i]. A NaN value is a position without a logprob (the first prompt
// token, SGLang's None); front ends render it as JSON null.
type TokenLogprobs struct {
	Vals []float64
	IDs  []int32
}

// CheckPromptLogprobs checks the prefill's input logprobs against the
// prompt: they cover input_ids[start:] token by token.
func CheckPromptLogprobs(p TokenLogprobs, inputIDs []int32, start int) error {
	if start < 0 || start > len(inputIDs) {
		return fmt.Errorf("prompt logprobs: logprob_start_len %d outside a prompt of %d tokens", start, len(inputIDs))
	}
	want := inputIDs[start:]
	if len(p.IDs) != len(want) || len(p.Vals) != len(want) {
		return fmt.Errorf("prompt logprobs: engine returned %d values for %d prompt tokens from %d", len(p.Vals), len(want), start)
	}
	for i, id := range want {
		if p.IDs[i] != id {
			return fmt.Errorf("prompt logprobs: position %d is token %d, the prompt has %d", start+i, p.IDs[i], id)
		}
	}
	return nil
}

// ErrPromptLogprobsUnsupported is wrapped when the prefill engine cannot
// compute prompt logprobs; the front end answers 400.
var ErrPromptLogprobsUnsupported = errors.New("prompt logprobs are not supported by the prefill engine")

// PromptLogprobFailure interprets a prefill leg that asked for prompt
// logprobs. finish/message are the terminal finish reason and the abort
// message (full variant; "" on the slim wire); got reports whether the
// terminal output carried input-logprob columns. It returns nil when the
// logprobs are there, an error wrapping ErrPromptLogprobsUnsupported when
// the engine refused them (an abort naming logprobs, or a normal finish
// without the columns, as an engine that ignores the field), and nil for
// other aborts (the caller reports those as it does any abort).
func PromptLogprobFailure(finish, message string, got bool) error {
	switch {
	case got:
		return nil
	case finish == "abort" && strings.Contains(strings.ToLower(message), "logprob"):
		return fmt.Errorf("%w: %s", ErrPromptLogprobsUnsupported, message)
	case finish == "abort" || finish == "error":
		return nil
	case finish != "":
		return fmt.Errorf("%w: its output has no input logprobs", ErrPromptLogprobsUnsupported)
	}
	return nil
}
