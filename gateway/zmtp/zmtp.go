// Package zmtp is tsd's one implementation of ZMTP 3.x framing with the
// NULL mechanism (RFC 23/ZMTP): the greeting, the READY and ERROR
// commands, frame headers, and a reader that checks every frame and
// message against caps before it buffers a byte of it. The lane's output
// PULL reads engine output through it (gateway/lane/sock.go) and the KV
// event client dials publishers with it (gateway/kvevents/zmtp.go).
//
// A greeting is 64 bytes: signature 0xFF, 8 padding bytes, 0x7F; version
// major and minor; a 20-byte mechanism name padded with NULs; the
// as-server byte; 31 bytes of filler. A frame is a flags byte (MORE 0x01,
// LONG 0x02, COMMAND 0x04; the other bits are reserved, zero) then its
// size, one byte or, with LONG, eight bytes big-endian, then its body.
package zmtp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// GreetingLen is the size of a ZMTP 3 greeting.
const GreetingLen = 64

// Frame flags.
const (
	FlagMore    = 0x01
	FlagLong    = 0x02
	FlagCommand = 0x04
)

// MaxCommand bounds a command frame (READY with its properties is tens of
// bytes; libzmq's largest, a CURVE INITIATE, is a few hundred).
const MaxCommand = 1 << 16

// ErrProtocol is wrapped by every error that is the peer breaking the
// protocol (bad framing, a frame or message over a cap), as opposed to
// a connection that ends.
var ErrProtocol = errors.New("zmtp")

// ProtocolError is a protocol violation; errors.Is(err, ErrProtocol) holds.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return e.Msg }

// Unwrap makes errors.Is(err, ErrProtocol) hold.
func (e *ProtocolError) Unwrap() error { return ErrProtocol }

func protoErr(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// Greeting is the greeting tsd sends: version 3.0, mechanism NULL,
// as-server 0 (NULL has no roles). Speaking 3.0 keeps libzmq and zmq4
// peers from expecting 3.1's subscribe commands and heartbeats.
func Greeting() []byte {
	g := make([]byte, GreetingLen)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 0
	copy(g[12:32], "NULL")
	return g
}

// CheckGreeting validates a peer's whole greeting: signature, version 3
// or later, mechanism NULL.
func CheckGreeting(g []byte) error {
	if len(g) < GreetingLen {
		return protoErr("greeting of %d bytes", len(g))
	}
	if err := CheckSignature(g); err != nil {
		return err
	}
	if mech := strings.TrimRight(string(g[12:32]), "\x00"); mech != "NULL" {
		return protoErr("security mechanism %q, only NULL is supported", mech)
	}
	return nil
}

// CheckSignature validates the first 12 bytes of a greeting: signature
// and version (what a peer sends before it waits for ours).
func CheckSignature(g []byte) error {
	if len(g) < 12 {
		return protoErr("greeting of %d bytes", len(g))
	}
	if g[0] != 0xff || g[9]&1 != 1 {
		return protoErr("peer is not a ZMTP 3 peer (bad signature)")
	}
	if g[10] < 3 {
		return protoErr("peer speaks ZMTP %d.%d, want 3.x", g[10], g[11])
	}
	return nil
}

// AppendFrameHeader appends the header of a frame of n bytes.
func AppendFrameHeader(b []byte, n int, more, cmd bool) []byte {
	var flags byte
	if more {
		flags |= FlagMore
	}
	if cmd {
		flags |= FlagCommand
	}
	if n > 255 {
		return binary.BigEndian.AppendUint64(append(b, flags|FlagLong), uint64(n))
	}
	return append(b, flags, byte(n))
}

// AppendMessage appends frames as one message.
func AppendMessage(b []byte, frames ...[]byte) []byte {
	for i, f := range frames {
		b = AppendFrameHeader(b, len(f), i < len(frames)-1, false)
		b = append(b, f...)
	}
	return b
}

// Property is one metadata property of a command.
type Property struct{ Name, Value string }

// AppendProperty appends a metadata property (name length byte, name,
// 4-byte value length, value).
func AppendProperty(b []byte, name, value string) []byte {
	b = append(b, byte(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// Ready is a whole READY command frame (header and body) with the given
// properties, Socket-Type first.
func Ready(sockType string, props ...Property) []byte {
	body := append([]byte{5}, "READY"...)
	body = AppendProperty(body, "Socket-Type", sockType)
	for _, p := range props {
		body = AppendProperty(body, p.Name, p.Value)
	}
	return append(AppendFrameHeader(nil, len(body), false, true), body...)
}

// Command is a parsed command frame body.
type Command struct {
	Name  string
	Props []Property // READY's metadata
	// Reason is an ERROR command's text.
	Reason string
}

// Prop returns a property's value ("" when absent); names compare
// case-insensitively, as RFC 23 has them.
func (c Command) Prop(name string) string {
	for _, p := range c.Props {
		if strings.EqualFold(p.Name, name) {
			return p.Value
		}
	}
	return ""
}

// ParseCommand reads a command body: its name, then READY's properties
// or ERROR's reason. Other commands (3.1's PING, SUBSCRIBE) carry their
// name only.
func ParseCommand(body []byte) (Command, error) {
	if len(body) < 1 || int(body[0]) > len(body)-1 {
		return Command{}, protoErr("truncated command name")
	}
	c := Command{Name: string(body[1 : 1+int(body[0])])}
	rest := body[1+int(body[0]):]
	switch c.Name {
	case "ERROR":
		if len(rest) > 0 && int(rest[0]) <= len(rest)-1 {
			c.Reason = string(rest[1 : 1+int(rest[0])])
		}
		return c, nil
	case "READY":
	default:
		return c, nil
	}
	for len(rest) > 0 {
		kl := int(rest[0])
		if kl == 0 || 1+kl+4 > len(rest) {
			return Command{}, protoErr("malformed READY property")
		}
		key := string(rest[1 : 1+kl])
		vl := binary.BigEndian.Uint32(rest[1+kl : 1+kl+4])
		rest = rest[1+kl+4:]
		if uint64(vl) > uint64(len(rest)) {
			return Command{}, protoErr("malformed READY property value")
		}
		c.Props = append(c.Props, Property{key, string(rest[:vl])})
		rest = rest[vl:]
	}
	return c, nil
}
