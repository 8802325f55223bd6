package kvevents

import (
	"fmt"
	"slices"
	"testing"
)

// TestSubscriberAddRenameRemove: an engine added to a running subscriber
// is dialled and followed; renamed, it keeps its index under the new
// name; removed, it is no longer followed.
func TestSubscriberAddRenameRemove(t *testing.T) {
	f := newFixture(t, 1, true, DefaultBufferSteps, Options{})
	f.ready()
	f.sub.Remove("prefill")
	if got, live := f.sub.Match("prefill", seq(1, 8)); got != nil || live || len(f.sub.Workers()) != 0 {
		t.Fatalf("a removed engine still answers: %v %v %v", got, live, f.sub.Workers())
	}
	ranks := []RankEndpoints{{Publish: fmt.Sprintf("tcp://127.0.0.1:%d", f.pubPort), Replay: fmt.Sprintf("tcp://127.0.0.1:%d", f.repPort)}}
	if err := f.sub.Add(EngineConfig{Worker: "prefill-0", Ranks: ranks}); err != nil {
		t.Fatal(err)
	}
	if err := f.sub.Add(EngineConfig{Worker: "prefill-0", Ranks: ranks}); err == nil {
		t.Fatal("an engine added twice")
	}
	live := func(w string) func() bool {
		return func() bool { st, ok := f.sub.StatusOf(w); return ok && st.Live }
	}
	f.waitFor("prefill-0 live", live("prefill-0"))
	f.waitSubscribed(0)
	a := seq(100, 8)
	f.pubs[0].Publish(batch(0, stored(a, bs)))
	f.waitFor("prefill-0 matches", func() bool {
		got, ok := f.sub.Match("prefill-0", cat(a, seq(1, 1)))
		return ok && slices.Equal(got, []int{8})
	})
	f.sub.Rename("prefill-0", "prefill")
	got, ok := f.sub.Match("prefill", cat(a, seq(1, 1)))
	if !ok || !slices.Equal(got, []int{8}) {
		t.Fatalf("after the rename: %v %v", got, ok)
	}
	if st := f.sub.Status(); len(st) != 1 || st[0].Worker != "prefill" {
		t.Fatalf("status after the rename: %+v", st)
	}
}
