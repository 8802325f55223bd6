package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/snapshot"
)

// TestE2EApplyKVAware: kv_aware turned on by tsd apply on a deployment
// started without KV events. An apply that would leave a prefill
// publishing none (kv_events: false) is refused with the key to change;
// the apply that can restarts the prefill into its events, the gateway
// follows them (the status says live, never "routing by cache_aware"),
// and a conversation's turns are kv_aware's own decisions (kv_hit, not
// fallback_cache_hit).
func TestE2EApplyKVAware(t *testing.T) {
	d, base, write := startApplyProfile(t, decodeOne, "")
	t.Cleanup(func() { d.ctl("stop", "--now"); _ = d.wait() })
	kvAware := "  policy: {prefill: kv_aware}\n"
	write("    kv_events: false\n"+decodeOne, kvAware)
	out, code := d.apply("--yes")
	if code == 0 || !strings.Contains(out, `profile entry "prefill" says kv_events: false`) || !strings.Contains(out, "remove kv_events: false") {
		t.Fatalf("an apply leaving the prefill without events: exit %d\n%s", code, out)
	}
	if s := d.status(); s.Gateway.Policy == nil || s.Gateway.Policy.Prefill != "round_robin" {
		t.Fatalf("the refused apply changed the policy: %+v", s.Gateway.Policy)
	}
	write(decodeOne, kvAware)
	if out, code := d.apply("--yes"); code != 0 || !strings.Contains(out, "--kv-events-config") {
		t.Fatalf("apply kv_aware: exit %d\n%s", code, out)
	}
	d.waitStatus(func(s snapshot.Snapshot) bool {
		for _, row := range s.Gateway.Roles {
			if row.Role == "prefill" {
				return row.KVEvents == snapshot.KVEventsLive
			}
		}
		return false
	})
	r := &routedDeployment{deployment: d, base: base}
	history := seq(3000, 256)
	var ids []string
	for turn := range 3 {
		history = cat(history, seq(int32(8000+100*turn), 16))
		id := fmt.Sprintf("kvapply-%d", turn)
		r.generate(t, id, "", history)
		ids = append(ids, id)
	}
	ls := r.landings(t, ids...)
	for turn, id := range ids {
		if want := map[bool]string{false: "kv_miss", true: "kv_hit"}[turn > 0]; ls[id].route != "kv_aware" || ls[id].reason != want {
			t.Errorf("%s: %+v, want kv_aware's %s", id, ls[id], want)
		}
	}
	st, _ := d.ctl("status")
	if strings.Contains(st, "routing by cache_aware") {
		t.Errorf("tsd status after the apply:\n%s", st)
	}
}
