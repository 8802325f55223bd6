// Package tokenapi is the token-level contract between the gateway's HTTP front
// ends (/generate, the OpenAI API) and the dispatcher that drives engines
// over the lane. Front ends tokenize and detokenize; the dispatcher only
// moves token ids. Keeping the contract in its own package lets both sides
// change independently.
package tokenapi

import (
	"context"
	"errors"
	"fmt"
)

// Sampling is what a front end asks of the engine, in API terms. A field
// whose engine default is not its zero value is optional: nil means the
// engine's default (docs/protocol.md §5.3), so a front end copies only
// what its client sent and nobody patches "unset" afterwards. Wire is the
// one conversion to the lane's form.
type Sampling struct {
	MaxNewTokens      *int     // nil: the engine's maximum
	MinNewTokens      int      //
	Temperature       *float64 // nil: 1
	TopP              *float64 // nil: 1
	TopK              *int     // nil, -1 or 0 (vLLM's "no limit"): all
	MinP              float64  //
	FrequencyPenalty  float64  //
	PresencePenalty   float64  //
	RepetitionPenalty *float64 // nil: 1
	StopTokenIDs      []int32
	IgnoreEOS         bool
	Seed              *int64 // nil: the engine seeds from the rid

	// At most one constraint (docs/protocol.md §5.3): the engine's grammar
	// backend holds the output to it (tool_choice, response_format, and
	// SGLang's regex/ebnf request fields). nil: unconstrained.
	JSONSchema *string
	Regex      *string
	EBNF       *string
}

// Image is one image item already preprocessed for the model (EPD): the
// front end decodes, preprocesses and expands the prompt's pad tokens; the
// dispatcher routes it to an encoder and builds the per-leg wire items.
type Image struct {
	Hash     string    // hex content hash: consistent-hashing key for the encoder choice
	ID       int64     // the wire item's hash (vision.ItemHash)
	Pixels   []float32 // patchified, normalised pixel values: GridTHW product rows of Dim
	Dim      int       // values per patch row
	GridTHW  [3]int    // temporal, height, width patch grid
	Offset   [2]int    // [start, end) of its pad tokens in InputIDs (half-open; the wire's is inclusive)
	PadToken int32
}

// Request is one generation (n = 1; front ends fan out n > 1).
type Request struct {
	RID      string // optional; the dispatcher mints one when empty
	InputIDs []int32
	Sampling Sampling
	Stream   bool

	ReturnLogprob   bool // output logprobs of sampled tokens
	TopLogprobsNum  int  // with ReturnLogprob: the k most likely alternatives per token, 0..MaxTopLogprobs
	LogprobStartLen int  // >= 0: prompt logprobs from this position (prefill leg only); -1 none

	Images []Image

	// RoutingKey is the client's X-SMG-Routing-Key header, SMG's sticky
	// routing key (the manual and consistent_hashing policies route by
	// it); "" when the client sent none.
	RoutingKey string

	// Priority is the request's priority field as SGLang and vLLM take it
	// in the body (larger is served first here, SGLang's order;
	// docs/protocol.md §11.13), MinPriority..MaxPriority; nil: the
	// x-smg-priority header's class, else the API key's.
	Priority *int
}

// Request priorities: the range a priority field may take (a 400
// outside it).
const (
	MinPriority = -100
	MaxPriority = 100
)

// CheckPriority is the one check of a priority field; param names it as
// the client sent it.
func CheckPriority(p *int) error {
	if p != nil && (*p < MinPriority || *p > MaxPriority) {
		return fmt.Errorf("priority must be between %d and %d (larger is served first), got %d", MinPriority, MaxPriority, *p)
	}
	return nil
}

// RoutingKeyHeader is SMG's sticky-routing header; front ends copy it
// into Request.RoutingKey.
const RoutingKeyHeader = "X-SMG-Routing-Key"

// Finish reasons as front ends report them.
const (
	FinishStop   = "stop"   // EOS, stop token or stop string
	FinishLength = "length" // max_new_tokens reached
	FinishAbort  = "abort"  // engine or gateway aborted
)

