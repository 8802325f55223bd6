// Package wire encodes and decodes every message of the direct ZMQ lane
// between the gateway and headless TokenSpeed engines (docs/protocol.md):
// handshake maps (HELLO/INIT/READY and the registration), tagged request
// arrays with their sampling parameters, aborts, slim and full output
// batches, the shutdown sentinel and tsd's encode requests.
//
// Encoders are byte-exact with the engine's msgspec output and SMG's
// encoder (testdata/zmq-lane-vectors.json, docs/protocol.md §12). Decoders are tolerant where the engine
// is (unknown map keys, shorter or longer struct arrays), never panic, bound
// allocation by the input size, and name the failing field in errors.
package wire
