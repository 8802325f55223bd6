// Package kvpub is ts-fake's KV cache event publisher: TokenSpeed's
// ZmqEventPublisher in Go (docs/protocol.md §16.2, §16.4), one per DP
// rank. It lives beside ts-fake, not in gateway/kvevents, because it runs
// on go-zeromq/zmq4 and the tsd binary must not link that library; the
// frames and the batch codec it sends are gateway/kvevents', the one
// codec both sides share.
package kvpub

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"
	"sync"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/gateway/kvevents"
)

// Publisher is one DP rank's publisher: a PUB socket that numbers batches from 0, a replay buffer of
// the last BufferSteps batches and a replay ROUTER that answers a start
// sequence with every buffered batch from it, then the end marker
// (docs/protocol.md §16.2, §16.4). One goroutine owns the sequence and the
// buffer, as upstream's publisher thread does.
type Publisher struct {
	pub, replay zmq4.Socket
	topic       string
	bufSteps    int
	queue       chan item
	requests    chan [][]byte
	pubAddr     string
	replayAddr  string
	running     sync.WaitGroup // run
	reading     sync.WaitGroup // readReplay
	cancel      context.CancelFunc
	onErr       func(error)
	closeOnce   sync.Once
}

// New starts rank's publisher for cfg: endpoints offset by rank,
// bound or connected by upstream's rule. onErr hears send errors (nil:
// dropped).
func New(cfg kvevents.Config, rank int, onErr func(error)) (*Publisher, error) {
	ep, err := kvevents.OffsetEndpoint(cfg.Endpoint, rank)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	p := &Publisher{topic: cfg.Topic, bufSteps: cfg.BufferSteps, queue: make(chan item, cfg.MaxQueueSize),
		requests: make(chan [][]byte, 16), cancel: cancel, onErr: onErr}
	if p.onErr == nil {
		p.onErr = func(error) {}
	}
	p.pub = zmq4.NewPub(ctx, quiet)
	if cfg.HWM > 0 {
		_ = p.pub.SetOption(zmq4.OptionHWM, cfg.HWM)
	}
	if p.pubAddr, err = open(p.pub, ep); err != nil {
		cancel()
		p.pub.Close()
		return nil, fmt.Errorf("kv events publisher: %w", err)
	}
	if cfg.ReplayEndpoint != nil && *cfg.ReplayEndpoint != "" {
		rep, err := kvevents.OffsetEndpoint(*cfg.ReplayEndpoint, rank)
		if err == nil {
			p.replay = zmq4.NewRouter(ctx, quiet)
			// Upstream always binds the replay ROUTER.
			p.replayAddr, err = listen(p.replay, rep)
		}
		if err != nil {
			cancel()
			p.pub.Close()
			if p.replay != nil {
				p.replay.Close()
			}
			return nil, fmt.Errorf("kv events replay socket: %w", err)
		}
		p.reading.Add(1)
		go p.readReplay()
	}
	p.running.Add(1)
	go p.run()
	return p, nil
}

// open binds or connects s to ep as upstream decides (Binds).
func open(s zmq4.Socket, ep string) (string, error) {
	if kvevents.Binds(ep) {
		return listen(s, ep)
	}
	if err := s.Dial(ep); err != nil {
		return "", fmt.Errorf("connect %s: %w", ep, err)
	}
	return ep, nil
}

func listen(s zmq4.Socket, ep string) (string, error) {
	// libzmq binds "*" as every interface; Go's listener spells it "".
	addr := strings.Replace(ep, "://*:", "://0.0.0.0:", 1)
	if err := s.Listen(addr); err != nil {
		return "", fmt.Errorf("bind %s: %w", ep, err)
	}
	if a := s.Addr(); a != nil && strings.HasPrefix(ep, "tcp://") {
		return "tcp://" + a.String(), nil
	}
	return ep, nil
}

// Subscribed reports whether some subscriber's subscription covers the
// publisher's topic (a PUB drops what it sends before that).
func (p *Publisher) Subscribed() bool {
	t, ok := p.pub.(zmq4.Topics)
	if !ok {
		return false
	}
	for _, s := range t.Topics() {
		if strings.HasPrefix(p.topic, s) {
			return true
		}
	}
	return false
}

// Endpoints are the bound (or connected) PUB and replay addresses.
func (p *Publisher) Endpoints() (pub, replay string) { return p.pubAddr, p.replayAddr }

// Publish queues one batch (upstream's publish: a full queue waits).
func (p *Publisher) Publish(b kvevents.Batch) { p.queue <- item{batch: b} }

// PublishUnsent numbers and buffers a batch without sending it, as a
// libzmq PUB drops a message past its high-water mark: subscribers see a
// gap that the replay socket can fill (ts-fake's fault knob).
func (p *Publisher) PublishUnsent(b kvevents.Batch) { p.queue <- item{batch: b, unsent: true} }

type item struct {
	batch  kvevents.Batch
	unsent bool
}

// Close stops the publisher and closes its sockets.
func (p *Publisher) Close() {
	p.closeOnce.Do(func() {
		close(p.queue) // run sends what is queued, then returns
		p.running.Wait()
		p.cancel()
		p.pub.Close()
		if p.replay != nil {
			p.replay.Close()
		}
		p.reading.Wait()
	})
}

// run owns the sequence and the replay buffer.
func (p *Publisher) run() {
	defer p.running.Done()
	type entry struct {
		seq     uint64
		payload []byte
	}
	var buf []entry // oldest first, at most bufSteps
	var seq uint64
	for {
		select {
		case it, ok := <-p.queue:
			if !ok {
				return
			}
			payload, err := kvevents.EncodeBatch(it.batch)
			if err != nil {
				p.onErr(err)
				continue
			}
			if !it.unsent {
				if err := p.pub.Send(zmq4.NewMsgFrom(kvevents.PubFrames(p.topic, seq, payload)...)); err != nil {
					p.onErr(fmt.Errorf("publish batch %d: %w", seq, err))
				}
			}
			buf = append(buf, entry{seq, payload})
			if len(buf) > p.bufSteps {
				buf = append(buf[:0], buf[len(buf)-p.bufSteps:]...)
			}
			seq++
		case req := <-p.requests:
			id, start, ok := kvevents.ParseReplayRequest(req)
			if !ok {
				p.onErr(fmt.Errorf("invalid replay request of %d frames", len(req)))
				continue
			}
			for _, e := range buf {
				if e.seq >= start {
					_ = p.replay.Send(zmq4.NewMsgFrom(kvevents.ReplayAnswer(id, e.seq, e.payload)...))
				}
			}
			_ = p.replay.Send(zmq4.NewMsgFrom(kvevents.ReplayEnd(id)...))
		}
	}
}

func (p *Publisher) readReplay() {
	defer p.reading.Done()
	for {
		m, err := p.replay.Recv()
		if err != nil {
			return // closed
		}
		select {
		case p.requests <- m.Frames:
		default:
			p.onErr(fmt.Errorf("replay request dropped: %d waiting", len(p.requests)))
		}
	}
}
