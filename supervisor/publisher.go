package supervisor

import (
	"sync"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/snapshot/trend"
)

// MaxEvents bounds Snapshot.Events.
const MaxEvents = 100

type pubMsg struct {
	id    int // the instance's id (actor.id)
	role  *snapshot.RoleStatus
	event *snapshot.Event
	// forget: the actor was removed from the roster and has ended.
	forget bool
	// flushed, when set, is closed once a snapshot with this message in
	// it is published (sync).
	flushed chan struct{}
	// ring, with a role and an event, marks a state change: publish now
	// (not coalesced), then note the event in the role's log.
	ring *logRing
	// answers are commands' outcomes this state settles (answer.go):
	// published now, then handed to their waiters.
	answers []answered
}

// publisher owns the current Snapshot. Actors send it role states and
// events; it coalesces them (≤ 10 snapshots a second) and hands every
// subscriber the current snapshot then each newer one, under one lock so a
// subscriber never misses or doubles one (docs/architecture.md §S2).
type publisher struct {
	sup    *Supervisor
	in     chan pubMsg
	logged <-chan snapshot.Event // the deployment's EventLog; nil: none

	// owned by loop: each instance's last status by id (the roster says
	// which are shown, in which order, under which names)
	roles  map[int]snapshot.RoleStatus
	events []snapshot.Event
	seq    uint64
	// trends are the deployment's recent past (snapshot/trend), folded
	// from every snapshot published: they outlive every dashboard, and a
	// watch that asks gets them in its first snapshot.
	trends  *trend.Set
	histReq chan chan *snapshot.History
	stopped chan struct{} // closed when loop returns

	mu     sync.Mutex
	cur    snapshot.Snapshot
	subs   map[chan snapshot.Snapshot]struct{}
	closed bool
}

func newPublisher(s *Supervisor) *publisher {
	p := &publisher{sup: s, in: make(chan pubMsg, 1024), roles: map[int]snapshot.RoleStatus{}, subs: map[chan snapshot.Snapshot]struct{}{},
		trends: trend.New(s.opts.TrendPeriod, 0), histReq: make(chan chan *snapshot.History), stopped: make(chan struct{})}
	if s.events != nil {
		p.logged = s.events.ch
	}
	p.cur = p.build()
	return p
}

func (p *publisher) event(role, msg string) {
	p.in <- pubMsg{event: &snapshot.Event{Time: p.sup.now(), Role: role, Message: msg}}
}

// tryEvent is event for goroutines that must never wait (log capture):
// when the publisher is backed up the event is dropped, and the state it
// reports still reaches the next snapshot (build reads it).
func (p *publisher) tryEvent(role, msg string) {
	select {
	case p.in <- pubMsg{event: &snapshot.Event{Time: p.sup.now(), Role: role, Message: msg}}:
	default:
	}
}

func (p *publisher) apply(m pubMsg) {
	switch {
	case m.forget:
		delete(p.roles, m.id)
	case m.role != nil:
		p.roles[m.id] = *m.role
	}
	if m.event != nil {
		p.events = append(p.events, *m.event)
		if len(p.events) > MaxEvents {
			p.events = append([]snapshot.Event(nil), p.events[len(p.events)-MaxEvents:]...)
		}
		if p.sup.opts.OnEvent != nil {
			p.sup.opts.OnEvent(*m.event)
		}
	}
}

// build makes a fresh, independent Snapshot from the loop's state.
func (p *publisher) build() snapshot.Snapshot {
	s := p.sup
	p.seq++
	plan := s.Plan()
	members := s.roster.current().members
	snap := snapshot.Snapshot{
		Seq:     p.seq,
		Time:    s.now(),
		Name:    plan.Name,
		Profile: plan.ProfilePath,
		Roles:   make([]snapshot.RoleStatus, 0, len(members)),
		Events:  append([]snapshot.Event(nil), p.events...),
		GPUInfo: snapshot.GPUPanelStatus{Provider: "none", Note: "no telemetry"},
	}
	for _, m := range members {
		st, ok := p.roles[m.id]
		if !ok {
			st = m.initial // added a moment ago: its actor has not published yet
		}
		st.Name = m.name // the roster's: the one place names map to ids
		if m.a.file != nil {
			st.LogError = m.a.file.Health()
		}
		snap.Roles = append(snap.Roles, st)
	}
	snap.Gateway = snapshot.GatewayStatus{URL: plan.Gateway.URL, Mode: plan.Gateway.Mode}
	if s.apply != nil {
		snap.ProfileRevision = s.apply.revision()
		snap.Apply = s.apply.status()
	}
	if st := s.stop.progress(); st != nil {
		cp := *st
		snap.Stopping = &cp
	}
	snap.Planner = s.planner.snapshotStatus()
	if s.gw != nil {
		snap.Gateway = s.gw.Status()
		if st := snap.Stopping; st != nil && st.Phase == snapshot.StopDraining {
			st.InFlight = snap.Gateway.InFlight
		}
		for i := range snap.Roles {
			r := &snap.Roles[i]
			var per map[int]int
			r.InFlight, per = s.gw.InFlight(r.Name)
			if len(per) > 0 && len(r.Ranks) > 0 {
				// Earlier snapshots share the Ranks array: copy before filling.
				r.Ranks = append([]snapshot.RankStatus(nil), r.Ranks...)
				for j := range r.Ranks {
					r.Ranks[j].InFlight = per[r.Ranks[j].Identity]
				}
			}
		}
	}
	if s.opts.Telemetry != nil {
		s.opts.Telemetry.Decorate(&snap)
	}
	return snap
}

