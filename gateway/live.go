package gateway

import (
	"errors"
	"fmt"
	"time"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Live settings (tsd apply, docs/architecture.md §4.3): what a running
// gateway takes in place. Each is an immutable value swapped whole; a
// request reads the values it needs once, when it is admitted, so it
// finishes under the settings it started with.

// Reconfigure takes p's live settings: the API key (apiKey, when
// p.APIKeyEnv names one) and gateway.api_keys (their values in keys, by
// variable), CORS origins, metrics_public, the concurrency limit and
// queue timeout of the front door, and the dispatch's routing policies,
// retry and breaker knobs, queue timeout and admission queue.
func (g *Gateway) Reconfigure(p profiles.GatewayPlan, apiKey string, keys map[string]string) error {
	if p.APIKeyEnv != "" && apiKey == "" {
		return errors.New("gateway.api_key_env " + p.APIKeyEnv + " names an empty key")
	}
	doorKeys, err := doorKeys(p.APIKeys, func(env string) string { return keys[env] })
	if err != nil {
		return err
	}
	if p.APIKeyEnv == "" {
		apiKey = ""
	}
	cur := g.settings.Load()
	tc, err := g.prepareTracing(cur.Tracing, p.Tracing) // the one step that may fail on the daemon's env: first
	if err != nil {
		return err
	}
	live := g.door.Settings()
	if p.MaxConcurrent != cur.MaxConcurrent || p.QueueTimeout != cur.QueueTimeout {
		// Requests holding a slot of the old limiter release it there.
		live.Admit = front.NewLimiter(p.MaxConcurrent, queueWait(p.QueueTimeout), func(d int) { g.queuedNow.Add(int64(d)) })
	}
	live.APIKey, live.Keys, live.CORSOrigins, live.MetricsPublic = apiKey, doorKeys, p.CORSOrigins, p.MetricsPublic
	if err := g.disp.Reconfigure(p, queueWait(p.QueueTimeout)); err != nil {
		tc.discard(g)
		return err
	}
	tc.apply(g)
	g.door.SetLive(live)
	next := p
	next.Workers = nil // the lane's business; settings only
	g.settings.Store(&next)
	g.log.Info("gateway settings changed by tsd apply", "policy_prefill", p.Policy.Prefill, "policy_decode", p.Policy.Decode, "disaggregation", p.Disaggregation,
		"max_concurrent", p.MaxConcurrent, "queue_timeout", p.QueueTimeout.D(), "cors_origins", len(p.CORSOrigins), "api_key", apiKey != "", "api_keys", len(doorKeys))
	return nil
}

// doorKeys are gateway.api_keys as the front door checks them, each
// key's value read by value(key_env); an empty one is an error naming
// the key and its variable, never the value.
func doorKeys(ks []profiles.APIKeyPlan, value func(string) string) ([]front.Key, error) {
	var out []front.Key
	for _, k := range ks {
		v := value(k.KeyEnv)
		if v == "" {
			return nil, fmt.Errorf("gateway: api_keys %s: $%s is empty or unset", k.Name, k.KeyEnv)
		}
		out = append(out, front.Key{Name: k.Name, Secret: v, Priority: k.Priority})
	}
	return out, nil
}

// queueWait is gateway.queue_timeout as the gateway uses it: 0 is the
// default, as New has it.
func queueWait(d profiles.Duration) time.Duration {
	if d == 0 {
		return 30 * time.Second
	}
	return d.D()
}

// policyStatus is the routing policy the gateway routes by now
// (defaults resolved).
func (g *Gateway) policyStatus() *snapshot.PolicyStatus {
	p := g.disp.Policies()
	return &p
}
