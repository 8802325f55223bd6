// Package epd holds the pure steps of encode/prefill/decode dispatch over
// the direct ZMQ lane (docs/protocol.md §9): which encode worker gets an
// image (the consistent-hashing ring), the per-item bootstrap rooms, every
// leg of an image request built in one pass (BuildLegs: pixels only to
// encode, the encode_handshake only to prefill, metadata only to decode),
// and the prefill→decode join of prompt logprobs. Nothing here does I/O:
// image intake (URLs, fetching, decoding, preprocessing, the prompt's pad
// expansion) is gateway/vision's, which hands the dispatcher tokenapi.Images.
//
// EPD over this lane is tsd's design, not upstream's: keep the shapes in
// these small functions so they can change when upstream settles.
package epd