// loop runs until stop is closed, then publishes a last snapshot and
// closes every subscriber's channel.
func (p *publisher) loop(stop <-chan struct{}) {
	defer close(p.stopped)
	const every = 100 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	// Gateway rates and telemetry change on their own: refresh once a
	// trend period (a second by default) even when no role changed, so
	// every period has its sample.
	refresh := max(1, int(p.trends.Period()/every))
	dirty := false
	n := 0
	for {
		select {
		case ev := <-p.logged:
			p.apply(pubMsg{event: &ev})
			dirty = true
		case m := <-p.in:
			p.apply(m)
			dirty = true
			if m.ring != nil || m.flushed != nil || len(m.answers) > 0 {
				p.publishFold(p.build())
				dirty = false
			}
			if m.ring != nil {
				m.ring.append([]LogLine{{Time: m.event.Time, Text: "[tsd] == " + m.event.Message, Note: true}})
			}
			for _, a := range m.answers {
				a.deliver()
			}
			if m.flushed != nil {
				close(m.flushed)
			}
		case reply := <-p.histReq:
			reply <- p.trends.History()
		case <-tick.C:
			n++
			if dirty || (n%refresh == 0 && (p.sup.gw != nil || p.sup.opts.Telemetry != nil)) {
				p.publishFold(p.build())
				dirty = false
			}
		case <-stop:
			var flushed []chan struct{}
			var answers []answered
		drain:
			for {
				select {
				case m := <-p.in:
					p.apply(m)
					if m.ring != nil {
						m.ring.append([]LogLine{{Time: m.event.Time, Text: "[tsd] == " + m.event.Message, Note: true}})
					}
					if m.flushed != nil {
						flushed = append(flushed, m.flushed)
					}
					answers = append(answers, m.answers...)
				case ev := <-p.logged:
					p.apply(pubMsg{event: &ev})
				default:
					break drain
				}
			}
			p.publish(p.build())
			for _, a := range answers {
				a.deliver()
			}
			for _, ch := range flushed {
				close(ch)
			}
			p.mu.Lock()
			p.closed = true
			for ch := range p.subs {
				close(ch)
			}
			p.subs = nil
			p.mu.Unlock()
			return
		}
	}
}

// sync returns once a snapshot built after every message sent before it
// is published (or the publisher has ended).
func (p *publisher) sync() {
	ch := make(chan struct{})
	select {
	case p.in <- pubMsg{flushed: ch}:
	case <-p.stopped:
		return
	}
	select {
	case <-ch:
	case <-p.stopped:
	}
}

// publishFold publishes s and folds it into the trends (loop only).
func (p *publisher) publishFold(s snapshot.Snapshot) {
	p.publish(s)
	p.trends.Fold(s)
}

// historyWait bounds how long a watch waits for the loop to copy the
// trends (it answers between two messages; a loop that has not started
// or has ended answers nothing).
const historyWait = 2 * time.Second

// history is a copy of the trend rings, from the loop that owns them;
// nil once the loop has ended.
func (p *publisher) history() *snapshot.History {
	reply := make(chan *snapshot.History, 1)
	t := time.NewTimer(historyWait)
	defer t.Stop()
	select {
	case p.histReq <- reply:
		return <-reply
	case <-p.stopped:
	case <-t.C:
	}
	return nil
}

func (p *publisher) publish(s snapshot.Snapshot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur = s
	for ch := range p.subs {
		// Latest wins: a slow subscriber skips stale snapshots, never blocks us.
		select {
		case ch <- s:
		default:
			select {
			case <-ch:
			default:
			}
			select {
			case ch <- s:
			default:
			}
		}
	}
}

func (p *publisher) subscribe() (snapshot.Snapshot, <-chan snapshot.Snapshot, func()) {
	ch := make(chan snapshot.Snapshot, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.cur
	if p.closed {
		close(ch)
		return cur, ch, func() {}
	}
	p.subs[ch] = struct{}{}
	var once sync.Once
	return cur, ch, func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if _, ok := p.subs[ch]; ok {
				delete(p.subs, ch)
				close(ch)
			}
		})
	}
}

func (p *publisher) current() snapshot.Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}
