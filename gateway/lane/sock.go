package lane

// The output PULL socket, on tsd's own ZMTP framing (gateway/zmtp) rather
// than zmq4's. Engine output is the lane's hot path: zmq4's PULL made a
// context, a semaphore and fresh frame buffers for every message and
// handed them over through a channel and Recv's select. Here each
// admitted connection has one owner goroutine that reads it into one
// reused buffer and gives each message straight to the socket's sink
// (the worker's decode and delivery, gateway/lane/sink.go), so a token
// crosses no channel and no allocation between the socket and its
// stream. The gate (gate.go) still greets and admits every connection;
// the ROUTER sockets stay on zmq4 (docs/architecture.md §13).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/gateway/zmtp"
)

// pullSock is a bound PULL socket. Its connection bookkeeping (admission,
// liveness events, MaxConns) is the zsock's, shared with the ROUTERs.
type pullSock struct {
	*zsock
	gate *gateListener
	sink func() func([][]byte) // per connection; nil: messages go to Recv
	msgs chan [][]byte         // Recv's messages when there is no sink
	stop chan struct{}         // closed first by Close (done is closed last, as zsock's)
	wg   sync.WaitGroup        // accept loop and connection owners
	shut atomic.Bool
}

// pullReady is our READY, sent once the gate admitted a pusher (the gate
// sent the greeting; zmq4 used to send this).
var pullReady = zmtp.Ready("PULL")

func bindPull(s *zsock, network, addr string) (*pullSock, error) {
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	if ul, ok := l.(*net.UnixListener); ok {
		// We remove the file ourselves on Close (a rebind must not race
		// the stdlib's unlink).
		ul.SetUnlinkOnClose(false)
	}
	p := &pullSock{zsock: s, sink: s.bind.Sink, msgs: make(chan [][]byte), stop: make(chan struct{})}
	p.gate = newGateListener(l, s)
	if network == "tcp" {
		s.endpoint = "tcp://" + l.Addr().String()
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

func (p *pullSock) acceptLoop() {
	defer p.wg.Done()
	for {
		select {
		case tc := <-p.gate.ch:
			p.wg.Add(1)
			go p.own(tc)
		case <-p.stop:
			return
		}
	}
}

// own is the connection's one goroutine: it sends our READY, then reads
// messages until the peer goes, breaks the framing or the socket closes.
func (p *pullSock) own(tc *trackedConn) {
	defer p.wg.Done()
	defer func() { _ = tc.Close() }() // reports the peer gone (zsock.release)
	defer func() {
		if v := recover(); v != nil {
			p.cut(tc, fmt.Errorf("internal error while reading: %v", v))
			if r := p.opts.OnPanic; r != nil {
				r("lane output connection", v, debug.Stack())
			}
		}
	}()
	if p.shut.Load() {
		return
	}
	_ = tc.Conn.SetWriteDeadline(time.Now().Add(p.opts.WriteTimeout))
	if _, err := tc.Conn.Write(pullReady); err != nil {
		return
	}
	_ = tc.Conn.SetWriteDeadline(time.Time{})
	rd := zmtp.NewReader(tc.Conn, zmtp.Limits{MaxFrame: p.opts.MaxFrame, MaxMessage: p.opts.MaxMessage}, connReadBuf)
	rest, err := afterReady(tc.replay)
	if err != nil {
		p.cut(tc, err)
		return
	}
	rd.Prime(rest)
	tc.replay = nil
	var deliver func([][]byte)
	if p.sink != nil {
		deliver = p.sink()
	}
	for {
		frames, err := rd.ReadMessage()
		if err != nil {
			if errors.Is(err, zmtp.ErrProtocol) {
				p.cut(tc, err)
			}
			return
		}
		if deliver != nil {
			deliver(frames) // frames are valid only during the call
			continue
		}
		msg := make([][]byte, len(frames))
		for i, f := range frames {
			msg[i] = append([]byte(nil), f...)
		}
		select {
		case p.msgs <- msg:
		case <-p.stop:
			return
		}
	}
}

func (p *pullSock) cut(tc *trackedConn, err error) {
	p.bind.Logger.Warn("lane connection cut", "worker", p.bind.Role, "socket", p.kind.String(), "peer", tc.RemoteAddr().String(), "err", err)
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

func (p *pullSock) Recv() ([][]byte, error) {
	select {
	case m := <-p.msgs:
		return m, nil
	case <-p.stop:
		return nil, ErrClosed
	}
}

func (p *pullSock) Send([][]byte) error {
	return fmt.Errorf("send on PULL %s: a PULL socket only receives", p.endpoint)
}

// sinks reports that messages go to the sink, not to Recv.
func (p *pullSock) sinks() bool { return p.sink != nil }

func (p *pullSock) Close() error {
	var err error
	p.once.Do(func() {
		p.shut.Store(true)
		p.closed.Store(true)
		close(p.stop)
		err = p.gate.Close()
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		p.mu.Lock()
		var cs []*trackedConn
		for _, m := range p.conns {
			for c := range m {
				cs = append(cs, c)
			}
		}
		p.mu.Unlock()
		for _, c := range cs {
			_ = c.Conn.Close() // its owner sees the read fail and releases it
		}
		p.wg.Wait()
		if p.ipcPath != "" {
			if rerr := os.Remove(p.ipcPath); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
				err = fmt.Errorf("remove %s: %w", p.ipcPath, rerr)
			}
		}
		p.events.close()
		close(p.done)
	})
	return err
}
