package lane

// A bound socket's connections and their owners. Each admitted
// connection has one goroutine that writes our READY and then reads the
// connection through gateway/zmtp's Reader into one reused buffer: on the
// output PULL it hands each message in place to the socket's sink (the
// worker's decode and delivery, sink.go), so a token crosses no channel
// and no allocation between the socket and its stream; on a ROUTER (and a
// PULL without a sink) it copies the message, identity first, to Recv.
// The gate (gate.go) greets and admits every connection first; writes to
// a ROUTER's connections are send.go's (docs/architecture.md §13).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/tsd-project/tsd/gateway/zmtp"
)

// ownedSock is a bound socket. Its connection books (admission, liveness
// events, MaxConns) are the zsock's.
type ownedSock struct {
	*zsock
	gate  *gateListener
	ready []byte                // our READY command frame
	sink  func() func([][]byte) // PULL only, per connection; nil: Recv
	msgs  chan [][]byte         // Recv's messages
	stop  chan struct{}         // closed first by Close (done is closed last)
	wg    sync.WaitGroup        // accept loop and connection owners
}

func bindOwned(s *zsock, network, addr string) (*ownedSock, error) {
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	if ul, ok := l.(*net.UnixListener); ok {
		// We remove the file ourselves on Close (a rebind must not race
		// the stdlib's unlink).
		ul.SetUnlinkOnClose(false)
	}
	if network == "tcp" {
		s.endpoint = "tcp://" + l.Addr().String()
	}
	o := &ownedSock{zsock: s, ready: zmtp.Ready(s.kind.String()), msgs: make(chan [][]byte), stop: make(chan struct{})}
	if s.kind == Pull {
		o.sink = s.bind.Sink
	}
	o.gate = newGateListener(l, s)
	o.wg.Add(1)
	go o.acceptLoop()
	return o, nil
}

func (o *ownedSock) acceptLoop() {
	defer o.wg.Done()
	for {
		select {
		case tc := <-o.gate.ch:
			o.wg.Add(1)
			go o.own(tc)
		case <-o.stop:
			return
		}
	}
}

// own is the connection's one reader: it sends our READY, then reads
// messages until the peer goes, breaks the framing or the socket closes.
func (o *ownedSock) own(tc *trackedConn) {
	defer o.wg.Done()
	defer func() { _ = tc.Close() }() // reports the peer gone (zsock.release)
	defer func() {
		if v := recover(); v != nil {
			o.cut(tc, fmt.Errorf("internal error while reading: %v", v))
			if r := o.opts.OnPanic; r != nil {
				r("lane connection reader", v, debug.Stack())
			}
		}
	}()
	select {
	case <-o.stop:
		return
	default:
	}
	tc.wmu.Lock()
	_, err := tc.write(o.ready)
	tc.wmu.Unlock()
	tc.markReady()
	if err != nil {
		return
	}
	rest, err := afterReady(tc.replay)
	if err != nil {
		o.cut(tc, err)
		return
	}
	// A small buffer until the connection proves to be an engine's: a
	// ROUTER only ever reads a rank's few handshake and registration
	// messages, and a PULL takes connReadBuf with its first message.
	rd := zmtp.NewReader(tc.Conn, zmtp.Limits{MaxFrame: o.opts.MaxFrame, MaxMessage: o.opts.MaxMessage}, connSmallBuf)
	rd.Prime(rest)
	tc.replay = nil
	grown := o.kind != Pull // a ROUTER keeps the small buffer
	var deliver func([][]byte)
	if o.sink != nil {
		deliver = o.sink()
	}
	var id []byte
	if o.kind == Router {
		id = []byte(tc.p.identity)
	}
	for {
		frames, err := rd.ReadMessage()
		if err != nil {
			if errors.Is(err, zmtp.ErrProtocol) {
				o.cut(tc, err)
			}
			return
		}
		if !tc.firstMsg.Load() {
			tc.firstMsg.Store(true)
			if t := tc.firstTimer.Load(); t != nil {
				t.Stop()
			}
			tc.ticket.settle(true) // a ROUTER peer settles with its first message (churn.go)
		}
		if deliver != nil {
			deliver(frames) // frames are valid only during the call
		} else {
			select {
			case o.msgs <- copyMessage(id, frames):
			case <-o.stop:
				return
			}
		}
		if !grown {
			rd.Grow(connReadBuf) // the frames above are handed on: the buffer may move
			grown = true
		}
	}
}

