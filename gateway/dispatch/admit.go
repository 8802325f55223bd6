package dispatch

import (
	"context"
	"time"

	"github.com/tsd-project/tsd/gateway/admission"
	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/reqtime"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/profiles"
)

// The dispatch's side of the admission queue (gateway/admission;
// docs/protocol.md §11.13): a request, validated and tokenized, takes its
// place in its kind's queue before any worker is chosen, with its
// priority class and its deadline (gateway.queue_timeout from its
// arrival, for the queue and for a routable worker both); its ticket
// comes back when the request's first token does (its prompt tokens) and
// when it ends (its place).

// queueConfig is the plan's admission settings and keys as the queue
// takes them: a PD request enters the prefill kind's queue, bounded by
// the prefill ranks' tokens and the decode ranks' requests.
func queueConfig(p profiles.GatewayPlan) admission.Config {
	var a profiles.AdmissionPlan
	if p.Admission != nil {
		a = *p.Admission
	}
	cfg := admission.Config{Kinds: map[string]admission.KindConfig{
		profiles.KindPrefill: {TokensPerRank: a.PrefillTokens, TokensKind: profiles.KindPrefill, RequestsPerRank: a.DecodeRequests, RequestsKind: profiles.KindDecode,
			QueueRequests: a.QueueRequests, QueueTokens: a.QueueTokens, Aging: a.Aging.D()},
	}}
	if len(p.APIKeys) > 0 {
		cfg.Keys = map[string]admission.KeyLimits{}
		for _, k := range p.APIKeys {
			cfg.Keys[k.Name] = admission.KeyLimits{RPM: k.RPM, TPM: k.TPM}
		}
	}
	return cfg
}

// ranksOf is how many routable ranks the kind's workers have now (the
// queue's bounds are per rank).
func (g *Dispatcher) ranksOf(kind string) int {
	ps := g.live.pools()
	var p *pool
	switch kind {
	case profiles.KindPrefill:
		p = &ps.prefill
	case profiles.KindDecode:
		p = &ps.decode
	default:
		return 1
	}
	n := 0
	for _, w := range p.workers {
		n += len(w.Routable())
	}
	return n
}

// ClassOf is a request's priority class: its priority field, else the
// class SMG's x-smg-priority header names (a value SMG does not know is
// default), else its API key's class; never above its key's class (the
// key's priority is its ceiling, as SMG clamps a tenant's header). Pure.
func ClassOf(r *tokenapi.Request, c front.Caller) int {
	class := admission.ClassDefault
	switch {
	case r.Priority != nil:
		class = *r.Priority
	case c.HasHeader:
		class, _ = admission.HeaderClass(c.Header)
	case c.Keyed:
		class = c.Priority
	}
	if c.Keyed {
		class = min(class, c.Priority)
	}
	return max(admission.MinClass, min(admission.MaxClass, class))
}

type queueDeadlineKey struct{}

// queueDeadline is the request's deadline for waiting (the queue, a
// routable worker), set when it entered.
func queueDeadline(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(queueDeadlineKey{}).(time.Time)
	return t, ok
}

// enter takes r into its queue; ctx comes back carrying its deadline.
// A nil ticket and error: nothing is bounded.
func (g *Dispatcher) enter(ctx context.Context, r *tokenapi.Request) (context.Context, *admission.Ticket, error) {
	now := time.Now()
	var deadline time.Time
	if wait := g.live.config().queueTimeout; wait > 0 {
		deadline = now.Add(wait)
		ctx = context.WithValue(ctx, queueDeadlineKey{}, deadline)
	} else if wait < 0 {
		deadline = now // it may not wait at all
	}
	c := front.CallerFrom(ctx)
	if g.queue == nil || !g.queue.Active() {
		g.metrics.tenant(c.Tenant, "admitted", len(r.InputIDs))
		return ctx, nil, nil
	}
	reqtime.Mark(ctx, reqtime.QueueBegin)
	tk, ref := g.queue.Enter(ctx, profiles.KindPrefill, c.Tenant, admission.Ask{Class: ClassOf(r, c), Tokens: len(r.InputIDs), Arrived: now, Deadline: deadline})
	reqtime.Mark(ctx, reqtime.QueueEnd)
	if ref != nil {
		g.metrics.tenant(c.Tenant, ref.Reason, 0)
		if h := g.metrics.Shed; h != nil && ref.Status != 499 {
			h(ref.Reason)
		}
		return ctx, nil, &RequestError{Status: ref.Status, Code: ref.Code, Message: ref.Message, RetryAfter: ref.After}
	}
	g.metrics.tenant(c.Tenant, "admitted", len(r.InputIDs))
	return ctx, tk, nil
}

// admitted is a flight with its place in the queue: the first token
// gives back its prompt tokens, Close its place (and settles its key's
// tokens per minute with its output).
type admitted struct {
	*flight
	tk    *admission.Ticket
	first bool
	out   int
}

func (a *admitted) Next() (tokenapi.Event, bool) {
	ev, ok := a.flight.Next()
	if !a.first && (len(ev.TokenIDs) > 0 || ev.Finish != nil || ev.Err != nil || !ok) {
		a.first = true
		a.tk.Started()
	}
	a.out = max(a.out, ev.OutputTokens)
	return ev, ok
}

func (a *admitted) Close() {
	a.flight.Close()
	a.tk.Done(a.out)
}

// QueueSnapshot is the admission queue now (status, /metrics).
func (g *Dispatcher) QueueSnapshot() admission.Snapshot {
	if g.queue == nil {
		return admission.Snapshot{}
	}
	return g.queue.Snapshot()
}
