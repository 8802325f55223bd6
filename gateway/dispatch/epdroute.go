package dispatch

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/routing"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// encodeRouting is the encoder choice state: a consistent-hashing ring
// over the encode workers that are ready, rebuilt only when that set
// changes (so a repeated image keeps landing on the same encoder).
type encodeRouting struct {
	mu   sync.Mutex
	key  string
	ring *epd.Ring
	// drops has, per encode role, the drop watchers of finished legs hold:
	// closed by DropEmbeds when the role's requests are ended (AbortRole,
	// a stalled view) or its view says its process ended. A drained role
	// (a view not routed) keeps its embeddings, so draining closes nothing.
	// While the role's view says its process ended (lane Worker.Ended) a
	// watcher gets a closed drop at once: that is the supervisor's verdict,
	// read from the view, not kept here. What dispatch saw itself (an
	// encode rank that left or registered anew, watchEncoder; a worker's
	// breaker) stays dispatch's own.
	drops map[string]*EncodeDrop
	// pending counts, per encode role, requests whose encode leg on it
	// finished while their prefill had not fetched the embedding yet.
	pending map[string]int
}

// EncodeDrop is closed once; why is set before the close.
type EncodeDrop struct {
	ch  chan struct{}
	why string
}

// Done is closed when the drop happened.
func (d *EncodeDrop) Done() <-chan struct{} { return d.ch }

// Why says why the role's embeddings were dropped; set before Done closes.
func (d *EncodeDrop) Why() string { return d.why }

func closedDrop(why string) *EncodeDrop {
	d := &EncodeDrop{ch: make(chan struct{}), why: why}
	close(d.ch)
	return d
}

// epdMode reports whether images are routed to encode workers.
func (g *Dispatcher) EPDMode() bool {
	return g.mode == profiles.ModeEPD && len(g.pools().encode) > 0
}

// encodeReady counts encode workers whose DP rank 0 (the rank that takes
// encode requests) is registered and routed.
func (g *Dispatcher) encodeReady() []string {
	var names []string
	for _, w := range g.pools().encode {
		if _, ok := encodeRank(w); ok {
			names = append(names, w.Role())
		}
	}
	return names
}

func encodeRank(w *lane.Worker) (int, bool) {
	for _, r := range w.Routable() {
		if r.DPRank == 0 {
			return r.Identity, true
		}
	}
	return 0, false
}

func (g *Dispatcher) EncodeRing() *epd.Ring {
	names := g.encodeRoutable(g.breakers.current())
	key := strings.Join(names, "\x00")
	g.enc.mu.Lock()
	defer g.enc.mu.Unlock()
	if g.enc.ring == nil || g.enc.key != key {
		g.enc.ring, g.enc.key = epd.NewRing(names, 0), key
	}
	return g.enc.ring
}

// encodePicker is the encode policy's chooser over the routable
// encoders, less those av holds when another is routable (a retry's
// images go elsewhere): consistent hashing on the image's content (so a
// repeated image meets its cached embedding), or round_robin / random
// over them.
func (g *Dispatcher) encodePicker(av avoid) epd.Picker {
	encPolicy := g.live.Load().encodePolicy
	if encPolicy != routing.RoundRobin && encPolicy != routing.Random {
		return g.encodeRingAvoiding(av)
	}
	names := g.encodeRoutable(g.breakers.current())
	var keep []string
	for _, n := range names {
		if w, ok := g.lane.Worker(n); !ok || !av[w] {
			keep = append(keep, n)
		}
	}
	if len(keep) > 0 {
		names = keep
	}
	seq := g.rng.Uint64()
	if encPolicy == routing.RoundRobin {
		seq = g.encSeq.Add(1) - 1
	}
	return &encodeCycle{names: names, seq: seq}
}

// encodeCycle picks names[seq], then the next for each further image of
// the same request.
type encodeCycle struct {
	names []string
	seq   uint64
	n     uint64
}

func (c *encodeCycle) Pick(string) string {
	if len(c.names) == 0 {
		return ""
	}
	c.n++
	return c.names[(c.seq+c.n-1)%uint64(len(c.names))]
}

