package profiles

import (
	"fmt"
	"regexp"

	"github.com/goccy/go-yaml/ast"
)

// The gateway's admission queue and its API keys (docs/profiles.md
// "Admission, priority and API keys"; docs/protocol.md §11.13): what the
// engines take at once before requests wait in the gateway, how much may
// wait, the rule against starvation, and each key's limits and priority.

// AdmissionPlan is gateway.admission.
type AdmissionPlan struct {
	// PrefillTokens: prompt tokens one prefill rank holds at once (each
	// request's until its first token) before PD requests wait in the
	// gateway; DecodeRequests: requests one decode rank holds at once. 0:
	// no bound.
	PrefillTokens  int `json:"prefill_tokens"`
	DecodeRequests int `json:"decode_requests"`
	// QueueRequests and QueueTokens bound what waits; past them a request
	// is shed with 429 (or takes the place of a lower class).
	QueueRequests int `json:"queue_requests"`
	QueueTokens   int `json:"queue_tokens"`
	// Aging: a waiting request rises one priority class per this long.
	Aging Duration `json:"aging"`
}

// APIKeyPlan is one entry of gateway.api_keys: a bearer key (its value is
// read from KeyEnv, never written anywhere) naming a tenant, with its
// limits and priority.
type APIKeyPlan struct {
	Name     string `json:"name"`
	KeyEnv   string `json:"key_env"`
	RPM      int    `json:"rpm,omitempty"`
	TPM      int    `json:"tpm,omitempty"`
	Priority int    `json:"priority,omitempty"`
}

// Request priorities (docs/protocol.md §11.13): larger is served first.
const (
	MinPriority = -100
	MaxPriority = 100
)

var keyName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

var (
	admissionSection section[AdmissionPlan]
	apiKeySection    section[APIKeyPlan]
)

func init() {
	admissionSection = section[AdmissionPlan]{Path: "gateway.admission", Rows: []row[AdmissionPlan]{
		intKey("prefill_tokens", 0, 1<<30, "0", "prompt tokens one prefill rank computes at once (a request's until its first token) before PD requests wait in the gateway's queue, in priority order; 0 = no bound", func(a *AdmissionPlan) *int { return &a.PrefillTokens }),
		intKey("decode_requests", 0, 1<<20, "0", "requests one decode rank holds at once before PD requests wait in the gateway's queue; 0 = no bound", func(a *AdmissionPlan) *int { return &a.DecodeRequests }),
		intKey("queue_requests", 0, 1<<20, "1024", "requests that may wait in a queue; one more is shed at once with 429 and Retry-After, or, of a higher class, takes the place of the lowest waiting one (503)", func(a *AdmissionPlan) *int { return &a.QueueRequests }),
		intKey("queue_tokens", 0, 1<<30, "1048576", "prompt tokens that may wait in a queue (as queue_requests)", func(a *AdmissionPlan) *int { return &a.QueueTokens }),
		{Key: "aging", Type: "duration", Default: "10s", Doc: "a waiting request rises one priority class per this long, so a low one waits at most (high - low) × aging behind a stream of higher ones; 0s = never (strict priority)", read: func(l *loader, f field, a *AdmissionPlan) {
			if s := l.str(f); s == "0" || s == "0s" {
				a.Aging = 0
				return
			}
			if d, ok := l.duration(f); ok {
				a.Aging = Duration(d)
			}
		}},
	}}
	apiKeySection = section[APIKeyPlan]{Path: "gateway.api_keys[]", Rows: []row[APIKeyPlan]{
		{Key: "name", Type: "string", Doc: "required; the tenant the key names (letters, digits, . _ -), in /metrics and the access line", read: func(l *loader, f field, k *APIKeyPlan) {
			k.Name = l.str(f)
			if !keyName.MatchString(k.Name) {
				l.errf(f, "%q is not a key name (1-64 letters, digits, . _ -)", k.Name)
			}
		}},
		{Key: "key_env", Type: "env var name", Doc: "required; the environment variable holding the bearer key (never written in the profile)", read: func(l *loader, f field, k *APIKeyPlan) {
			k.KeyEnv = l.str(f)
			if !envName.MatchString(k.KeyEnv) {
				l.errf(f, "%q is not an environment variable name", k.KeyEnv)
			}
		}},
		intKey("rpm", 0, 1<<30, "0", "requests per minute (a bucket refilled continuously, full at first); past it 429 with Retry-After; 0 = no limit", func(k *APIKeyPlan) *int { return &k.RPM }),
		intKey("tpm", 0, 1<<40, "0", "tokens per minute: prompt tokens at admission, output tokens when the request ends; 0 = no limit", func(k *APIKeyPlan) *int { return &k.TPM }),
		intKey("priority", MinPriority, MaxPriority, "0", "the priority class of the key's requests, and the highest one they may ask for (a request's priority or x-smg-priority can only lower it)", func(k *APIKeyPlan) *int { return &k.Priority }),
	}, finish: func(l *loader, at field, _ *APIKeyPlan, m map[string]field) {
		for _, req := range []string{"name", "key_env"} {
			if _, present := m[req]; !present {
				l.errf(at, "missing %s: every key has a name and the variable holding it", req)
			}
		}
	}}
}

// readAPIKeys reads gateway.api_keys: a list of keys, names and variables
// unique.
func readAPIKeys(l *loader, at field, g *Gateway) {
	if isNull(at.n) {
		return
	}
	seq, ok := at.n.(*ast.SequenceNode)
	if !ok {
		l.errf(at, "must be a list of keys (each starting with `- name:`)")
		return
	}
	names, envs := map[string]bool{}, map[string]bool{}
	for i, it := range seq.Values {
		it = l.deref(it)
		f := field{n: it, pos: nodePos(it), path: fmt.Sprintf("%s[%d]", at.path, i)}
		var k APIKeyPlan
		apiKeySection.setDefaults(&k)
		apiKeySection.read(l, f, &k)
		if k.Name != "" && names[k.Name] {
			l.errf(f, "a second key named %q", k.Name)
		}
		if k.KeyEnv != "" && envs[k.KeyEnv] {
			l.errf(f, "a second key in $%s", k.KeyEnv)
		}
		names[k.Name], envs[k.KeyEnv] = true, true
		g.APIKeys = append(g.APIKeys, k)
	}
}
