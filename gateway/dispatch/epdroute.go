package dispatch

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/routing"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// encoders is the dispatch's encode side: which encode worker takes each
// image (a consistent-hashing ring over the encode workers that are
// ready, rebuilt only when that set changes, so a repeated image keeps
// landing on the same encoder; or round_robin / random), submitting the
// encode legs, and the watches on the embeddings finished legs hold.
type encoders struct {
	mode    string     // the plan's gateway mode
	live    *liveState // the encode workers and the encode policy
	lane    *lane.Lane
	brk     *breakers
	rng     *lockedRand
	metrics *Metrics
	guard   panicGuard
	seq     atomic.Uint64 // the round-robin position

	mu   sync.Mutex
	key  string
	ring *routing.Ring
	// drops has, per encode role, the drop watchers of finished legs hold:
	// closed by DropEmbeds when the role's requests are ended (AbortRole,
	// a stalled view) or its view says its process ended. A drained role
	// (a view not routed) keeps its embeddings, so draining closes nothing.
	// While the role's view says its process ended (lane Worker.Ended) a
	// watcher gets a closed drop at once: that is the supervisor's verdict,
	// read from the view, not kept here. What dispatch saw itself (an
	// encode rank that left or registered anew, watch; a worker's
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

// EPDMode reports whether images are routed to encode workers.
func (g *Dispatcher) EPDMode() bool { return g.enc.epdMode() }

func (e *encoders) epdMode() bool {
	return e.mode == profiles.ModeEPD && len(e.live.pools().encode) > 0
}

// ready names the encode workers whose DP rank 0 (the rank that takes
// encode requests) is registered and routed.
func (e *encoders) ready() []string {
	var names []string
	for _, w := range e.live.pools().encode {
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

// EncodeRing is the encoder ring images are routed by now.
func (g *Dispatcher) EncodeRing() *routing.Ring { return g.enc.shared() }

// shared is the ring over the routable encoders, kept while that set
// stays.
func (e *encoders) shared() *routing.Ring {
	names := e.routable(e.brk.current())
	key := strings.Join(names, "\x00")
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ring == nil || e.key != key {
		e.ring, e.key = epd.NewRing(names, 0), key
	}
	return e.ring
}

// routable is ready less the encoders whose breaker is open.
func (e *encoders) routable(view *breakerView) []string {
	names := e.ready()
	if view == nil {
		return names
	}
	out := names[:0:0]
	for _, n := range names {
		if view.allows(n) {
			out = append(out, n)
		}
	}
	return out
}

// ringAvoiding is the encoder ring, less the encoders av holds when
// another is routable: a retry's images go to other encoders (a ring of
// its own, so the shared one keeps its assignments).
func (e *encoders) ringAvoiding(av avoid) *routing.Ring {
	if len(av) == 0 {
		return e.shared()
	}
	names := e.routable(e.brk.current())
	var keep []string
	for _, n := range names {
		if w, ok := e.lane.Worker(n); !ok || !av[w] {
			keep = append(keep, n)
		}
	}
	if len(keep) == 0 || len(keep) == len(names) {
		return e.shared()
	}
	return epd.NewRing(keep, 0)
}

// picker is the encode policy's chooser over the routable
// encoders, less those av holds when another is routable (a retry's
// images go elsewhere): consistent hashing on the image's content (so a
// repeated image meets its cached embedding), or round_robin / random
// over them.
func (e *encoders) picker(av avoid) epd.Picker {
	encPolicy := e.live.config().encodePolicy
	if encPolicy != routing.RoundRobin && encPolicy != routing.Random {
		return e.ringAvoiding(av)
	}
	names := e.routable(e.brk.current())
	var keep []string
	for _, n := range names {
		if w, ok := e.lane.Worker(n); !ok || !av[w] {
			keep = append(keep, n)
		}
	}
	if len(keep) > 0 {
		names = keep
	}
	seq := e.rng.Uint64()
	if encPolicy == routing.RoundRobin {
		seq = e.seq.Add(1) - 1
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

// addr is where the prefill fetches an encode worker's embeddings:
// its registration's bootstrap host/port, else the plan's.
func (e *encoders) addr(role string) (epd.Encoder, bool) {
	w, ok := e.lane.Worker(role)
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
	if len(g.live.pools().encode) == 0 {
		why = "no encode role"
	}
	return &RequestError{Status: http.StatusBadRequest, Code: "multimodal_not_supported", Param: "messages",
		Message: "this deployment cannot take images: it routes nothing to an encode server (" + why + "); add an encode role and use gateway mode epd (or auto)"}
}

// submit sends each image's encode leg (built by epd.BuildLegs,
// its tensors out of band) to DP rank 0 of its encode worker and returns
// the streams that carry their terminal outputs. On failure the ones
// already sent are aborted.
func (e *encoders) submit(legs epd.Legs) ([]*lane.Stream, error) {
	streams := make([]*lane.Stream, 0, len(legs.Encode))
	fail := func(err error) ([]*lane.Stream, error) {
		for _, s := range streams {
			s.Abort(err)
		}
		return nil, err
	}
	for i, el := range legs.Encode {
		w, ok := e.lane.Worker(el.Worker)
		if !ok {
			return fail(fmt.Errorf("image %d: unknown encode worker %s", i, el.Worker))
		}
		id, ok := encodeRank(w)
		if !ok {
			return fail(fmt.Errorf("image %d: encode worker %s has no registered rank 0", i, w.Role()))
		}
		s, err := w.SubmitAux(id, el.Request.RID, el.Payload, el.Aux)
		if err != nil {
			return fail(fmt.Errorf("image %d: %w", i, err))
		}
		e.metrics.Selection.WithLabelValues(w.Role(), w.Kind(), strconv.Itoa(id)).Inc()
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

// results reports each encode stream's terminal output (or error).
func (e *encoders) results(encs []*lane.Stream) <-chan encodeResult {
	ch := make(chan encodeResult, len(encs))
	for i, s := range encs {
		go func() {
			defer e.guard.here("encode reader", func(err error) { ch <- encodeResult{i, lane.Output{}, err} })
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
	encs := g.live.pools().encode
	switch {
	case len(encs) == 0:
		return ""
	case g.mode != profiles.ModeEPD:
		return "encode: not routed (gateway mode " + g.mode + ")"
	}
	n := len(g.enc.ready())
	return fmt.Sprintf("encode: %d/%d worker(s) ready, %s", n, len(encs), g.live.config().encodePolicy)
}

// EncodeDropped is the drop a watcher of role holds: closed once the
// role's requests are ended or its process dies; already closed while the
// role's view says its process ended.
func (g *Dispatcher) EncodeDropped(role string) *EncodeDrop { return g.enc.dropped(role) }

func (e *encoders) dropped(role string) *EncodeDrop {
	w, known := e.lane.Worker(role)
	e.mu.Lock()
	defer e.mu.Unlock()
	// Asked under enc.mu: the gateway stores a view before it calls
	// DropEmbeds, so a drop taken here is either closed now or still
	// registered when DropEmbeds runs.
	if known && w.Ended() {
		return closedDrop(whyProcessEnded)
	}
	d := e.drops[role]
	if d == nil {
		d = &EncodeDrop{ch: make(chan struct{})}
		if e.drops == nil {
			e.drops = map[string]*EncodeDrop{}
		}
		e.drops[role] = d
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
func (g *Dispatcher) DropEmbeds(role, why string) { g.enc.drop(role, why) }

func (e *encoders) drop(role, why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d := e.drops[role]; d != nil {
		d.why = why
		close(d.ch)
		delete(e.drops, role)
	}
}

// forget drops role's encode state: its worker left the deployment.
func (e *encoders) forget(role string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.drops, role)
	delete(e.pending, role)
}

// rename moves role's encode state to its new name.
func (e *encoders) rename(from, to string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d, ok := e.drops[from]; ok {
		delete(e.drops, from)
		e.drops[to] = d
	}
	if n, ok := e.pending[from]; ok {
		delete(e.pending, from)
		e.pending[to] = n
	}
}

// hold counts a request whose prefill still has to fetch an embedding
// from role; the returned func releases it (once).
func (e *encoders) hold(role string) func() {
	e.mu.Lock()
	if e.pending == nil {
		e.pending = map[string]int{}
	}
	e.pending[role]++
	e.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			if e.pending[role]--; e.pending[role] <= 0 {
				delete(e.pending, role)
			}
			e.mu.Unlock()
		})
	}
}

// PendingEmbeds is how many requests still have to fetch an embedding
// role's finished encode legs hold (DrainCount).
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

// watch sends on out (once, out has room) when the encode rank that
// served s, a leg that finished, goes away before stop closes: its rank
// leaves registration (disconnect, ENGINE_CORE_DEAD, silence), registers
// anew after since (another run of the engine, which does not hold the
// embedding), or its role is dropped from routing or dies. The embedding
// the prefill still has to fetch lived in that engine.
func (e *encoders) watch(s *lane.Stream, since time.Time, stop <-chan struct{}, out chan<- encodeDeath) {
	role, id := s.Worker().Role(), s.Identity
	dropped := e.dropped(role)
	cur, evs, cancel := e.lane.SubscribeRanks()
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
		defer e.guard.here("encode watcher", nil)
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
