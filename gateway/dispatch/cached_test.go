package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
)

// emitCached is fakeRank.emit for one terminal output that reports
// cached prompt tokens.
func (r *fakeRank) emitCached(rid string, prompt int, toks []int32, done, cached int) {
	r.t.Helper()
	b := wire.OutputBatch{RIDs: []string{rid}, OutputIDs: [][]int32{toks}, FinishedReasons: []string{wire.FinishLength}, PromptTokens: []int{prompt},
		CompletionTokens: []int{done}, CachedTokens: []int{cached}, OutputTokenLogprobsVal: [][]float64{{}}, OutputTokenLogprobsIdx: [][]int32{{}}, EngineIndex: int(r.id)}
	payload, err := wire.EncodeOutput(b)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.out.Send(zmq4.NewMsg(payload)); err != nil {
		r.t.Fatal(err)
	}
}

var onePOneD = [][2]string{{"prefill", profiles.KindPrefill}, {"decode", profiles.KindDecode}}

// A decode that finishes before the prefill's terminal output was seen:
// the usage carries the prefill's cached count, whether that output was
// already queued when the decode finished or comes later within the
// drain grace.
func TestCachedCountOfAPrefillBehindTheDecode(t *testing.T) {
	t.Parallel()
	for _, late := range []time.Duration{0, 100 * time.Millisecond} {
		fl := newFakeLane(t, nil, onePOneD...)
		events, err := fl.d.Generate(context.Background(), request(2, 0, false))
		if err != nil {
			t.Fatal(err)
		}
		p := fl.ranks["prefill"].next()
		dec := fl.ranks["decode"]
		d := dec.next()
		dec.emitCached(d.RID, 4, []int32{5, 6}, 2, 1)
		time.Sleep(late) // the decode's finish is read first, or not: either way
		fl.ranks["prefill"].emitCached(p.RID, 4, []int32{5}, 1, 3)
		_, _, last, errs := collect(t, events)
		if len(errs) > 0 || last.Finish == nil || last.CachedTokens != 3 {
			t.Fatalf("prefill %v late: last event %+v (errors %v), want the prefill's 3 cached tokens", late, last, errs)
		}
	}
}

// A prefill whose terminal output never comes: the request ends after
// the drain grace with the decode's own count.
func TestCachedCountOfAPrefillThatNeverAnswers(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, nil, onePOneD...)
	events, err := fl.d.Generate(context.Background(), request(2, 0, false))
	if err != nil {
		t.Fatal(err)
	}
	fl.ranks["prefill"].next()
	dec := fl.ranks["decode"]
	d := dec.next()
	dec.emitCached(d.RID, 4, []int32{5, 6}, 2, 1)
	_, _, last, errs := collect(t, events)
	if len(errs) > 0 || last.Finish == nil || last.CachedTokens != 1 {
		t.Fatalf("last event %+v (errors %v), want the decode's 1 cached token", last, errs)
	}
}
