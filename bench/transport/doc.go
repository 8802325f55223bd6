// Package transport holds `make bench`'s measurement of the ZMQ transport
// alone: the lane's own output socket (gateway/lane's PULL, on the
// gateway/zmtp framing behind the admission gate) receiving engine output
// messages from a zmq4 PUSH peer, as an engine's output socket sends them,
// with no gateway above it. BenchmarkLanePull reads through Recv (a copy
// per message); BenchmarkLanePullSink through the in-place sink the
// worker uses.
package transport
