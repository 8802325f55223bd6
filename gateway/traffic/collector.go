package traffic

import "github.com/prometheus/client_golang/prometheus"

// The Book's series. Per role: a PD request counts on its prefill and its
// decode, so summing the role series over role counts it twice; the
// tsd_gateway_traffic_* series count every request once.
var (
	descRoleRequests = prometheus.NewDesc("tsd_gateway_role_requests_total",
		"Requests finished, by the role that served a leg (role=\"gateway\": no engine served it).", []string{"role"}, nil)
	descRoleErrors = prometheus.NewDesc("tsd_gateway_role_errors_total",
		"Requests the deployment failed (HTTP status >= 500 or a stream that broke), by the role that served a leg.", []string{"role"}, nil)
	descRoleClientErrors = prometheus.NewDesc("tsd_gateway_role_client_errors_total",
		"Requests refused for what they asked (HTTP 4xx but 499), by the role that served a leg (role=\"gateway\": refused before dispatch).", []string{"role"}, nil)
	descRoleTokens = prometheus.NewDesc("tsd_gateway_role_output_tokens_total",
		"Output tokens streamed, by decode role.", []string{"role"}, nil)
	descRoleActive = prometheus.NewDesc("tsd_gateway_role_requests_in_flight",
		"Requests in flight, by the role that serves a leg (role=\"gateway\": not dispatched yet).", []string{"role"}, nil)
	descRoleTTFT = prometheus.NewDesc("tsd_gateway_role_ttft_seconds",
		"Time from a request's arrival to its first output token, by the role that served a leg.", []string{"role"}, nil)
	descRoleITL = prometheus.NewDesc("tsd_gateway_role_itl_seconds",
		"Inter-token latency (per token) of the decode stream, by decode role.", []string{"role"}, nil)
	descRequests = prometheus.NewDesc("tsd_gateway_traffic_requests_total",
		"Requests (POSTs) finished, each once.", nil, nil)
	descErrors = prometheus.NewDesc("tsd_gateway_traffic_errors_total",
		"Requests (POSTs) the deployment failed (HTTP status >= 500 or a stream that broke), each once.", nil, nil)
	descClientErrors = prometheus.NewDesc("tsd_gateway_traffic_client_errors_total",
		"Requests (POSTs) refused for what they asked (HTTP 4xx but 499), each once.", nil, nil)
	descTokens = prometheus.NewDesc("tsd_gateway_traffic_output_tokens_total",
		"Output tokens streamed to clients.", nil, nil)
	descActive = prometheus.NewDesc("tsd_gateway_traffic_requests_in_flight",
		"Requests (POSTs) in flight.", nil, nil)
)

// Describe implements prometheus.Collector.
func (b *Book) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRoleRequests, descRoleErrors, descRoleClientErrors, descRoleTokens, descRoleActive,
		descRoleTTFT, descRoleITL, descRequests, descErrors, descClientErrors, descTokens, descActive,
		descPrefillPrompt, descPrefillCached, descPrefillShare} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the same counters Status reads.
func (b *Book) Collect(ch chan<- prometheus.Metric) {
	var ms []prometheus.Metric
	b.mu.Lock()
	c := func(d *prometheus.Desc, v float64, labels ...string) {
		ms = append(ms, prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...))
	}
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ms = append(ms, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
	}
	c(descRequests, float64(b.total.requests))
	c(descErrors, float64(b.total.errors))
	c(descClientErrors, float64(b.total.clientErrors))
	c(descTokens, float64(b.total.tokens))
	g(descActive, float64(b.total.inflight))
	for _, name := range b.order {
		a := b.roles[name]
		c(descRoleRequests, float64(a.requests), name)
		c(descRoleErrors, float64(a.errors), name)
		c(descRoleClientErrors, float64(a.clientErrors), name)
		c(descRoleTokens, float64(a.tokens), name)
		g(descRoleActive, float64(a.inflight), name)
		ms = append(ms, prometheus.MustNewConstHistogram(descRoleTTFT, a.ttftH.count, a.ttftH.sum, a.ttftH.cumulative(), name))
		ms = append(ms, prometheus.MustNewConstHistogram(descRoleITL, a.itlH.count, a.itlH.sum, a.itlH.cumulative(), name))
	}
	ms = b.cacheMetrics(ms, second(b.elapsed()))
	b.mu.Unlock()
	// Sent outside the lock: the registry reads ch at its own pace.
	for _, m := range ms {
		ch <- m
	}
}
