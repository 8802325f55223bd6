package main

import (
	"testing"
	"time"
)

// The weight loader's bar reads like SGLang's tqdm bar, which tsd's
// supervisor turns into a progress bar (supervisor/milestone.go).
func TestShardLine(t *testing.T) {
	for _, c := range []struct {
		i, n    int
		elapsed time.Duration
		want    string
	}{
		{0, 5, 0, "Loading safetensors checkpoint shards:   0% Completed | 0/5 [00:00<?, ?it/s]"},
		{2, 5, 2 * time.Second, "Loading safetensors checkpoint shards:  40% Completed | 2/5 [00:02<00:03,  1.00it/s]"},
		{5, 5, 1800 * time.Millisecond, "Loading safetensors checkpoint shards: 100% Completed | 5/5 [00:02<00:00,  2.78it/s]"},
	} {
		if got := shardLine(c.i, c.n, c.elapsed); got != c.want {
			t.Errorf("shardLine(%d, %d, %v) =\n%q, want\n%q", c.i, c.n, c.elapsed, got, c.want)
		}
	}
}
