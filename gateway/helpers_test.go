package gateway

import (
	"sync/atomic"

	"github.com/tsd-project/tsd/gateway/gen"
)

type atomicInt struct{ v atomic.Int64 }

func (a *atomicInt) add(n int)  { a.v.Add(int64(n)) }
func (a *atomicInt) get() int64 { return a.v.Load() }

func genRequest(seed int64, maxTokens int) gen.Request {
	s := gen.Sampling{MaxNewTokens: &maxTokens, IgnoreEOS: true, Seed: &seed}
	return gen.Request{InputIDs: []int32{1, 2, 3, 4}, Sampling: s, Stream: true, LogprobStartLen: -1}
}
