package gen

import (
	"math"
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
		FieldTemperature:       func(s *Sampling, v float64) { s.Temperature = v },
		FieldTopP:              func(s *Sampling, v float64) { s.TopP = v },
		FieldTopK:              func(s *Sampling, v float64) { s.TopK = int(v) },
		FieldMinP:              func(s *Sampling, v float64) { s.MinP = v },
		FieldFrequencyPenalty:  func(s *Sampling, v float64) { s.FrequencyPenalty = v },
		FieldPresencePenalty:   func(s *Sampling, v float64) { s.PresencePenalty = v },
		FieldRepetitionPenalty: func(s *Sampling, v float64) { s.RepetitionPenalty = v },
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
			s := DefaultSampling()
			set[c.field](&s, v)
			if fe := CheckSampling(s, nil); fe != nil {
				t.Errorf("%s=%v refused: %v", c.field, v, fe)
			}
			if err := toWire(s).Validate(0); err != nil {
				t.Errorf("%s=%v admitted here but the engine refuses it: %v", c.field, v, err)
			}
		}
		for _, v := range c.out {
			s := DefaultSampling()
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
	s := DefaultSampling()
	s.MaxNewTokens, s.MinNewTokens = &max, 4
	names := func(f string) string {
		return map[string]string{FieldMaxNewTokens: "max_tokens", FieldMinNewTokens: "min_tokens"}[f]
	}
	if fe := CheckSampling(s, names); fe == nil || fe.Field != "min_tokens" || !strings.Contains(fe.Message, "max_tokens 3") {
		t.Errorf("min > max: %+v", fe)
	}
	// A field a front end maps to "" is not its to check.
	s = DefaultSampling()
	s.TopK = 500
	if fe := CheckSampling(s, func(f string) string {
		if f == FieldTopK {
			return ""
		}
		return f
	}); fe != nil {
		t.Errorf("unmapped top_k checked: %v", fe)
	}
}

// toWire is the gateway's mapping (gateway wireSampling) for the fields
// the table covers: zero top_p/top_k mean the engine default.
func toWire(s Sampling) wire.SamplingParams {
	p := wire.DefaultSamplingParams()
	p.MaxNewTokens, p.MinNewTokens = s.MaxNewTokens, s.MinNewTokens
	p.Temperature, p.TopP, p.TopK = s.Temperature, s.TopP, s.TopK
	if p.TopK == 0 {
		p.TopK = -1
	}
	p.MinP, p.FrequencyPenalty, p.PresencePenalty, p.RepetitionPenalty = s.MinP, s.FrequencyPenalty, s.PresencePenalty, s.RepetitionPenalty
	return p
}
