// Package epd holds the pure decisions of encode/prefill/decode dispatch
// over the direct ZMQ lane (docs/protocol.md §9, docs/protocol.md §9): which
// encode worker gets an image, the per-item bootstrap rooms, the three
// per-leg views of a multimodal item (pixels only to encode, the
// encode_handshake only to prefill, metadata only to decode), image pad
// expansion in the prompt, image URL intake, and the prefill→decode join of
// prompt logprobs. Nothing here does I/O except ParseImageURL's optional
// HTTP fetch; the dispatcher calls these in order (see Plan's doc).
//
// EPD over this lane is tsd's design, not upstream's: keep the shapes in
// these small functions so they can change when upstream settles.
package epd
