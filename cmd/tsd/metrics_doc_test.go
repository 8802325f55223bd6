package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsd-project/tsd/gateway"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/planner"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor/rolemetrics"
	"github.com/tsd-project/tsd/supervisor/telemetry"
)

// recordingRegistry is a registry that remembers every collector
// registered on it, so every family can be described, including those
// with no series yet.
type recordingRegistry struct {
	*prometheus.Registry
	cs []prometheus.Collector
}

func (r *recordingRegistry) Register(c prometheus.Collector) error {
	r.cs = append(r.cs, c)
	return r.Registry.Register(c)
}

func (r *recordingRegistry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// exported is every metric family the daemon's registry holds, with its
// labels (sorted, comma-joined): the gateway's (its tokenizer cache on),
// telemetry's, the supervisor's and the process collectors, registered
// as cmd/tsd/up.go does.
func exported(t *testing.T) map[string]string {
	t.Helper()
	reg := &recordingRegistry{Registry: prometheus.NewRegistry()}
	tel := telemetry.New(telemetry.Options{FakeGPUs: 1})
	registerProcessCollectors(reg, tel)
	reg.MustRegister(rolemetrics.New(func() snapshot.Snapshot { return snapshot.Snapshot{} }, time.Now(), nil))
	reg.MustRegister(planner.NewCollector(func() *snapshot.PlannerStatus { return nil }))
	tok, err := tokenizer.Load(filepath.Join("..", "..", "gateway", "vision", "testdata", "demo-vl"))
	if err != nil {
		t.Fatal(err)
	}
	plan := &profiles.Plan{Name: "doc", Gateway: profiles.GatewayPlan{Mode: profiles.ModePD, Workers: []profiles.WorkerPlan{
		{Role: "prefill", Kind: profiles.KindPrefill, DP: 1, URL: "ipc://" + filepath.Join(t.TempDir(), "p"), Handshake: "tcp://127.0.0.1:0", Bootstrap: "127.0.0.1:1"},
		{Role: "decode", Kind: profiles.KindDecode, DP: 1, URL: "ipc://" + filepath.Join(t.TempDir(), "d"), Handshake: "tcp://127.0.0.1:0"},
	}}}
	if _, err := gateway.New(plan, gateway.Options{Registry: reg, TokenizerCache: tokenizer.NewCache(tok, 1<<20)}); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range reg.cs {
		ch := make(chan *prometheus.Desc, 256)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("unreadable desc %s", d)
			}
			labels := strings.Split(m[2], ",")
			if m[2] == "" {
				labels = nil
			}
			sort.Strings(labels)
			out[m[1]] = strings.Join(labels, ",")
		}
	}
	return out
}

// documented is every metric docs/metrics.md lists, with its labels.
func documented(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([a-z_:]+)` \\| (?:counter|gauge|histogram) \\| ([^|]*) \\|")
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "—" {
				labels = append(labels, l)
			}
		}
		sort.Strings(labels)
		out[m[1]] = strings.Join(labels, ",")
	}
	return out
}

// processFamily reports the Go runtime's and the process collector's
// families, which docs/metrics.md lists as a group.
func processFamily(name string) bool {
	return strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_")
}

// docs/metrics.md lists every metric the daemon exports, with its labels,
// and nothing it does not.
func TestMetricsDocumented(t *testing.T) {
	exp, doc := exported(t), documented(t)
	for name, labels := range exp {
		if processFamily(name) {
			continue
		}
		got, ok := doc[name]
		switch {
		case !ok:
			t.Errorf("docs/metrics.md does not list %s {%s}", name, labels)
		case got != labels:
			t.Errorf("docs/metrics.md lists %s with labels {%s}; it has {%s}", name, got, labels)
		}
	}
	for name := range doc {
		if _, ok := exp[name]; !ok {
			t.Errorf("docs/metrics.md lists %s, which tsd does not export", name)
		}
	}
	if len(doc) < 60 {
		t.Errorf("docs/metrics.md lists %d metrics: its table did not parse", len(doc))
	}
}

// The Grafana dashboard shipped in docs/grafana parses, and every metric
// its queries read is one tsd exports.
func TestGrafanaDashboardQueriesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "grafana", "tsd.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana/tsd.json: %v", err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && (k == "expr" || k == "query") {
					exprs = append(exprs, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(dash)
	if len(exprs) < 10 {
		t.Fatalf("%d queries in the dashboard", len(exprs))
	}
	exp := exported(t)
	name := regexp.MustCompile(`\b(?:smg|tsd|go|process)_[a-z0-9_]+`)
	used := map[string]bool{}
	for _, e := range exprs {
		for _, n := range name.FindAllString(e, -1) {
			used[n] = true
			base := n
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(n, suf); ok {
					if _, isFamily := exp[b]; isFamily {
						base = b
					}
				}
			}
			if _, ok := exp[base]; !ok {
				t.Errorf("the dashboard queries %s, which tsd does not export (in %s)", n, e)
			}
		}
	}
	for _, must := range []string{"tsd_role_state", "tsd_role_restarts_total", "smg_router_stage_duration_seconds_bucket", "tsd_gateway_traffic_client_errors_total", "smg_admission_queue_rejected_total"} {
		if !used[must] {
			t.Errorf("the dashboard never queries %s", must)
		}
	}
}

// TestMetricsList prints every exported family (go test -run
// TestMetricsList -v): the source of docs/metrics.md's rows.
func TestMetricsList(t *testing.T) {
	exp := exported(t)
	names := make([]string, 0, len(exp))
	for n := range exp {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("%s {%s}", n, exp[n])
	}
}
