package gateway

import (
	"regexp"
	"testing"

	"github.com/tsd-project/tsd/gateway/probe"
	"github.com/tsd-project/tsd/profiles"
)

// The dashboard's test request reads what the real front ends write: a
// chat reply through the OpenAI routes (behind the API key), and the
// token-level /generate when the gateway serves no OpenAI API.
func TestProbeThroughFrontEnds(t *testing.T) {
	c, _ := errShapeCluster(t)
	got, _, err := probe.Target{URL: c.base, APIKeyEnv: errShapeKeyEnv}.Send(t.Context())
	if err != nil || !regexp.MustCompile(`(?s)^.* \(\d+ tokens, (stop|length)\)$`).MatchString(got) {
		t.Fatalf("chat probe: %q, %v", got, err)
	}
	if _, _, err := (probe.Target{URL: c.base}).Send(t.Context()); err == nil {
		t.Fatal("chat probe without the API key succeeded")
	}

	bare := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode})
	bare.waitRegistered("prefill", "decode")
	got, _, err = probe.Target{URL: bare.base}.Send(t.Context())
	if err != nil || !regexp.MustCompile(`^/generate: 8 tokens \[\d+( \d+){7}\]$`).MatchString(got) {
		t.Fatalf("/generate probe: %q, %v", got, err)
	}
}