// encoderAddr is where the prefill fetches an encode worker's embeddings:
// its registration's bootstrap host/port, else the plan's.
func (g *Dispatcher) encoderAddr(role string) (epd.Encoder, bool) {
	w, ok := g.lane.Worker(role)
	if !ok {
		return epd.Encoder{}, false
	}
	host, port, err := splitBootstrap(w.Bootstrap())
	if err != nil {
		return epd.Encoder{}, false
	}
	return epd.Encoder{Host: host, Port: port}, true
}

// ImageSupport says whether image requests can be routed: only in epd
// mode with an encode role (front ends ask before decoding anything).
func (g *Dispatcher) ImageSupport() error {
	if g.EPDMode() {
		return nil
	}
	why := "gateway mode " + g.mode
	if len(g.pools().encode) == 0 {
		why = "no encode role"
	}
	return &RequestError{Status: http.StatusBadRequest, Code: "multimodal_not_supported", Param: "messages",
		Message: "this deployment cannot take images: it routes nothing to an encode server (" + why + "); add an encode role and use gateway mode epd (or auto)"}
}

// submitEncodes sends each image's encode leg (built by epd.BuildLegs,
// its tensors out of band) to DP rank 0 of its encode worker and returns
// the streams that carry their terminal outputs. On failure the ones
// already sent are aborted.
func (g *Dispatcher) submitEncodes(legs epd.Legs) ([]*lane.Stream, error) {
	streams := make([]*lane.Stream, 0, len(legs.Encode))
	fail := func(err error) ([]*lane.Stream, error) {
		for _, s := range streams {
			s.Abort(err)
		}
		return nil, err
	}
	for i, e := range legs.Encode {
		w, ok := g.lane.Worker(e.Worker)
		if !ok {
			return fail(fmt.Errorf("image %d: unknown encode worker %s", i, e.Worker))
		}
		id, ok := encodeRank(w)
		if !ok {
			return fail(fmt.Errorf("image %d: encode worker %s has no registered rank 0", i, w.Role()))
		}
		s, err := w.SubmitAux(id, e.Request.RID, e.Payload, e.Aux)
		if err != nil {
			return fail(fmt.Errorf("image %d: %w", i, err))
		}
		g.metrics.Selection.WithLabelValues(w.Role(), w.Kind(), strconv.Itoa(id)).Inc()
		streams = append(streams, s)
	}
	return streams, nil
}

// encodeResult is one encode leg's end.
type encodeResult struct {
	item int
	out  lane.Output
	err  error
}

// watchEncodes reports each encode stream's terminal output (or error).
func (g *Dispatcher) watchEncodes(encs []*lane.Stream) <-chan encodeResult {
	ch := make(chan encodeResult, len(encs))
	for i, s := range encs {
		go func() {
			defer g.recoverHere("encode reader", func(err error) { ch <- encodeResult{i, lane.Output{}, err} })
			for {
				o, err := s.Recv(context.Background())
				if err != nil || o.Finished != "" {
					ch <- encodeResult{i, o, err}
					return
				}
			}
		}()
	}
	return ch
}

// encodeFailure is nil for an encode leg that finished normally.
func encodeFailure(r encodeResult) error {
	switch {
	case r.err != nil:
		return fmt.Errorf("encode leg for image %d failed: %w", r.item, r.err)
	case r.out.Finished == wire.FinishAbort || r.out.Finished == wire.FinishError:
		msg := r.out.AbortMessage
		if msg == "" {
			msg = "the encode engine aborted it"
		}
		return fmt.Errorf("encode leg for image %d failed: %s", r.item, msg)
	}
	return nil
}

// encodeNote describes encode routing for the status line.
func (g *Dispatcher) EncodeNote() string {
	switch {
	case len(g.pools().encode) == 0:
		return ""
	case g.mode != profiles.ModeEPD:
		return "encode: not routed (gateway mode " + g.mode + ")"
	}
	n := len(g.encodeReady())
	return fmt.Sprintf("encode: %d/%d worker(s) ready, %s", n, len(g.pools().encode), g.live.Load().encodePolicy)
}

