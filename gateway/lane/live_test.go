package lane

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// TestLaneAddRenameRemoveWorker: a worker added to a bound lane is dialled
// and registered like the first ones; renamed, it keeps its registered
// rank under the new name; removed, its sockets and ipc files go and its
// ranks leave the current state; the other worker is never touched.
func TestLaneAddRenameRemoveWorker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	wp := func(role string) profiles.WorkerPlan {
		return profiles.WorkerPlan{Role: role, Kind: profiles.KindDecode, URL: "ipc://" + filepath.Join(dir, role), Handshake: "tcp://127.0.0.1:0", DP: 1}
	}
	l, err := New([]profiles.WorkerPlan{wp("decode")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AddWorker(wp("decode-1")); err == nil {
		t.Fatal("AddWorker on an unbound lane")
	}
	if err := l.Bind(); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, ch, cancel := l.SubscribeRanks()
	defer cancel()
	first, _ := l.Worker("decode")
	r0 := dialRank(t, first.hs.Endpoint(), 0, 1, 0)
	defer r0.close()
	waitRanks(t, ch, "decode", map[int]string{0: snapshot.RankRegistered})

	w, err := l.AddWorker(wp("decode-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AddWorker(wp("decode-1")); err == nil {
		t.Fatal("a second worker of one name")
	}
	r1 := dialRank(t, w.hs.Endpoint(), 0, 1, 0)
	defer r1.close()
	waitRanks(t, ch, "decode-1", map[int]string{0: snapshot.RankRegistered})
	if got := len(l.Workers()); got != 2 {
		t.Fatalf("%d workers", got)
	}

	if err := l.RenameWorker("decode", "decode-0"); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Worker("decode"); ok {
		t.Fatal("the old name still finds the worker")
	}
	if w0, ok := l.Worker("decode-0"); !ok || w0 != first || w0.Role() != "decode-0" || w0.Plan().Role != "decode-0" || len(w0.Routable()) != 1 {
		t.Fatalf("renamed worker %v %v", w0, ok)
	}
	cur, _, cancel2 := l.SubscribeRanks()
	cancel2()
	seen := map[string]string{}
	for _, ev := range cur {
		seen[ev.Role] = ev.Rank.State
	}
	if seen["decode-0"] != snapshot.RankRegistered || seen["decode"] != "" {
		t.Fatalf("rank states after the rename: %v", seen)
	}

	if err := l.RemoveWorker("decode-1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Worker("decode-1"); ok || len(l.Workers()) != 1 {
		t.Fatal("the removed worker is still listed")
	}
	if _, err := os.Stat(filepath.Join(dir, "decode-1-in.sock")); !os.IsNotExist(err) {
		t.Fatalf("its ipc socket file stays: %v", err)
	}
	cur, _, cancel3 := l.SubscribeRanks()
	cancel3()
	for _, ev := range cur {
		if ev.Role == "decode-1" {
			t.Fatalf("the removed worker's rank is still current: %+v", ev)
		}
	}
	if w0, _ := l.Worker("decode-0"); len(w0.Routable()) != 1 {
		t.Fatal("the other worker lost its rank")
	}
}
