package profiles

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

const sloBase = `model: m
roles:
  - {name: prefill, gpus: [0]}
  - name: decode
    replicas: 3
    gpus: [[1], [2], [3]]
`

// Pins: slo: with only a target reads every other key's documented
// default, and the plan resolves the GPU set and every entry's bounds.
func TestSLODefaults(t *testing.T) {
	t.Parallel()
	p, errs := Parse("p.yaml", []byte(sloBase+"slo: {ttft_p90: 1s}\n"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := &SLO{TTFTP90: time.Second, Mode: SLOAdvise, Interval: 30 * time.Second, Cooldown: 2 * time.Minute,
		Window: 90 * time.Second, Breach: 2, Headroom: 0.7}
	if !reflect.DeepEqual(p.SLO, want) {
		t.Fatalf("slo = %+v, want %+v", p.SLO, want)
	}
	plan, errs := MakePlan(p, fixedFacts())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	sp := plan.SLO
	if got := strings.Join(sp.GPUs, ","); got != "0,1,2,3" {
		t.Errorf("gpus = %s, want every GPU the roles hold", got)
	}
	wantRoles := []SLORolePlan{{Group: "prefill", Kind: KindPrefill, Min: 1}, {Group: "decode", Kind: KindDecode, Min: 1}}
	if !reflect.DeepEqual(sp.Roles, wantRoles) {
		t.Errorf("roles = %+v, want %+v", sp.Roles, wantRoles)
	}
	if sp.String() != "ttft_p90 1s, advise every 30s" {
		t.Errorf("String = %q", sp.String())
	}
	if p, _ := Parse("p.yaml", []byte(sloBase)); p.SLO != nil {
		t.Errorf("a profile without slo: has a planner: %+v", p.SLO)
	}
}

// Pins: every key written is read, slo.roles bounds its entries, and an
// explicit GPU set is kept as written.
func TestSLOKeys(t *testing.T) {
	t.Parallel()
	src := sloBase + `slo:
  ttft_p90: 500ms
  itl_p90: 50ms
  mode: act
  interval: 5s
  cooldown: 20s
  window: 30s
  breach: 3
  headroom: 0.6
  gpus: [3, 0, 1, 2, 4]
  roles:
    decode: {min: 2, max: 3}
    prefill: {max: 2}
`
	p, errs := Parse("p.yaml", []byte(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	plan, errs := MakePlan(p, fixedFacts())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	sp := plan.SLO
	if sp.TTFTP90.D() != 500*time.Millisecond || sp.ITLP90.D() != 50*time.Millisecond || sp.Mode != SLOAct ||
		sp.Interval.D() != 5*time.Second || sp.Cooldown.D() != 20*time.Second || sp.Window.D() != 30*time.Second ||
		sp.Breach != 3 || sp.Headroom != 0.6 {
		t.Errorf("slo plan = %+v", sp)
	}
	if got := strings.Join(sp.GPUs, ","); got != "3,0,1,2,4" {
		t.Errorf("gpus = %s, want them as written", got)
	}
	if b, ok := sp.Bounds("decode"); !ok || b.Min != 2 || b.Max != 3 {
		t.Errorf("decode bounds = %+v %v", b, ok)
	}
	if b, ok := sp.Bounds("prefill"); !ok || b.Min != 1 || b.Max != 2 {
		t.Errorf("prefill bounds = %+v %v", b, ok)
	}
}

// Pins: each slo: rule reports an error naming the key and its line.
func TestSLOValidation(t *testing.T) {
	t.Parallel()
	cases := []ruleCase{
		{"no target", sloBase + "slo: #<\n  mode: act\n", "slo", "names no target"},
		{"unknown key", sloBase + "slo:\n  ttft_p90: 1s\n  ttft_p99: 1s #<\n", "slo.ttft_p99", "did you mean"},
		{"bad mode", sloBase + "slo:\n  ttft_p90: 1s\n  mode: auto #<\n", "slo.mode", "must be advise or act"},
		{"bad duration", sloBase + "slo:\n  ttft_p90: 500 #<\n", "slo.ttft_p90", "write 500s for seconds"},
		{"interval too short", sloBase + "slo:\n  ttft_p90: 1s\n  interval: 100ms #<\n", "slo.interval", "at least 1s"},
		{"window below interval", sloBase + "slo:\n  ttft_p90: 1s\n  interval: 10s\n  window: 5s #<\n", "slo.window", "shorter than interval"},
		{"headroom above 1", sloBase + "slo:\n  ttft_p90: 1s\n  headroom: 1.5 #<\n", "slo.headroom", "at most 1"},
		{"gpu twice", sloBase + "slo:\n  ttft_p90: 1s\n  gpus: [0, 0] #<\n", "slo.gpus", "listed twice"},
		{"gpus not a list", sloBase + "slo:\n  ttft_p90: 1s\n  gpus: 0-3 #<\n", "slo.gpus", "must be a list"},
		{"unknown entry", sloBase + "slo:\n  ttft_p90: 1s\n  roles:\n    decoder: {max: 3} #<\n", "slo.roles.decoder", `no role entry "decoder" (did you mean "decode"?)`},
		{"min above max", sloBase + "slo:\n  ttft_p90: 1s\n  roles:\n    decode: {min: 3, max: 2} #<\n", "slo.roles.decode.max", "below min"},
		{"min zero", sloBase + "slo:\n  ttft_p90: 1s\n  roles:\n    decode: {min: 0} #<\n", "slo.roles.decode.min", "between 1 and 64"},
		{"replicas above max", sloBase + "slo:\n  ttft_p90: 1s\n  roles:\n    decode: {max: 2} #<\n", "slo.roles.decode.max", "3 replica(s), more than max 2"},
		{"replicas below min", sloBase + "slo:\n  ttft_p90: 1s\n  roles:\n    prefill: {min: 2} #<\n", "slo.roles.prefill.min", "fewer than min 2"},
		{"an encode entry", `model: m
roles:
  - {name: encode, gpus: [2]}
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
slo:
  ttft_p90: 1s
  roles:
    encode: {max: 2} #<
`, "slo.roles.encode", "resizes prefill, decode and aggregated entries only"},
		{"unknown key of an entry", sloBase + "slo:\n  ttft_p90: 1s\n  roles:\n    decode:\n      maximum: 2 #<\n", "slo.roles.decode.maximum", "unknown key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			errs := loadAndPlan("case.yaml", c.src)
			if len(errs) == 0 {
				t.Fatalf("no error; want %q", c.msg)
			}
			prefix := fmt.Sprintf("case.yaml:%d:", markedLine(c.src))
			for _, e := range errs {
				s := e.Error()
				if strings.Contains(s, c.msg) && strings.HasPrefix(s, prefix) && strings.Contains(s, ": "+c.key+": ") {
					return
				}
			}
			t.Errorf("want an error at %s naming %q with %q; got:\n%v", prefix, c.key, c.msg, errs)
		})
	}
}

// Pins: a scaled profile is held to slo.roles (tsd scale past max is
// refused, naming the key).
func TestSLOBoundsHoldScale(t *testing.T) {
	t.Parallel()
	p, errs := Parse("p.yaml", []byte(sloBase+"slo:\n  ttft_p90: 1s\n  roles:\n    decode: {max: 3}\n"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if _, err := p.Scaled("decode", 4, [][]string{{"4"}}); err == nil || !strings.Contains(err.Error(), "slo.roles.decode.max") {
		t.Fatalf("scale past max: %v", err)
	}
	if _, err := p.Scaled("decode", 2, nil); err != nil {
		t.Fatalf("scale within bounds: %v", err)
	}
}

// Pins: slo: changes live through tsd apply, field by field, and adding
// or dropping it is one live change; no engine restarts.
func TestSLODiffLive(t *testing.T) {
	with := applyBase + "slo:\n  ttft_p90: 1s\n  mode: advise\n"
	for _, c := range []struct {
		name     string
		from, to string
		want     []string
	}{
		{"added", applyBase, with, []string{"slo"}},
		{"dropped", with, applyBase, []string{"slo"}},
		{"mode and target", with, applyBase + "slo:\n  ttft_p90: 2s\n  mode: act\n", []string{"slo.ttft_p90", "slo.mode"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := planFrom(t, c.from, nil)
			d := Diff(base, planFrom(t, c.to, base))
			var got []string
			for _, f := range d.Gateway {
				got = append(got, f.Field)
			}
			if !reflect.DeepEqual(got, c.want) || len(d.Fixed) > 0 {
				t.Errorf("live %q fixed %v, want live %q", got, d.Fixed, c.want)
			}
			for _, r := range d.Roles {
				if r.Action != ActionUnchanged {
					t.Errorf("%s %s: the planner's targets touch no engine", r.Name, r.Action)
				}
			}
		})
	}
}
