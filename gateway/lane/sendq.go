package lane

import (
	"errors"
	"fmt"

	"github.com/tsd-project/tsd/gateway/wire"
)

// sendJob is one message for the input socket.
type sendJob struct {
	frames [][]byte
	stream *Stream // failed when the send fails; nil for aborts
}

// sender is a worker's send queue and its one sender goroutine: submits
// and aborts queue their messages and never wait for the socket; the
// sender takes everything queued at once and, on a batchSender, sends it
// together (consecutive messages to one rank in one write, send.go).
type sender struct {
	w *Worker
	q *queue[sendJob]
}

func newSender(w *Worker) *sender { return &sender{w: w, q: newQueue[sendJob]()} }

// push queues a message; it never blocks.
func (s *sender) push(j sendJob) { s.q.push(j) }

func (s *sender) close() { s.q.close() }

// aborts queues one ABORT for rids on rank identity.
func (s *sender) aborts(identity int, rids []string) {
	payload, err := encodeAbort(rids)
	if err != nil {
		s.w.lane.log.Warn("encode abort", "worker", s.w.Role(), "err", err)
		return
	}
	s.push(sendJob{frames: [][]byte{wire.EncodeIdentity(uint16(identity)), {typeAbort}, payload}})
}

// pending queues the ABORTs a stall verdict held for ranks.
func (s *sender) pending(ps []pendingAbort) {
	for _, p := range ps {
		if len(p.rids) > 0 {
			s.aborts(p.id, p.rids)
		}
	}
}

// run sends until the queue closes or stop does.
func (s *sender) run(stop <-chan struct{}) {
	w := s.w
	bs, batched := w.in.(batchSender)
	var msgs [][][]byte
	var errs []error
	// guard's label, built again only when the role changes: built per
	// batch, it was an allocation per request sent whenever the sender
	// kept up (the recover of sink.go's message has the same reason).
	role, where := "", ""
	for {
		jobs, ok := s.q.wait(stop)
		if len(jobs) > 0 {
			msgs, errs = msgs[:0], errs[:0]
			for _, j := range jobs {
				msgs = append(msgs, j.frames)
				errs = append(errs, nil)
			}
			if r := w.Role(); r != role || where == "" {
				role, where = r, r+" send"
			}
			if guard(w.lane.opts.OnPanic, where, func() {
				if batched {
					bs.sendBatch(msgs, errs)
					return
				}
				for i, m := range msgs {
					errs[i] = w.in.Send(m)
				}
			}) {
				for i := range errs {
					errs[i] = errors.New("internal error while sending")
				}
			}
			for i, j := range jobs {
				if err := errs[i]; err != nil {
					if j.stream != nil {
						w.failStream(j.stream, fmt.Errorf("send request: %w", err))
					} else {
						w.lane.log.Debug("abort not delivered", "worker", w.Role(), "err", err)
					}
				}
			}
			clear(msgs) // the payloads are the requests': do not keep them
		}
		if !ok {
			return
		}
	}
}
