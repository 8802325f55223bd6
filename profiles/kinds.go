package profiles

import "slices"

// A role kind is data, not a branch (docs/architecture.md §10): what each
// kind needs from the planner, validation, the supervisor and the gateway
// is one row of Kinds, and code that differs by kind reads the row.

// KindAggregated is a TokenSpeed engine in aggregate serving
// (`--disaggregation-mode null`): it prefills and decodes a request itself,
// so the gateway sends it one leg per request.
const KindAggregated = "aggregated"

// Layouts: the route a request takes (the access line's layout=).
const (
	LayoutPD         = "pd"         // prefill → decode (encode first for images, in epd mode)
	LayoutAggregated = "aggregated" // one leg on an aggregated engine
)

// gateway.disaggregation: how requests split between the layouts.
const (
	DisaggAlways      = "always"      // every request prefill → decode
	DisaggNever       = "never"       // every request on an aggregated engine
	DisaggConditional = "conditional" // per request (gateway.conditional)
)

// KindSpec is what one role kind needs. Read it with KindOf.
type KindSpec struct {
	Kind string
	// Mode is the engine's --disaggregation-mode (upstream server_args:
	// null is aggregate serving).
	Mode string
	// Layout is the route this kind serves: an encode engine feeds the
	// prefill → decode route only (an image request always takes it).
	Layout string
	// Legs is how many legs one request has on this kind's engines: a PD
	// request is a prefill leg and a decode leg with the same bootstrap
	// room; an aggregated one a single leg; an encode leg is one per image.
	Legs int
	// Bootstrap: the engine hosts a rendezvous the other legs reach (the
	// prefill's KV, the encoder's embeddings), so it gets a
	// --disaggregation-bootstrap-port, a bootstrap host, and each request a
	// bootstrap room. FirstBootstrap is where planned ports start.
	Bootstrap      bool
	FirstBootstrap int
	// TSDBootstrap: gateway.bootstrap_server: tsd moves this kind's
	// rendezvous into the gateway (the prefill's KV rendezvous; an
	// encoder's embedding rendezvous stays the engine's).
	TSDBootstrap bool
	// Transfer: the engine moves KV or embeddings to another engine, so it
	// gets --disaggregation-transfer-backend (and --disaggregation-ib-device
	// when set); an aggregated engine keeps its KV to itself.
	Transfer bool
	// KVEvents: the engine keeps a prefix cache the gateway may follow
	// (kv_events, --kv-events-config): the kinds that prefill prompts.
	KVEvents bool
	// DPLoadBalance is the --load-balance-method the engine requires with
	// dp > 1 ("" when it requires none).
	DPLoadBalance string
	// MaxDP is the largest dp the engine takes (0: no limit).
	MaxDP int
	// EPDOnly: the engine's ranks get work, and so register on the lane and
	// are awaited before the role is ready, only in epd mode; other kinds'
	// ranks are awaited always.
	EPDOnly bool
	// DefaultPolicy and Policies: gateway.policy.<kind>, its default and
	// the names it accepts (docs/profiles.md "Routing policies").
	DefaultPolicy string
	Policies      []string
	policy        func(*PolicyPlan) *string
}

// The policy names per kind: SMG's names plus tsd's kv_aware; the gateway
// implements every one (gateway/routing; encode's in gateway/dispatch).
var (
	prefillPolicies = []string{"round_robin", "random", "cache_aware", "power_of_two", "least_load", "consistent_hashing", "prefix_hash", "manual", "bucket", PolicyKVAware}
	decodePolicies  = []string{"round_robin", "random", "cache_aware", "power_of_two", "least_load", "consistent_hashing", "prefix_hash", "manual"}
	encodePolicies  = []string{"consistent_hashing", "round_robin", "random"}
)

// Kinds has one row per role kind, in the order docs and errors list them.
var Kinds = []KindSpec{
	{Kind: KindEncode, Mode: "encode", Layout: LayoutPD, Legs: 1,
		Bootstrap: true, FirstBootstrap: firstEncodeBootstrap, Transfer: true,
		MaxDP: 1, EPDOnly: true, // TokenSpeed refuses encode with dp > 1
		DefaultPolicy: "consistent_hashing", Policies: encodePolicies,
		policy: func(p *PolicyPlan) *string { return &p.Encode }},
	{Kind: KindPrefill, Mode: "prefill", Layout: LayoutPD, Legs: 2,
		Bootstrap: true, FirstBootstrap: firstPrefillBootstrap, TSDBootstrap: true, Transfer: true,
		KVEvents:      true,
		DPLoadBalance: "round_robin", // TokenSpeed refuses any other with dp > 1
		DefaultPolicy: "round_robin", Policies: prefillPolicies,
		policy: func(p *PolicyPlan) *string { return &p.Prefill }},
	{Kind: KindDecode, Mode: "decode", Layout: LayoutPD, Legs: 2, Transfer: true,
		DefaultPolicy: "round_robin", Policies: decodePolicies,
		policy: func(p *PolicyPlan) *string { return &p.Decode }},
	{Kind: KindAggregated, Mode: "null", Layout: LayoutAggregated, Legs: 1,
		KVEvents:      true, // it prefills, so it has the prefix cache a prefill has
		DefaultPolicy: "round_robin", Policies: prefillPolicies,
		policy: func(p *PolicyPlan) *string { return &p.Aggregated }},
}

// KindOf is the row of kind; false for a kind that has none.
func KindOf(kind string) (KindSpec, bool) {
	i := slices.IndexFunc(Kinds, func(k KindSpec) bool { return k.Kind == kind })
	if i < 0 {
		return KindSpec{}, false
	}
	return Kinds[i], true
}

// kindOf is KindOf for code that has already validated the kind (a zero
// row for an unknown one: no bootstrap, no events, no policy).
func kindOf(kind string) KindSpec {
	k, _ := KindOf(kind)
	return k
}

// KindNames lists the kinds in table order.
func KindNames() []string {
	out := make([]string, len(Kinds))
	for i, k := range Kinds {
		out[i] = k.Kind
	}
	return out
}

// PolicyOf is the policy gateway.policy names for this kind.
func (k KindSpec) PolicyOf(p PolicyPlan) string {
	if k.policy == nil {
		return ""
	}
	return *k.policy(&p)
}

// AwaitsRanks reports whether a role of this kind is ready only once every
// attention-DP rank registered on the lane, in gateway mode mode (pd or
// epd): outside epd nothing is routed to an encode server, so its
// launcher's ready line is the signal (docs/protocol.md §9.4, §10.4).
func (k KindSpec) AwaitsRanks(mode string) bool {
	return !k.EPDOnly || mode == ModeEPD
}

// Policies lists the policy names the profile accepts per role kind (the
// Policies of each row of Kinds).
var Policies = func() map[string][]string {
	m := map[string][]string{}
	for _, k := range Kinds {
		m[k.Kind] = k.Policies
	}
	return m
}()
