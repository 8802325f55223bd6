package tui

import (
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/snapshot"
)

// frame is the shortest gap between two snapshot deliveries: the feed
// keeps the newest snapshot that comes within this long after the first,
// so the UI folds at most ~60 a second however fast the publisher is.
// Log lines come batched by their producer already (waitLogs).
const frame = time.Second / 60

// maxHold caps how long the feed keeps draining a publisher that never
// pauses.
const maxHold = 4 * frame

type (
	// The snapshot messages name the feed they came from (nil: the
	// current one), so a late one from before a :ctx switch is dropped.
	snapSubscribedMsg struct {
		cur    snapshot.Snapshot
		ch     <-chan snapshot.Snapshot
		cancel func()
		from   *snapFeed
	}
	snapMsg struct {
		s    snapshot.Snapshot
		from *snapFeed
	}
	snapClosedMsg struct{ from *snapFeed }

	logSubscribedMsg struct {
		gen     int
		backlog []snapshot.LogLine
		ch      <-chan []snapshot.LogLine
		cancel  func()
		err     error
	}
	logBatchMsg struct {
		gen     int
		batches [][]snapshot.LogLine
		dropped int // lines the feed skipped because they would scroll out anyway
	}
	logClosedMsg struct{ gen int }

	tickMsg time.Time
)

func subscribeCmd(b Backend, f *snapFeed) tea.Cmd {
	return func() tea.Msg {
		cur, ch, cancel := b.Subscribe()
		return snapSubscribedMsg{cur: cur, ch: ch, cancel: cancel, from: f}
	}
}

// waitSnap blocks until a snapshot arrives, then keeps only the newest of
// whatever else comes within one frame. done ends it when the dashboard
// goes away, whether or not the producer closes ch.
func waitSnap(ch <-chan snapshot.Snapshot, done <-chan struct{}) tea.Cmd {
	return func() tea.Msg {
		var latest snapshot.Snapshot
		select {
		case s, ok := <-ch:
			if !ok {
				return snapClosedMsg{}
			}
			latest = s
		case <-done:
			return nil
		}
		start := time.Now()
		t := time.NewTimer(frame)
		defer t.Stop()
		for {
			// Take whatever is already queued before looking at the timer.
			select {
			case s, ok := <-ch:
				if !ok {
					return snapMsg{s: latest} // the close is seen on the next wait
				}
				latest = s
				if time.Since(start) < maxHold {
					continue
				}
				return snapMsg{s: latest}
			default:
			}
			select {
			case s, ok := <-ch:
				if !ok {
					return snapMsg{s: latest}
				}
				latest = s
			case <-t.C:
				return snapMsg{s: latest}
			case <-done:
				return nil
			}
		}
	}
}

func subscribeLogsCmd(b Backend, role string, gen int) tea.Cmd {
	return func() tea.Msg {
		backlog, ch, cancel, err := b.SubscribeLogs(role)
		return logSubscribedMsg{gen: gen, backlog: backlog, ch: ch, cancel: cancel, err: err}
	}
}

// waitLogs takes the next batch and whatever batches are already queued
// behind it, without waiting for more: the producer batches (at most 60
// a second, supervisor.LogBatchInterval), so this is no second batching
// stage, only a catch-up when the UI fell behind. It keeps at most max
// lines: older ones would be pushed out of the view buffer by the newer
// ones anyway, so copying them into the UI is waste.
func waitLogs(gen int, ch <-chan []snapshot.LogLine, done <-chan struct{}, max int) tea.Cmd {
	return func() tea.Msg {
		var batches [][]snapshot.LogLine
		total, dropped := 0, 0
		add := func(b []snapshot.LogLine) {
			batches = append(batches, b)
			total += len(b)
			for total-len(batches[0]) >= max && len(batches) > 1 {
				total -= len(batches[0])
				dropped += len(batches[0])
				batches = batches[1:]
			}
		}
		select {
		case b, ok := <-ch:
			if !ok {
				return logClosedMsg{gen}
			}
			add(b)
		case <-done:
			return nil
		}
		// Only what was queued already: a producer that never pauses still
		// gets its batches to the UI.
		for queued := len(ch); queued > 0; queued-- {
			b, ok := <-ch
			if !ok {
				break // the close is seen on the next wait
			}
			add(b)
		}
		return logBatchMsg{gen: gen, batches: batches, dropped: dropped}
	}
}

// tick refreshes clocks on screen (uptimes, "waiting for INIT 42 s") when
// no snapshot arrives.
func tick() tea.Cmd {
	return tea.Tick(time.Second, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// snapFeed is the dashboard's snapshot subscription: the channel a
// command waits on, how to cancel it, and done, which ends a wait still
// blocked when the dashboard goes away (or switches deployment).
type snapFeed struct {
	cancel func()
	ch     <-chan snapshot.Snapshot
	done   chan struct{}
	closed bool
}

func newSnapFeed() *snapFeed { return &snapFeed{done: make(chan struct{})} }

// attach takes a subscription; false when the feed is closed already (the
// subscription is cancelled then).
func (f *snapFeed) attach(ch <-chan snapshot.Snapshot, cancel func()) bool {
	if f.closed {
		cancel()
		return false
	}
	f.ch, f.cancel = ch, cancel
	return true
}

// next waits for the next snapshot (nil when there is nothing to wait on).
func (f *snapFeed) next() tea.Cmd {
	if f.ch == nil || f.closed {
		return nil
	}
	wait := waitSnap(f.ch, f.done)
	return func() tea.Msg {
		switch msg := wait().(type) {
		case snapMsg:
			msg.from = f
			return msg
		case snapClosedMsg:
			msg.from = f
			return msg
		default:
			return msg
		}
	}
}

// owns: a message from this feed (nil from: the current one, as tests
// and Run send it).
func (f *snapFeed) owns(from *snapFeed) bool { return from == nil || from == f }

func (f *snapFeed) close() {
	if f.closed {
		return
	}
	f.closed = true
	close(f.done)
	if f.cancel != nil {
		f.cancel()
	}
}
