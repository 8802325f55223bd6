// Package tokenapitest holds the tokenapi.Streamers that tests' fake
// engines hand their front ends (tests only): one over a channel a fake
// fills from a goroutine of its own, one over events that are all there
// already.
package tokenapitest

import "github.com/tsd-project/tsd/gateway/tokenapi"

// FromChannel is a Streamer over a channel of events (an engine that
// generates in a goroutine of its own, such as a test's fake). Close
// drains what is left in the background, so the producer never blocks.
func FromChannel(ch <-chan tokenapi.Event) tokenapi.Streamer { return &chanStream{ch: ch} }

type chanStream struct {
	ch     <-chan tokenapi.Event
	closed bool // ch was read to its close
	done   bool // Close was called
}

func (c *chanStream) Next() (tokenapi.Event, bool) {
	if c.closed {
		return tokenapi.Event{}, false
	}
	ev, ok := <-c.ch
	if !ok {
		c.closed = true
	}
	return ev, ok
}

func (c *chanStream) Buffered() bool { return !c.closed && len(c.ch) > 0 }

func (c *chanStream) Close() {
	if c.done || c.closed {
		return
	}
	c.done = true
	go func() {
		for range c.ch {
		}
	}()
}

// FromEvents is a Streamer over events that are all there already: what
// an unpaced engine's burst looks like to a writer (Buffered until the
// last), for tests of how a front end folds and flushes.
func FromEvents(evs []tokenapi.Event) tokenapi.Streamer { return &sliceStream{evs: evs} }

type sliceStream struct {
	evs []tokenapi.Event
	i   int
}

func (s *sliceStream) Next() (tokenapi.Event, bool) {
	if s.i == len(s.evs) {
		return tokenapi.Event{}, false
	}
	s.i++
	return s.evs[s.i-1], true
}

func (s *sliceStream) Buffered() bool { return s.i < len(s.evs) }
func (s *sliceStream) Close()         {}
