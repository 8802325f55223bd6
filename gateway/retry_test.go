package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/profiles"
)

func withRetries(p *profiles.Plan) {
	p.Gateway.Retry = profiles.RetryPlan{MaxRetries: 3, InitialBackoffMS: 1, MaxBackoffMS: 10, BackoffMultiplier: 2, Migrate: true}
}

// EPD: an image request whose encode leg fails (its encoder hangs and
// tsd ends its requests, as a restart's drain does) is sent again, encode
// leg included, to the other encoder; the client gets every token.
func TestEPDEncodeFailureRetriedOnOtherEncoder(t *testing.T) {
	t.Parallel()
	rs := []role{{name: "encode-a", kind: profiles.KindEncode, extra: []string{"--fake-hang-after-requests", "1"}},
		{name: "encode-b", kind: profiles.KindEncode}, {name: "prefill", kind: profiles.KindPrefill}, {name: "decode-a", kind: profiles.KindDecode}}
	c := newClusterWith(t, Options{}, "tsd", profiles.ModeEPD, withRetries, rs...)
	c.waitRegistered(roleNames(rs)...)
	// An image that consistent hashing sends to encode-a, the hanging one.
	var r tokenapi.Request
	for shade := uint8(0); ; shade++ {
		r = imageRequest(t, 1, 4, testPNG(t, 40, 30, shade))
		if epd.NewRing([]string{"encode-a", "encode-b"}, 0).Pick(r.Images[0].Hash) == "encode-a" {
			break
		}
		if shade == 255 {
			t.Fatal("no shade hashes to encode-a")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ch, err := c.g.Generate(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	// Generate returns once every leg was submitted: the encode leg is in
	// flight on encode-a now.
	if n, _ := c.g.InFlight("encode-a"); n != 1 {
		t.Fatalf("encode-a has %d legs in flight, want the request's", n)
	}
	c.g.AbortRole("encode-a", "restart requested")
	ids, fin, err := collectGen(t, ch)
	if err != nil || fin == nil || fin.Reason != tokenapi.FinishLength || len(ids) != 4 {
		t.Fatalf("ids %v finish %+v err %v", ids, fin, err)
	}
	if n := testutil.ToFloat64(c.g.metrics.attempts.WithLabelValues("encode", "retry")); n != 1 {
		t.Fatalf("encode/retry counted %v times", n)
	}
	if n, _ := c.g.InFlight("encode-b"); n != 0 {
		t.Errorf("encode-b still has %d legs in flight", n)
	}
}

// Prompt logprobs are awaited before any response: a prefill that fails
// there (here it hangs on its first request and the stall verdict ends
// the leg) is retried on the other prefill, still before the response,
// and the client gets the prompt logprobs and every token in one clean
// answer.
func TestPromptLogprobsRetriedBeforeTheResponse(t *testing.T) {
	t.Parallel()
	lp := []string{"--enable-output-logprobs"}
	c := newClusterWith(t, Options{StallTimeout: 300 * time.Millisecond}, "tsd", profiles.ModePD, withRetries,
		role{name: "prefill-a", kind: profiles.KindPrefill, extra: append([]string{"--fake-hang-after-requests", "1"}, lp...)},
		role{name: "prefill-b", kind: profiles.KindPrefill, extra: lp}, role{name: "decode", kind: profiles.KindDecode, extra: lp})
	c.waitRegistered("prefill-a", "prefill-b", "decode")
	prompt := []int32{11, 12, 13, 14, 15}
	st, rs, msg := postGenerate(t, c.base, `{"input_ids":[11,12,13,14,15],"return_logprob":true,"logprob_start_len":0,"sampling_params":{"max_new_tokens":4,"ignore_eos":true,"seed":9}}`)
	if st != 200 || len(rs) == 0 {
		t.Fatalf("%d %s", st, msg)
	}
	checkPromptLPs(t, rs[0].MetaInfo.Input, prompt, 0)
	if ids := rs[0].OutputIDs; !equalIDs(ids, expected(9, 4)) {
		t.Fatalf("ids %v", ids)
	}
	if n := testutil.ToFloat64(c.g.metrics.attempts.WithLabelValues("stalled", "retry")); n != 1 {
		t.Fatalf("stalled/retry counted %v times", n)
	}
}
