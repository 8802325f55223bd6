// Package transport holds `make bench`'s measurement of the ZMQ transport
// alone: the lane's own socket (gateway/lane's zmq4 transport with its
// connection tracking) receiving engine output messages from a zmq4 PUSH
// peer, as an engine's output socket sends them, with no gateway above it.
package transport
