package gateway

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The status rows of prefill roles say how the gateway follows their KV
// events: absent (with why) until a publisher is up, and, under
// kv_aware, for a prefill that publishes none; decode rows say nothing.
func TestStatusKVEvents(t *testing.T) {
	t.Parallel()
	kv := &profiles.KVEventsPlan{Port: 1, ReplayPort: 3, Publish: []string{"tcp://127.0.0.1:1", "tcp://127.0.0.1:2"}, Replay: []string{"tcp://127.0.0.1:3", "tcp://127.0.0.1:4"}}
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", Policy: profiles.PolicyPlan{Prefill: profiles.PolicyKVAware}, Workers: []profiles.WorkerPlan{
		{Role: "prefill-0", Kind: profiles.KindPrefill, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 2, KVEvents: kv},
		{Role: "prefill-1", Kind: profiles.KindPrefill, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 1},
		{Role: "decode", Kind: profiles.KindDecode, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 1},
	}}}
	g, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if g.kv.Load() == nil {
		t.Fatal("no subscriber for a plan with KV events")
	}
	rows := map[string]snapshot.RoleTraffic{}
	for _, r := range g.Status().Roles {
		rows[r.Role] = r
	}
	p0 := rows["prefill-0"]
	if p0.KVEvents != snapshot.KVEventsAbsent || !strings.HasPrefix(p0.KVNote, KVAbsentNote+" (rank 0: publisher not connected") || len(p0.Cache) != 2 {
		t.Errorf("prefill-0: %+v", p0)
	}
	if p1 := rows["prefill-1"]; p1.KVEvents != snapshot.KVEventsAbsent || !strings.Contains(p1.KVNote, "kv_events: false") {
		t.Errorf("prefill-1: %+v", p1)
	}
	if d := rows["decode"]; d.KVEvents != "" || d.KVNote != "" || len(d.Cache) != 0 {
		t.Errorf("decode: %+v", d)
	}
	// Without KV events anywhere there is no subscriber at all.
	plain := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", Workers: plan.Gateway.Workers[1:]}}
	g2, err := New(plain, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if g2.kv.Load() != nil {
		t.Fatal("a subscriber without KV events")
	}
	for _, r := range g2.Status().Roles {
		if r.KVEvents != "" {
			t.Errorf("round_robin plan reports kv events: %+v", r)
		}
	}
}

// TestKVAwareTurnedOnLive: a deployment started without KV events anywhere
// that tsd apply turns to kv_aware: until a prefill publishes, its row
// says kv_aware routes it by cache_aware (tsd status prints it); once its
// restarted worker with KV events is bound, the gateway follows them (a
// subscriber exists, dialling) and the dispatch reads it.
func TestKVAwareTurnedOnLive(t *testing.T) {
	dir := t.TempDir()
	pre := profiles.WorkerPlan{Role: "prefill", Kind: profiles.KindPrefill, DP: 1, URL: "ipc://" + filepath.Join(dir, "prefill"), Handshake: "tcp://127.0.0.1:0"}
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", Mode: profiles.ModePD,
		Policy: profiles.PolicyPlan{Prefill: "round_robin", Decode: "round_robin"}, Workers: []profiles.WorkerPlan{pre}}}
	g, err := New(plan, Options{QueueTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown(t.Context())
	if g.kv.Load() != nil {
		t.Fatal("a subscriber without KV events")
	}
	next := plan.Gateway
	next.Policy.Prefill = profiles.PolicyKVAware
	if err := g.Reconfigure(next, "", nil); err != nil {
		t.Fatal(err)
	}
	row := func() snapshot.RoleTraffic {
		for _, r := range g.Status().Roles {
			if r.Role == "prefill" {
				return r
			}
		}
		t.Fatal("no prefill row")
		return snapshot.RoleTraffic{}
	}
	if r := row(); r.KVEvents != snapshot.KVEventsAbsent || !strings.HasPrefix(r.KVNote, KVAbsentNote) {
		t.Fatalf("kv_aware without events: %+v", r)
	}
	// The apply restarts the prefill with KV events: its worker is bound anew.
	if err := g.RemoveWorker("prefill"); err != nil {
		t.Fatal(err)
	}
	pre.URL = "ipc://" + filepath.Join(dir, "prefill2")
	pre.KVEvents = &profiles.KVEventsPlan{Port: 1, ReplayPort: 2, Publish: []string{"tcp://127.0.0.1:1"}, Replay: []string{"tcp://127.0.0.1:2"}}
	if err := g.AddWorker(pre); err != nil {
		t.Fatal(err)
	}
	sub := g.kv.Load()
	if sub == nil || len(sub.Workers()) != 1 || sub.Workers()[0] != "prefill" {
		t.Fatalf("after the restart with events: subscriber %v", sub)
	}
	if g.disp.KV() == nil {
		t.Fatal("the dispatch does not read the new subscriber")
	}
	if r := row(); r.KVEvents != snapshot.KVEventsAbsent || !strings.Contains(r.KVNote, "publisher not connected") {
		t.Fatalf("followed, not yet connected: %+v", r)
	}
}
