// Package kvevents is the engines' own prefix-cache signal: the KV cache
// events a TokenSpeed engine publishes with --kv-events-config
// (docs/protocol.md §16), and the gateway's exact index of every prefill
// rank's cached blocks built from them.
//
// It has two halves:
//
//   - the protocol: the msgpack KVEventBatch codec (encoders byte-exact
//     with the engine's msgspec output, testdata/kv-events-vectors.json;
//     a decoder of hostile input that bounds every allocation by the input
//     and names the failing field), the PUB message and replay frames, the
//     engine's block hash, and a small ZMTP 3.0 client whose frame and
//     message caps are checked before anything is allocated. ts-fake's
//     publisher (cmd/ts-fake/kvpub) sends these frames, so both sides
//     share one codec; the publisher itself lives with ts-fake because it
//     runs on go-zeromq/zmq4, which the tsd binary must not link;
//   - the gateway's side: a Subscriber per prefill engine that dials each
//     DP rank's publisher (retrying quietly while the engine starts),
//     detects sequence gaps and restarts, recovers gaps through the replay
//     socket, and keeps one Index per rank. One owner goroutine per engine
//     owns its ranks' indexes; Match queries reach it over a channel.
package kvevents
