package routing

import (
	"math"
	"slices"
	"time"
)

// bucketInitialSpan is the prompt-length span SMG divides evenly among
// prefill engines before it has seen any traffic.
const bucketInitialSpan = 4096

// maxBucketWindow bounds the recent requests a bucket remembers.
const maxBucketWindow = 1 << 16

// bucketState is the bucket policy's memory for one candidate set: each
// candidate's prompt-length range and the requests of the last adjustment
// interval. The Router's goroutine owns it.
type bucketState struct {
	names     []string
	upper     []int
	window    []bucketReq
	load      map[string]int
	perBucket int // load per range at the last adjustment
}

type bucketReq struct {
	tokens int
	name   string
	at     time.Time
}

// view returns the ranges and loads for cands, starting over (even ranges
// over bucketInitialSpan) when the candidate set changed.
func (b *bucketState) view(cands []Candidate) *BucketView {
	if !sameNames(b.names, cands) {
		b.names = b.names[:0]
		for _, c := range cands {
			b.names = append(b.names, c.Name)
		}
		n := len(cands)
		b.upper = make([]int, n)
		for i := range b.upper {
			b.upper[i] = (i + 1) * (bucketInitialSpan / n)
		}
		b.upper[n-1] = math.MaxInt
		b.perBucket = 0
	}
	if b.load == nil {
		b.load = map[string]int{}
	}
	v := &BucketView{Upper: append([]int(nil), b.upper...), Load: make([]int, len(cands))}
	for i, c := range cands {
		v.Load[i] = b.load[c.Name]
	}
	return v
}

// observe records a request of tokens prompt tokens sent to name and
// forgets those older than the interval.
func (b *bucketState) observe(tokens int, name string, now time.Time, interval time.Duration) {
	if b.load == nil {
		b.load = map[string]int{}
	}
	drop := 0
	for drop < len(b.window) && (now.Sub(b.window[drop].at) > interval || len(b.window)-drop >= maxBucketWindow) {
		r := b.window[drop]
		if b.load[r.name] -= r.tokens; b.load[r.name] <= 0 {
			delete(b.load, r.name)
		}
		drop++
	}
	b.window = append(b.window[drop:], bucketReq{tokens, name, now})
	b.load[name] += tokens
}

// adjust re-cuts the ranges so each carries an equal share of the recent
// load, as SMG does every adjustment interval: only when the load per
// range moved by more than a factor of two since the last cut.
func (b *bucketState) adjust() {
	n := len(b.names)
	if n == 0 || len(b.window) == 0 {
		return
	}
	total := 0
	lens := make([]int, len(b.window))
	for i, r := range b.window {
		lens[i] = r.tokens
		total += r.tokens
	}
	per := total / n
	if b.perBucket != 0 && per <= 2*b.perBucket && b.perBucket <= 2*per {
		return
	}
	b.perBucket = per
	slices.Sort(lens)
	upper := make([]int, n)
	acc, k, prev := 0, 0, 0
	for i := 0; i < n-1; i++ {
		for k < len(lens) && acc < (i+1)*per {
			acc += lens[k]
			k++
		}
		u := prev + 1
		if k > 0 {
			u = max(u, lens[k-1]+1)
		}
		upper[i], prev = u, u
	}
	upper[n-1] = math.MaxInt
	b.upper = upper
}

func sameNames(names []string, cands []Candidate) bool {
	if len(names) != len(cands) {
		return false
	}
	for i, c := range cands {
		if names[i] != c.Name {
			return false
		}
	}
	return true
}
