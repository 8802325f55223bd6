package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsd-project/tsd/gateway/admission"
	"github.com/tsd-project/tsd/snapshot"
)

// The admission queue as the status and /metrics show it
// (docs/protocol.md §11.13, docs/metrics.md): SMG's scheduler series
// where SMG has one (smg_scheduler_*, class as SMG names it), tsd's for
// the rest, read from the queue's owner at scrape time; its sheds count
// in smg_admission_queue_rejected_total with the front door's
// (phasemetrics.go).

// admissionStatus is the queue for the snapshot; nil while it bounds
// nothing and never did.
func (g *Gateway) admissionStatus() *snapshot.AdmissionStatus {
	s := g.disp.QueueSnapshot()
	if len(s.Kinds) == 0 {
		return nil
	}
	st := &snapshot.AdmissionStatus{ByClass: map[string]int{}, Shed: map[string]uint64{}}
	for _, k := range s.Kinds {
		st.Queued += k.Queued.Requests
		st.QueuedTokens += k.Queued.Tokens
		st.InFlight += k.InFlight.Requests
		for c, l := range k.Waiting {
			st.ByClass[admission.ClassLabel(c)] += l.Requests
		}
		for o, n := range k.Outcomes {
			if o.Result == "admitted" {
				st.Admitted += n
			} else {
				st.Shed[o.Result] += n
			}
		}
	}
	return st
}

// admissionCollector reads the queue at scrape time.
type admissionCollector struct{ g *Gateway }

var (
	descQueueDepth = prometheus.NewDesc("smg_scheduler_queue_depth", "Requests waiting in the gateway's admission queue, by priority class.",
		[]string{"class"}, nil)
	descAdmit = prometheus.NewDesc("smg_scheduler_admit_total", "Requests that entered the admission queue by class and outcome (admitted, rejected_queue_full, rejected_queue_timeout, rejected_displaced, rejected_rate_limit, rejected_too_large, client_cancelled).",
		[]string{"class", "outcome"}, nil)
	descPromoted = prometheus.NewDesc("smg_scheduler_starvation_promotion_total", "Requests admitted ahead of a higher class because they aged (gateway.admission.aging), by class.",
		[]string{"class"}, nil)
	descQueuedKind = prometheus.NewDesc("tsd_gateway_admission_queued", "What waits in each kind's admission queue, by unit (requests, tokens: prompt tokens).",
		[]string{"kind", "unit"}, nil)
	descInflightKind = prometheus.NewDesc("tsd_gateway_admission_inflight", "What the admission queue let through to a kind's engines and is not back yet, by unit (requests; tokens: prompt tokens before their first token).",
		[]string{"kind", "unit"}, nil)
	descLimitKind = prometheus.NewDesc("tsd_gateway_admission_limit", "The admission queue's bounds now, by kind and what they bound (inflight_requests, inflight_tokens: the engines' capacity over their routable ranks; queue_requests, queue_tokens: what may wait); 0 none.",
		[]string{"kind", "bound"}, nil)
)

// smgOutcome is an outcome under SMG's label values.
func smgOutcome(r string) string {
	switch r {
	case "admitted":
		return r
	case "client_gone":
		return "client_cancelled"
	case admission.ReasonDeadline:
		return "rejected_queue_timeout"
	}
	return "rejected_" + r
}

func (c admissionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueueDepth, descAdmit, descPromoted, descQueuedKind, descInflightKind, descLimitKind} {
		ch <- d
	}
}

func (c admissionCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.g.disp.QueueSnapshot()
	depth := map[string]int{}
	admit := map[[2]string]uint64{}
	promoted := map[string]uint64{}
	for _, k := range s.Kinds {
		for cl, l := range k.Waiting {
			depth[admission.ClassLabel(cl)] += l.Requests
		}
		for o, n := range k.Outcomes {
			admit[[2]string{admission.ClassLabel(o.Class), smgOutcome(o.Result)}] += n
		}
		for cl, n := range k.Promoted {
			promoted[admission.ClassLabel(cl)] += n
		}
		ch <- prometheus.MustNewConstMetric(descQueuedKind, prometheus.GaugeValue, float64(k.Queued.Requests), k.Kind, "requests")
		ch <- prometheus.MustNewConstMetric(descQueuedKind, prometheus.GaugeValue, float64(k.Queued.Tokens), k.Kind, "tokens")
		ch <- prometheus.MustNewConstMetric(descInflightKind, prometheus.GaugeValue, float64(k.InFlight.Requests), k.Kind, "requests")
		ch <- prometheus.MustNewConstMetric(descInflightKind, prometheus.GaugeValue, float64(k.InFlight.Tokens), k.Kind, "tokens")
		for b, v := range map[string]int{"inflight_requests": k.Limits.Requests, "inflight_tokens": k.Limits.Tokens, "queue_requests": k.Limits.QueueRequests, "queue_tokens": k.Limits.QueueTokens} {
			ch <- prometheus.MustNewConstMetric(descLimitKind, prometheus.GaugeValue, float64(v), k.Kind, b)
		}
	}
	for cl, n := range depth {
		ch <- prometheus.MustNewConstMetric(descQueueDepth, prometheus.GaugeValue, float64(n), cl)
	}
	for k, n := range admit {
		ch <- prometheus.MustNewConstMetric(descAdmit, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	for cl, n := range promoted {
		ch <- prometheus.MustNewConstMetric(descPromoted, prometheus.CounterValue, float64(n), cl)
	}
}
