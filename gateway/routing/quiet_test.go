package routing

import (
	"reflect"
	"testing"
)

// AvoidQuiet as a table: quiet ranks leave the pool while another rank
// is not quiet; with none quiet, or all, the pool stays as it is.
func TestAvoidQuiet(t *testing.T) {
	t.Parallel()
	r := func(id int, quiet bool) RankView { return RankView{Identity: id, DPRank: id % 10, Quiet: quiet} }
	w := func(name string, ranks ...RankView) WorkerView { return WorkerView{Name: name, Ranks: ranks} }
	for _, tc := range []struct {
		name string
		in   []WorkerView
		want []WorkerView
	}{
		{"empty pool", nil, nil},
		{"none quiet", []WorkerView{w("d0", r(0, false)), w("d1", r(10, false))}, []WorkerView{w("d0", r(0, false)), w("d1", r(10, false))}},
		{"one of two workers quiet", []WorkerView{w("d0", r(0, true)), w("d1", r(10, false))}, []WorkerView{w("d0"), w("d1", r(10, false))}},
		{"all quiet: left as it is", []WorkerView{w("d0", r(0, true)), w("d1", r(10, true))}, []WorkerView{w("d0", r(0, true)), w("d1", r(10, true))}},
		{"one rank of a dp worker quiet", []WorkerView{w("p", r(0, false), r(1, true), r(2, false))}, []WorkerView{w("p", r(0, false), r(2, false))}},
		{"a worker without ranks stays one", []WorkerView{w("d0"), w("d1", r(10, true)), w("d2", r(20, false))}, []WorkerView{w("d0"), w("d1"), w("d2", r(20, false))}},
	} {
		in := cloneViews(tc.in)
		got := AvoidQuiet(tc.in)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
		if !reflect.DeepEqual(tc.in, in) {
			t.Errorf("%s: the input was modified: %+v", tc.name, tc.in)
		}
	}
}

func cloneViews(ws []WorkerView) []WorkerView {
	if ws == nil {
		return nil
	}
	out := make([]WorkerView, len(ws))
	for i, w := range ws {
		out[i] = w
		out[i].Ranks = append([]RankView(nil), w.Ranks...)
	}
	return out
}

// Round robin over two decodes, one quiet: every decision goes to the
// other, and once it speaks again the cycle takes both.
func TestRoundRobinAvoidsQuiet(t *testing.T) {
	t.Parallel()
	s := fixed(RoundRobin, RoundRobin, Config{})
	pre := []WorkerView{worker("p", 1)}
	dec := []WorkerView{worker("d0", 1), worker("d1", 1)}
	dec[0].Ranks[0].Quiet = true
	for i := range 6 {
		_, d := s.route(Request{Prompt: prompt(1, 4)}, pre, AvoidQuiet(dec))
		if d.Worker != 1 {
			t.Fatalf("decision %d went to the quiet decode: %+v", i, d)
		}
	}
	dec[0].Ranks[0].Quiet = false
	seen := map[int]bool{}
	for range 4 {
		_, d := s.route(Request{Prompt: prompt(1, 4)}, pre, AvoidQuiet(dec))
		seen[d.Worker] = true
	}
	if !seen[0] || !seen[1] {
		t.Fatalf("after it spoke the cycle took %v", seen)
	}
}
