package tracing

import (
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tsd-project/tsd/gateway/reqtime"
	"github.com/tsd-project/tsd/gateway/traffic"
)

// Attribute keys: OpenTelemetry's semantic conventions where they name
// the fact (HTTP, gen_ai usage), tsd.* for the rest (docs/metrics.md
// "Traces").
const (
	keyService        = attribute.Key("service.name")
	keyServiceVersion = attribute.Key("service.version")
	keyDeployment     = attribute.Key("tsd.deployment")

	keyMethod     = attribute.Key("http.request.method")
	keyPath       = attribute.Key("url.path")
	keyStatus     = attribute.Key("http.response.status_code")
	keyErrorType  = attribute.Key("error.type")
	keyInTokens   = attribute.Key("gen_ai.usage.input_tokens")
	keyOutTokens  = attribute.Key("gen_ai.usage.output_tokens")
	keyRequestID  = attribute.Key("tsd.request_id")
	keyEngineRIDs = attribute.Key("tsd.engine_rids")
	keyRoles      = attribute.Key("tsd.roles")
	keyRetries    = attribute.Key("tsd.retries")
	keyMigrated   = attribute.Key("tsd.migrated")
	keyLayout     = attribute.Key("tsd.layout")
	keyLayoutWhy  = attribute.Key("tsd.layout_reason")
	keyRole       = attribute.Key("tsd.role")
	keyKind       = attribute.Key("tsd.kind")
	keyRank       = attribute.Key("tsd.rank")
	keyPolicy     = attribute.Key("tsd.policy")
	keyReason     = attribute.Key("tsd.route_reason")
	keyMatch      = attribute.Key("tsd.match")
	keyQueue      = attribute.Key("tsd.queue")
	keyMerged     = attribute.Key("tsd.merged")
	keyITL        = attribute.Key("tsd.itl_ms")
)

// Layouts a request may take (the access line's layout=).
const (
	LayoutPD         = "pd"
	LayoutAggregated = "aggregated"
)

// kindAggregated, kindPrefill, kindDecode and kindEncode are the role
// kinds as the traffic account names them (profiles.Kind*).
const (
	kindAggregated = "aggregated"
	kindPrefill    = "prefill"
	kindDecode     = "decode"
	kindEncode     = "encode"
)

// Finish ends the request's trace: a child span per measured phase of
// its time, then its own span with the request's outcome. Later calls
// do nothing; nil does nothing.
func (q *Request) Finish(s traffic.Summary) {
	if q == nil || !q.done.CompareAndSwap(false, true) {
		return
	}
	end := time.Now()
	legs := legsOf(s.Roles)
	tl := s.Timeline
	layout := s.Route.Layout
	if layout == "" {
		layout = legs.layout()
	}
	firstRank := s.Route.PrefillRank
	if s.Route.Aggregated {
		firstRank = s.Route.AggRank
	}
	child := func(name string, iv reqtime.Interval, attrs ...attribute.KeyValue) {
		if !iv.Present() {
			return
		}
		_, sp := q.tr.Start(q.ctx, name, trace.WithTimestamp(reqtime.Wall(iv.From)), trace.WithAttributes(attrs...))
		sp.End(trace.WithTimestamp(reqtime.Wall(iv.To)))
	}
	child("queued", tl.Admission, keyQueue.String("admission"))
	child("queued", tl.Queue, keyQueue.String("priority"))
	child("queued", tl.Phase[reqtime.Queued], keyQueue.String("worker"))
	child("tokenize", tl.Phase[reqtime.Tokenize], keyInTokens.Int(s.Prompt))
	route := []attribute.KeyValue{keyLayout.String(layout)}
	if s.Route.LayoutReason != "" {
		route = append(route, keyLayoutWhy.String(s.Route.LayoutReason))
	}
	if s.Route.Set {
		route = append(route, keyPolicy.String(s.Route.Policy), keyReason.String(s.Route.Reason))
		if s.Route.Match >= 0 {
			route = append(route, keyMatch.Float64(s.Route.Match))
		}
	}
	child("route", tl.Phase[reqtime.Route], route...)
	if len(legs.encode) > 0 {
		child("encode", tl.Phase[reqtime.Encode], keyKind.String(kindEncode), keyRole.String(strings.Join(legs.encode, ",")))
	}
	pre := []attribute.KeyValue{keyKind.String(legs.firstKind), keyRole.String(legs.first), keyRank.Int(firstRank),
		keyInTokens.Int(s.Prompt), keyMerged.Bool(tl.Merged)}
	child("prefill", tl.Phase[reqtime.Prefill], pre...)
	dec := []attribute.KeyValue{keyKind.String(kindDecode), keyRole.String(legs.decode), keyRank.Int(s.Route.DecodeRank)}
	if layout == LayoutAggregated {
		dec = []attribute.KeyValue{keyKind.String(kindAggregated), keyRole.String(legs.first), keyRank.Int(firstRank)}
	}
	child("kv_transfer", tl.Phase[reqtime.KV], dec...)
	child("write", tl.Phase[reqtime.Write])
	if d, ok := tl.Duration(reqtime.Decode); ok {
		attrs := append(dec[:len(dec):len(dec)], keyOutTokens.Int(s.Completion))
		if s.Completion > 1 {
			attrs = append(attrs, keyITL.Float64(float64(d)/float64(time.Millisecond)/float64(s.Completion-1)))
		}
		child("decode", tl.Phase[reqtime.Decode], attrs...)
	}

	sp := q.span
	sp.SetAttributes(keyMethod.String(s.Method), keyPath.String(s.Path), keyStatus.Int(s.Status),
		keyRequestID.String(s.ID), keyInTokens.Int(s.Prompt), keyOutTokens.Int(s.Completion),
		keyRetries.Int(s.Retries), keyMigrated.Bool(s.Migrated), keyLayout.String(layout))
	if s.EngineRIDs != "" {
		sp.SetAttributes(keyEngineRIDs.String(s.EngineRIDs))
	}
	if len(s.Roles) > 0 {
		names := make([]string, len(s.Roles))
		for i, r := range s.Roles {
			names[i] = r.Name
		}
		sp.SetAttributes(keyRoles.String(strings.Join(names, ",")))
	}
	if s.Status >= 500 || s.Failed != "" {
		why := s.Failed
		if why == "" {
			why = s.Reason
		}
		if why == "" {
			why = "server_error"
		}
		sp.SetAttributes(keyErrorType.String(why))
		sp.SetStatus(codes.Error, why)
	}
	sp.End(trace.WithTimestamp(end))
}

// legs are the roles a request's legs ran on, by what they did.
type legs struct {
	first, firstKind string // the prefill's role, or the aggregated engine's
	decode           string
	encode           []string
}

func legsOf(roles []traffic.RoleLeg) legs {
	var l legs
	for _, r := range roles {
		switch r.Kind {
		case kindPrefill, kindAggregated:
			l.first, l.firstKind = r.Name, r.Kind // a retry's legs come last: the attempt that ran
		case kindDecode:
			l.decode = r.Name
		case kindEncode:
			l.encode = append(l.encode, r.Name)
		}
	}
	return l
}

// layout is how the request was served: one leg on an aggregated engine,
// or prefill → decode (with encode legs for images); "" before any leg.
func (l legs) layout() string {
	switch {
	case l.firstKind == kindAggregated:
		return LayoutAggregated
	case l.first != "" || l.decode != "":
		return LayoutPD
	}
	return ""
}