// EncodeDropped is the drop a watcher of role holds: closed once the
// role's requests are ended or its process dies; already closed while the
// role's view says its process ended.
func (g *Dispatcher) EncodeDropped(role string) *EncodeDrop {
	w, known := g.lane.Worker(role)
	g.enc.mu.Lock()
	defer g.enc.mu.Unlock()
	// Asked under enc.mu: the gateway stores a view before it calls
	// DropEmbeds, so a drop taken here is either closed now or still
	// registered when DropEmbeds runs.
	if known && w.Ended() {
		return closedDrop(whyProcessEnded)
	}
	d := g.enc.drops[role]
	if d == nil {
		d = &EncodeDrop{ch: make(chan struct{})}
		if g.enc.drops == nil {
			g.enc.drops = map[string]*EncodeDrop{}
		}
		g.enc.drops[role] = d
	}
	return d
}

// whyProcessEnded is why an encode role's embeddings are gone once its
// view says its process ended.
const whyProcessEnded = "its process ended"

// HearView follows a change of role's view (lane Worker.SetView, reason
// the new view's): a stall that begins or a process that ended drops the
// role's embeddings. A drain drops nothing.
func (g *Dispatcher) HearView(role string, c lane.ViewChange, reason string) {
	switch {
	case c.StallBegins:
		g.DropEmbeds(role, "stalled: "+reason)
	case c.Ended:
		g.DropEmbeds(role, whyProcessEnded)
	}
}

// DropEmbeds closes the drop of role's watchers with why: the embeddings
// its finished legs hold are gone (its requests were ended, it was judged
// stalled, its process ended). The next watcher takes a fresh drop, or a
// closed one while the role's view says its process ended.
func (g *Dispatcher) DropEmbeds(role, why string) {
	g.enc.mu.Lock()
	defer g.enc.mu.Unlock()
	if d := g.enc.drops[role]; d != nil {
		d.why = why
		close(d.ch)
		delete(g.enc.drops, role)
	}
}

// holdEmbed counts a request whose prefill still has to fetch an embedding
// from role; the returned func releases it (once).
func (g *Dispatcher) holdEmbed(role string) func() {
	g.enc.mu.Lock()
	if g.enc.pending == nil {
		g.enc.pending = map[string]int{}
	}
	g.enc.pending[role]++
	g.enc.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.enc.mu.Lock()
			if g.enc.pending[role]--; g.enc.pending[role] <= 0 {
				delete(g.enc.pending, role)
			}
			g.enc.mu.Unlock()
		})
	}
}

func (g *Dispatcher) PendingEmbeds(role string) int {
	g.enc.mu.Lock()
	defer g.enc.mu.Unlock()
	return g.enc.pending[role]
}

// encodeDeath is the end of an encode worker whose leg finished while the
// prefill may still have been fetching its embedding.
type encodeDeath struct {
	role, why string
}

// watchEncoder sends on out (once, out has room) when the encode rank that
// served s, a leg that finished, goes away before stop closes: its rank
// leaves registration (disconnect, ENGINE_CORE_DEAD, silence), registers
// anew after since (another run of the engine, which does not hold the
// embedding), or its role is dropped from routing or dies. The embedding
// the prefill still has to fetch lived in that engine.
func (g *Dispatcher) watchEncoder(s *lane.Stream, since time.Time, stop <-chan struct{}, out chan<- encodeDeath) {
	role, id := s.Worker().Role(), s.Identity
	dropped := g.EncodeDropped(role)
	cur, evs, cancel := g.lane.SubscribeRanks()
	gone := func(ev snapshot.RankEvent) (string, bool) {
		switch {
		case ev.Role != role || ev.Rank.Identity != id:
			return "", false
		case ev.Rank.State != snapshot.RankRegistered:
			if ev.Err != "" {
				return fmt.Sprintf("rank %d %s: %s", id, ev.Rank.State, ev.Err), true
			}
			return fmt.Sprintf("rank %d %s", id, ev.Rank.State), true
		case ev.Rank.Since.After(since):
			return fmt.Sprintf("rank %d registered anew", id), true
		}
		return "", false
	}
	go func() {
		defer cancel()
		defer g.recoverHere("encode watcher", nil)
		for _, ev := range cur {
			if why, ok := gone(ev); ok {
				out <- encodeDeath{role, why}
				return
			}
		}
		for {
			select {
			case ev, ok := <-evs:
				if !ok {
					return
				}
				if why, ok := gone(ev); ok {
					out <- encodeDeath{role, why}
					return
				}
			case <-dropped.ch:
				why := dropped.why
				if why == "" {
					why = whyProcessEnded
				}
				out <- encodeDeath{role, why}
				return
			case <-stop:
				return
			}
		}
	}()
}
