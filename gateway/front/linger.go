package front

// Lingering close. When the door answers before it has read a request's
// body (an oversized body, a missing API key, a full body budget), closing
// the connection at once leaves the unread body in the kernel's receive
// buffer, and a close with unread data sends a TCP reset. A client that
// writes its whole body before reading (Python's http.client and urllib,
// and every client built on them) then sees "Connection reset by peer" or
// "Broken pipe" instead of the answer. nginx's lingering_close is the
// cure copied here: send the answer whole, half-close the write side, and
// read and discard what the client still sends, for a bounded time and
// size, before closing.

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The bounds of one lingering close: nginx's lingering_time (30 s in all)
// and lingering_timeout (5 s without a byte) by default, plus a byte cap
// so a client that never stops sending costs a bounded amount of work.
// At most lingerSlots connections linger at once; beyond that a
// connection closes at once, as it did before lingering existed.
type lingerBounds struct {
	Total time.Duration
	Idle  time.Duration
	Bytes int64
	Slots int
}

var lingering = newLingerer(lingerBounds{Total: 30 * time.Second, Idle: 5 * time.Second, Bytes: 256 << 20, Slots: 64})

type lingerer struct {
	b     lingerBounds
	slots chan struct{}
	bufs  sync.Pool
}

func newLingerer(b lingerBounds) *lingerer {
	return &lingerer{b: b, slots: make(chan struct{}, b.Slots), bufs: sync.Pool{New: func() any { return new([32 << 10]byte) }}}
}

// unreadBody reports whether r may still have body bytes on the wire.
func unreadBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// WriteErrorUnread answers e on a request whose body was not read (or read
// only in part) and closes the connection with a lingering close, so a
// client that writes before it reads gets the answer. Where the
// connection cannot be taken over (HTTP/2, a test recorder), it answers
// as WriteError does and leaves the connection to net/http.
func WriteErrorUnread(w http.ResponseWriter, r *http.Request, err error) {
	if !unreadBody(r) {
		WriteError(w, err)
		return
	}
	e := As(err)
	body, jerr := json.Marshal(e.JSON())
	if jerr != nil {
		WriteError(w, err)
		return
	}
	body = append(body, '\n')
	h := w.Header()
	errorHeaders(h, e)
	// A known length: the answer must be complete before the connection
	// is taken over (a chunked answer would never get its last chunk).
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Connection", "close")
	w.WriteHeader(e.Status)
	_, _ = w.Write(body)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	conn, brw, herr := rc.Hijack()
	if herr != nil {
		return
	}
	lingering.start(conn, brw.Reader)
}

// start lingers on conn in a goroutine of its own, or closes it at once
// when every slot is taken.
func (l *lingerer) start(conn net.Conn, r *bufio.Reader) {
	select {
	case l.slots <- struct{}{}:
	default:
		_ = conn.Close()
		return
	}
	go l.linger(conn, r)
}

// linger half-closes conn, discards what the client still sends within
// the bounds, then closes it.
func (l *lingerer) linger(conn net.Conn, r *bufio.Reader) {
	defer func() {
		_ = recover() // a per-connection goroutine never takes the daemon down
		_ = conn.Close()
		<-l.slots
	}()
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	buf := l.bufs.Get().(*[32 << 10]byte)
	defer l.bufs.Put(buf)
	end := time.Now().Add(l.b.Total)
	var n int64
	for n < l.b.Bytes {
		d := time.Now().Add(l.b.Idle)
		if d.After(end) {
			d = end
		}
		if conn.SetReadDeadline(d) != nil {
			return
		}
		k, err := r.Read(buf[:])
		n += int64(k)
		if err != nil {
			return // EOF (the client is done), the deadline, or a reset
		}
	}
}
