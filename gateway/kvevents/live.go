package kvevents

import (
	"context"
	"fmt"
)

// Engines followed and dropped while the subscriber runs (tsd apply,
// docs/architecture.md §4.3): a prefill added to a running deployment is
// dialled like the first ones, a removed one's goroutines and
// connections end, a renamed one keeps its index under its new name.

// engineSet is the engines by worker and in order.
type engineSet struct {
	engines map[string]*engine
	order   []string
}

func (s *engineSet) with(worker string, e *engine) *engineSet {
	n := &engineSet{engines: make(map[string]*engine, len(s.engines)+1), order: append(append([]string(nil), s.order...), worker)}
	for k, v := range s.engines {
		n.engines[k] = v
	}
	n.engines[worker] = e
	return n
}

// newEngine prepares one engine's state (not yet running).
func (s *Subscriber) newEngine(c EngineConfig) *engine {
	ctx, cancel := context.WithCancel(s.ctx)
	e := &engine{s: s, ctx: ctx, cancel: cancel, cfg: c, log: s.opts.Logger.With("worker", c.Worker),
		inbox: make(chan note, 16), queries: make(chan *query, 64), regs: make(chan int, 64)}
	for range c.Ranks {
		e.ranks = append(e.ranks, &rankState{idx: NewIndex(s.opts.MaxTokens), replays: make(chan replayReq, 1)})
	}
	e.publish()
	return e
}

// run starts an engine's owner and its ranks' readers and replayers.
func (s *Subscriber) run(e *engine) {
	s.wg.Add(1)
	go func() { defer s.wg.Done(); e.supervise("owner", e.own) }()
	for i := range e.ranks {
		s.wg.Add(2)
		go func() { defer s.wg.Done(); e.supervise("reader", func() { e.readLoop(i) }) }()
		go func() { defer s.wg.Done(); e.supervise("replayer", func() { e.replayLoop(i) }) }()
	}
}

// Add follows one more engine; dialled at once when the subscriber runs.
func (s *Subscriber) Add(c EngineConfig) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.set.Load()
	if len(c.Ranks) == 0 {
		return fmt.Errorf("kv events of %s: no rank endpoints", c.Worker)
	}
	if set.engines[c.Worker] != nil {
		return fmt.Errorf("kv events of %s are followed already", c.Worker)
	}
	e := s.newEngine(c)
	s.set.Store(set.with(c.Worker, e))
	if s.started.Load() {
		s.run(e)
	}
	return nil
}

// Remove stops following worker: its goroutines end and its index goes.
func (s *Subscriber) Remove(worker string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.set.Load()
	e := set.engines[worker]
	if e == nil {
		return
	}
	n := &engineSet{engines: make(map[string]*engine, len(set.engines))}
	for _, w := range set.order {
		if w != worker {
			n.engines[w], n.order = set.engines[w], append(n.order, w)
		}
	}
	s.set.Store(n)
	e.cancel()
}

// Rename follows worker under its new name, with the same index.
func (s *Subscriber) Rename(from, to string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.set.Load()
	e := set.engines[from]
	if e == nil || set.engines[to] != nil {
		return
	}
	n := &engineSet{engines: make(map[string]*engine, len(set.engines))}
	for _, w := range set.order {
		name := w
		if w == from {
			name = to
		}
		n.engines[name], n.order = set.engines[w], append(n.order, name)
	}
	s.set.Store(n)
}
