package tui

import (
	"strings"
	"testing"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/tui/tuitest"
)

// withCache gives the first prefill of s a prefix cache: two DP ranks,
// 70% of its prompt tokens cached; absent marks its KV events absent.
func withCache(s snapshot.Snapshot, absent bool) snapshot.Snapshot {
	s = tuitest.WithTraffic(s)
	for i := range s.Gateway.Roles {
		r := &s.Gateway.Roles[i]
		if !strings.HasPrefix(r.Role, "prefill") {
			continue
		}
		r.PromptTokS, r.CachedShare = 2000, 0.7
		r.Cache = []snapshot.RankCache{
			{DPRank: 0, PromptTokS: 1000, CachedShare: 0.9, CachedBlocks: 412, BlockSize: 64, KVLive: !absent},
			{DPRank: 1, PromptTokS: 1000, CachedShare: 0.5, CachedBlocks: 380, BlockSize: 64, KVLive: !absent},
		}
		r.KVEvents = snapshot.KVEventsLive
		if absent {
			r.KVEvents, r.KVNote = snapshot.KVEventsAbsent, "kv events absent: routing by cache_aware (rank 1: publisher not connected)"
		}
		break
	}
	return s
}

// A prefill with a prefix cache gets the CACHE column (its cached share),
// the inspector one line (the share, the events, each rank's blocks),
// and the trends a "cached" row; without any, nothing changes.
func TestCacheShown(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 200, 40, withCache(tuitest.Deployment(2, 1, 1, t0), false))
	out := plain(m)
	if !strings.Contains(out, "CACHE") || !strings.Contains(out, "70%") {
		t.Fatalf("overview lacks the cache column:\n%s", out)
	}
	press(m, "enter")
	out = plain(m)
	for _, want := range []string{"prefix cache 70% of prompt tokens cached", "kv events live", "dp 0: 412 blocks, 90%", "dp 1: 380 blocks, 50%"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspector lacks %q:\n%s", want, out)
		}
	}
	plainM, _ := newTestModel(t, 200, 40, tuitest.WithTraffic(tuitest.Deployment(2, 1, 1, t0)))
	if strings.Contains(plain(plainM), "CACHE") {
		t.Error("CACHE column without any prefix cache to show")
	}
	tr := newTrends()
	s := withCache(tuitest.Deployment(2, 1, 1, t0), false)
	s.Time = t0
	tr.fold(s)
	found := false
	for _, r := range tr.rows("GPU") {
		if r.label == "cached" && r.text(r.s.Last()) == "70%" {
			found = true
		}
	}
	if !found {
		t.Errorf("trends lack the cached row: %+v", tr.rows("GPU"))
	}
	plainTr := newTrends()
	q := tuitest.WithTraffic(tuitest.Deployment(2, 1, 1, t0))
	q.Time = t0
	plainTr.fold(q)
	for _, r := range plainTr.rows("GPU") {
		if r.label == "cached" {
			t.Error("a cached trend without any prefix cache")
		}
	}
}

// An engine whose KV events are absent says so: short in the overview,
// whole in the inspector.
func TestCacheKVAbsent(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 200, 40, withCache(tuitest.Deployment(2, 1, 1, t0), true))
	if out := plain(m); !strings.Contains(out, "kv absent") {
		t.Fatalf("overview lacks kv absent:\n%s", out)
	}
	press(m, "enter")
	if out := plain(m); !strings.Contains(out, "kv events absent: routing by cache_aware (rank 1: publisher not connected)") {
		t.Fatalf("inspector lacks the note:\n%s", out)
	}
}

// A rank row shows its own rank's share.
func TestCacheRankCell(t *testing.T) {
	t.Parallel()
	tr := &snapshot.RoleTraffic{Cache: []snapshot.RankCache{{DPRank: 0, PromptTokS: 10, CachedShare: 0.42}, {DPRank: 1}}}
	if got, _ := cacheCell(&rowCtx{rankCache: rankCache(tr, 0)}); got != "42%" {
		t.Errorf("rank 0: %q", got)
	}
	if got, _ := cacheCell(&rowCtx{rankCache: rankCache(tr, 1)}); got != "-" {
		t.Errorf("rank 1 without prompts: %q", got)
	}
	if rankCache(tr, 2) != nil || rankCache(nil, 0) != nil {
		t.Error("rankCache out of range")
	}
}