// copyMessage is a message out of the reader's buffer: [id] (a ROUTER's
// peer) then its frames, in one allocation of bytes.
func copyMessage(id []byte, frames [][]byte) [][]byte {
	n := len(id)
	for _, f := range frames {
		n += len(f)
	}
	buf := make([]byte, 0, n)
	msg := make([][]byte, 0, len(frames)+1)
	if id != nil {
		buf = append(buf, id...)
		msg = append(msg, buf[:len(id):len(id)])
	}
	for _, f := range frames {
		lo := len(buf)
		buf = append(buf, f...)
		msg = append(msg, buf[lo:len(buf):len(buf)])
	}
	return msg
}

func (o *ownedSock) cut(tc *trackedConn, err error) {
	o.bind.Logger.Warn("lane connection cut", "worker", o.bind.Role, "socket", o.kind.String(), "peer", tc.RemoteAddr().String(), "err", err)
}

// afterReady returns what the gate read past the peer's greeting and
// READY: the first bytes of its messages.
func afterReady(got []byte) ([]byte, error) {
	if len(got) < zmtpGreetingLen {
		return nil, errors.New("zmtp: greeting not read")
	}
	b := got[zmtpGreetingLen:]
	if len(b) < 2 {
		return nil, errors.New("zmtp: READY not read")
	}
	if b[0]&flagCommand == 0 {
		return nil, errors.New("zmtp: a message before READY")
	}
	hl, size := 2, uint64(b[1])
	if b[0]&flagLong != 0 {
		if len(b) < 9 {
			return nil, errors.New("zmtp: READY not read")
		}
		hl, size = 9, binary.BigEndian.Uint64(b[1:9])
	}
	if uint64(len(b)-hl) < size {
		return nil, errors.New("zmtp: READY not read")
	}
	return b[hl+int(size):], nil
}

// Recv returns the next message (a ROUTER's with the peer's identity
// first); on a PULL with a sink, nothing comes until Close.
func (o *ownedSock) Recv() ([][]byte, error) {
	select {
	case m := <-o.msgs:
		return m, nil
	case <-o.stop:
		return nil, ErrClosed
	}
}

func (o *ownedSock) Send(frames [][]byte) error {
	if o.kind == Pull {
		return fmt.Errorf("send on PULL %s: a PULL socket only receives", o.endpoint)
	}
	return o.zsock.Send(frames)
}

// sinks reports that messages go to the sink, not to Recv.
func (o *ownedSock) sinks() bool { return o.sink != nil }

func (o *ownedSock) Close() error {
	var err error
	o.once.Do(func() {
		o.closed.Store(true)
		close(o.stop)
		err = o.gate.Close()
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		o.mu.Lock()
		var cs []*trackedConn
		for _, m := range o.conns {
			for c := range m {
				cs = append(cs, c)
			}
		}
		o.mu.Unlock()
		for _, c := range cs {
			_ = c.Conn.Close() // its owner sees the read fail and releases it
		}
		o.wg.Wait()
		if o.ipcPath != "" {
			if rerr := os.Remove(o.ipcPath); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
				err = fmt.Errorf("remove %s: %w", o.ipcPath, rerr)
			}
		}
		o.events.close()
		o.refused.close()
		close(o.done)
	})
	return err
}

// waitReady is how long a send waits for a new connection's READY.
func (c *trackedConn) waitReady() error {
	if c.zready == nil {
		return nil
	}
	select {
	case <-c.zready:
		return nil
	default:
	}
	t := time.NewTimer(c.sock.opts.WriteTimeout)
	defer t.Stop()
	select {
	case <-c.zready:
		return nil
	case <-t.C:
		_ = c.Close()
		return connError{fmt.Errorf("our READY not sent within %s", c.sock.opts.WriteTimeout)}
	}
}