// Finish ends a generation.
type Finish struct {
	Reason       string
	MatchedToken *int32 // the stop token id that ended it, if any
	Message      string // for aborts: why
}

// MaxTopLogprobs bounds TopLogprobsNum on every route: OpenAI's ceiling
// for chat and Responses (vLLM's default max_logprobs too).
const MaxTopLogprobs = 20

// TopLogprob is one of a generated token's most likely alternatives.
type TopLogprob struct {
	ID      int32
	Logprob float64
}

// Event is one increment of a generation. The last event has Finish or Err set.
type Event struct {
	TokenIDs       []int32        // tokens new since the previous event
	Logprobs       []float64      // per token in TokenIDs, when requested
	TopLogprobs    [][]TopLogprob // per token in TokenIDs, its TopLogprobsNum alternatives, most likely first (docs/protocol.md §6.7)
	PromptLogprobs []float64      // once, on the first event, when requested (PD: from prefill)
	PromptTokens   int
	OutputTokens   int // cumulative
	// CachedTokens is how many prompt tokens the engine found in its
	// prefix cache: the prefill leg's count, where the prompt is computed
	// (the decode's until the prefill's is known). Final on the last event.
	CachedTokens int
	Finish       *Finish
	Err          error // the generation failed (engine died, deadline, ...)
}

// ErrTopLogprobsUnsupported: the engine answered a top-logprob request
// without alternatives (upstream's engine does, docs/protocol.md §6.7).
var ErrTopLogprobsUnsupported = errors.New("the engine returned no top logprobs: this engine does not compute top_logprobs_num alternatives over the lane; ask for logprobs without top alternatives")

// CheckTopLogprobs reports an event of a top-logprob request whose tokens
// came without their alternatives; front ends fail the request with it.
func CheckTopLogprobs(r Request, ev Event) error {
	if r.TopLogprobsNum > 0 && r.ReturnLogprob && len(ev.TokenIDs) > 0 && len(ev.TopLogprobs) != len(ev.TokenIDs) {
		return ErrTopLogprobsUnsupported
	}
	return nil
}

// Streamer is one generation read in its caller's goroutine: whatever
// drives the generation (the dispatcher's flight: its legs, retries,
// migration) runs inside Next, so a token goes from the lane's reader to
// the front end's writer with one wake-up and no goroutine between them
// (docs/architecture.md §14). One goroutine at a time calls it.
type Streamer interface {
	// Next waits for the next event; ok is false once the last one (Finish
	// or Err set) was returned. Cancelling the context the stream was
	// started with ends it (every leg aborted).
	Next() (ev Event, ok bool)
	// Buffered reports whether Next has output to return without
	// waiting: a writer flushes once nothing more is ready, so outputs
	// that arrived together cost one flush.
	Buffered() bool
	// Close ends the generation, aborting every leg of one still running
	// as cancelling its context does. Idempotent; always call it.
	Close()
}

// Engine generates. Cancelling ctx aborts the generation on every leg it
// touches. It states all a front end relies on: front ends never probe
// an engine for more.
type Engine interface {
	// Stream starts a generation read with Next in the caller's goroutine.
	Stream(ctx context.Context, r Request) (Streamer, error)
	// Generate is Stream read by a goroutine of its own into a channel,
	// closed after the last event, for callers that select on several
	// generations.
	Generate(ctx context.Context, r Request) (<-chan Event, error)
	// Ready reports whether at least one prefill and one decode rank are registered.
	Ready() bool
	// Queues reports whether Generate waits for a routable worker instead
	// of refusing at once: a front end then skips its own fail-fast
	// readiness check (gateway.queue_timeout).
	Queues() bool
	// MaxModelLen is the engines' context length in tokens, 0 while no
	// engine has reported one: front ends refuse a prompt that cannot fit
	// before they tokenize or dispatch it.
	MaxModelLen() int
	// ImageSupport says why image requests cannot be routed (nil: they
	// can), so a front end refuses images before fetching or decoding any.
	ImageSupport() error
	// ReportPanic records a panic a front end's own goroutine recovered
	// (logged with its stack, counted, shown as an event), as the
	// engine's boundaries do for theirs.
	ReportPanic(where string, v any, stack []byte)
}
