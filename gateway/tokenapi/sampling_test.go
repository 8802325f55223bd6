package tokenapi

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/wire"
)

// Each field of the sampling table, in and out of range; a value the
// table admits the engine admits too (wire.SamplingParams.Validate), so a
// request the front end accepts is never aborted by the engine for it.
func TestSamplingLimits(t *testing.T) {
	t.Parallel()
	set := map[string]func(s *Sampling, v float64){
		FieldTemperature:       func(s *Sampling, v float64) { s.Temperature = &v },
		FieldTopP:              func(s *Sampling, v float64) { s.TopP = &v },
		FieldTopK:              func(s *Sampling, v float64) { k := int(v); s.TopK = &k },
		FieldMinP:              func(s *Sampling, v float64) { s.MinP = v },
		FieldFrequencyPenalty:  func(s *Sampling, v float64) { s.FrequencyPenalty = v },
		FieldPresencePenalty:   func(s *Sampling, v float64) { s.PresencePenalty = v },
		FieldRepetitionPenalty: func(s *Sampling, v float64) { s.RepetitionPenalty = &v },
		FieldMinNewTokens:      func(s *Sampling, v float64) { s.MinNewTokens = int(v) },
		FieldMaxNewTokens:      func(s *Sampling, v float64) { n := int(v); s.MaxNewTokens = &n },
	}
	for _, c := range []struct {
		field   string
		in, out []float64
	}{
		{FieldTemperature, []float64{0, 0.7, 2}, []float64{-0.1, 2.01, math.NaN()}},
		{FieldTopP, []float64{1e-6, 0.5, 1}, []float64{0, -1, 1.01, math.NaN()}},
		{FieldTopK, []float64{-1, 0, 1, 127}, []float64{-2, 128, 1000}},
		{FieldMinP, []float64{0, 0.5, 1}, []float64{-0.01, 1.01}},
		{FieldFrequencyPenalty, []float64{-2, 0, 2}, []float64{-2.01, 2.01}},
		{FieldPresencePenalty, []float64{-2, 0, 2}, []float64{-2.01, 2.01}},
		{FieldRepetitionPenalty, []float64{0, 1, 2}, []float64{-0.5, 2.01, 10}},
		{FieldMinNewTokens, []float64{0, 5}, []float64{-1}},
		{FieldMaxNewTokens, []float64{0, 1, 4096}, []float64{-1}},
	} {
		if set[c.field] == nil {
			t.Fatalf("no setter for %s", c.field)
		}
		for _, v := range c.in {
			var s Sampling
			set[c.field](&s, v)
			if fe := CheckSampling(s, nil); fe != nil {
				t.Errorf("%s=%v refused: %v", c.field, v, fe)
			}
			if _, err := s.Wire(); err != nil {
				t.Errorf("%s=%v admitted here but the engine refuses it: %v", c.field, v, err)
			}
		}
		for _, v := range c.out {
			var s Sampling
			set[c.field](&s, v)
			fe := CheckSampling(s, func(f string) string { return "client_" + f })
			if fe == nil || fe.Field != "client_"+c.field || !strings.Contains(fe.Message, "client_"+c.field) {
				t.Errorf("%s=%v: %+v, want a refusal naming client_%s", c.field, v, fe, c.field)
			}
		}
	}
	// Every row of the table is covered above.
	for _, l := range SamplingLimits {
		if set[l.Field] == nil {
			t.Errorf("table row %s has no test", l.Field)
		}
	}
	// min > max names both fields as the client spells them.
	max := 3
	s := Sampling{MaxNewTokens: &max, MinNewTokens: 4}
	names := func(f string) string {
		return map[string]string{FieldMaxNewTokens: "max_tokens", FieldMinNewTokens: "min_tokens"}[f]
	}
	if fe := CheckSampling(s, names); fe == nil || fe.Field != "min_tokens" || !strings.Contains(fe.Message, "max_tokens 3") {
		t.Errorf("min > max: %+v", fe)
	}
	// A field a front end maps to "" is not its to check.
	k := 500
	s = Sampling{TopK: &k}
	if fe := CheckSampling(s, func(f string) string {
		if f == FieldTopK {
			return ""
		}
		return f
	}); fe != nil {
		t.Errorf("unmapped top_k checked: %v", fe)
	}
}

// Wire is the one conversion to the lane: a field left unset is the
// engine's default, top_k 0 and -1 are "all", a set field passes through,
// and the result is the normalized form SMG sends.
func TestSamplingWire(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	i := func(v int) *int { return &v }
	seed := int64(9)
	schema := `{"type":"object"}`
	def := wire.DefaultSamplingParams().Normalized()
	for _, c := range []struct {
		name string
		in   Sampling
		want func(p *wire.SamplingParams) // applied to the normalized default
		err  string
	}{
		{"unset is the engine default", Sampling{}, func(*wire.SamplingParams) {}, ""},
		{"top_k 0 is all", Sampling{TopK: i(0)}, func(*wire.SamplingParams) {}, ""},
		{"top_k -1 is all", Sampling{TopK: i(-1)}, func(*wire.SamplingParams) {}, ""},
		{"top_k set", Sampling{TopK: i(5)}, func(p *wire.SamplingParams) { p.TopK = 5 }, ""},
		{"temperature set", Sampling{Temperature: f(0.5)}, func(p *wire.SamplingParams) { p.Temperature = 0.5 }, ""},
		{"temperature 0 is greedy", Sampling{Temperature: f(0), TopK: i(7)}, func(p *wire.SamplingParams) { p.TopK = 1 }, ""},
		{"top_p set", Sampling{TopP: f(0.25)}, func(p *wire.SamplingParams) { p.TopP = 0.25 }, ""},
		{"repetition_penalty set", Sampling{RepetitionPenalty: f(1.5)}, func(p *wire.SamplingParams) { p.RepetitionPenalty = 1.5 }, ""},
		{"plain fields", Sampling{MinP: 0.1, FrequencyPenalty: -1, PresencePenalty: 1, MinNewTokens: 2, IgnoreEOS: true},
			func(p *wire.SamplingParams) {
				p.MinP, p.FrequencyPenalty, p.PresencePenalty, p.MinNewTokens, p.IgnoreEOS = 0.1, -1, 1, 2, true
			}, ""},
		{"max tokens, seed, stop ids, schema", Sampling{MaxNewTokens: i(8), Seed: &seed, StopTokenIDs: []int32{3}, JSONSchema: &schema},
			func(p *wire.SamplingParams) {
				p.MaxNewTokens, p.Seed, p.StopTokenIDs, p.JSONSchema = i(8), &seed, []int32{3}, &schema
			}, ""},
		{"empty stop ids stay nil", Sampling{StopTokenIDs: []int32{}}, func(*wire.SamplingParams) {}, ""},
		{"top_p 0 set is refused", Sampling{TopP: f(0)}, nil, "top_p 0"},
		{"min over max is refused", Sampling{MaxNewTokens: i(1), MinNewTokens: 2}, nil, "min_new_tokens 2 > max_new_tokens 1"},
	} {
		got, err := c.in.Wire()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		want := def
		c.want(&want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, want)
		}
	}
}
