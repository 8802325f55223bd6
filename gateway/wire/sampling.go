package wire

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/tsd-project/tsd/internal/msgpack"
)

// TopKAll is the normalized "no top-k limit" value (§5.3).
const TopKAll = 1 << 30

// StrForm says how a "str / array of str / nil" field travels.
type StrForm uint8

const (
	StrNil    StrForm = iota // msgpack nil
	StrSingle                // one str: Values[0]
	StrArray                 // array of str (possibly empty)
)

// StringList is a field typed "str / array of str / nil" (stop, stop_strs).
type StringList struct {
	Form   StrForm
	Values []string
}

// Strings returns the strings whatever the form.
func (s StringList) Strings() []string {
	if s.Form == StrSingle && len(s.Values) > 1 {
		return s.Values[:1]
	}
	return s.Values
}

// StrList is the array form of ss (an empty array when ss is empty).
func StrList(ss ...string) StringList {
	return StringList{Form: StrArray, Values: append([]string{}, ss...)}
}

func appendStringList(b []byte, s StringList) []byte {
	switch s.Form {
	case StrSingle:
		if len(s.Values) == 0 {
			return msgpack.AppendStr(b, "")
		}
		return msgpack.AppendStr(b, s.Values[0])
	case StrArray:
		return msgpack.AppendStrs(b, nonNil(s.Values))
	}
	return msgpack.AppendNil(b)
}

func (r *reader) readStringList() (StringList, error) {
	if r.NextNil() {
		return StringList{}, nil
	}
	c, _ := r.Peek()
	if msgpack.Family(c) == "str" {
		s, err := r.ReadStr()
		return StringList{Form: StrSingle, Values: []string{s}}, err
	}
	if msgpack.Family(c) != "array" {
		return StringList{}, msgpack.TypeError{Want: "str or array of str", Got: msgpack.Family(c)}
	}
	ss, err := r.ReadOptStrs()
	return StringList{Form: StrArray, Values: ss}, err
}

// LogitBias is one logit_bias entry; the wire map is str(token id) → float
// and entries keep their wire order.
type LogitBias struct {
	Token string
	Bias  float64
}

// SamplingParams is the untagged 29-element SamplingParams array (§5.3).
// Construct with DefaultSamplingParams: the zero value is not the default.
type SamplingParams struct {
	MaxNewTokens               *int        // 0; nil: engine maximum
	Stop                       StringList  // 1; copied to StopStrs only when not normalized
	StopTokenIDs               []int32     // 2; nil vs [] matters
	Temperature                float64     // 3
	TopP                       float64     // 4
	TopK                       int         // 5; -1 all (raw), TopKAll (normalized)
	MinP                       float64     // 6
	FrequencyPenalty           float64     // 7
	PresencePenalty            float64     // 8
	RepetitionPenalty          float64     // 9
	MinNewTokens               int         // 10
	JSONSchema                 *string     // 11
	Regex                      *string     // 12
	EBNF                       *string     // 13
	StructuralTag              *string     // 14
	IgnoreEOS                  bool        // 15
	SkipSpecialTokens          bool        // 16
	SpacesBetweenSpecialTokens bool        // 17
	NoStopTrim                 bool        // 18
	ThinkingBudget             *int        // 19
	CustomParams               Raw         // 20; map or nil
	StreamInterval             *int        // 21
	LogitBias                  []LogitBias // 22; nil: msgpack nil, non-nil empty: {}
	Seed                       *int64      // 23; nil: engine uses CRC-32(rid)
	Logprobs                   *int        // 24
	N                          int         // 25; must be 1
	StopStrs                   StringList  // 26
	StopStrMaxLen              int         // 27
	IsNormalized               bool        // 28
}

// samplingFields names the 29 positions for error messages.
var samplingFields = [...]string{"max_new_tokens", "stop", "stop_token_ids", "temperature", "top_p",
	"top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens",
	"json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
	"spaces_between_special_tokens", "no_stop_trim", "thinking_budget", "custom_params",
	"stream_interval", "logit_bias", "seed", "logprobs", "n", "stop_strs", "stop_str_max_len",
	"is_normalized"}

// DefaultSamplingParams are the engine's defaults (raw form).
func DefaultSamplingParams() SamplingParams {
	return SamplingParams{Temperature: 1, TopP: 1, TopK: -1, RepetitionPenalty: 1,
		SkipSpecialTokens: true, SpacesBetweenSpecialTokens: true, N: 1}
}

// Normalized returns the form SMG sends (is_normalized=true): the sender
// applies the engine's derivation itself (§5.3). Already-normalized params
// come back unchanged, as the engine leaves them.
func (p SamplingParams) Normalized() SamplingParams {
	if p.IsNormalized {
		return p
	}
	if p.Stop.Form != StrNil {
		p.StopStrs = StrList(p.Stop.Strings()...)
	} else {
		p.StopStrs = StrList(p.StopStrs.Strings()...)
	}
	if len(p.StopTokenIDs) == 0 {
		p.StopTokenIDs = nil
	}
	if p.Temperature < 1e-6 {
		p.Temperature, p.TopK = 1, 1
	}
	if p.TopK == -1 {
		p.TopK = TopKAll
	}
	p.StopStrMaxLen = 0
	p.IsNormalized = true
	return p
}

// Validate applies the engine's admission checks (§5.3); a failure makes
// the engine finish the request at once with "abort". vocabSize <= 0 skips
// the logit_bias range check.
func (p SamplingParams) Validate(vocabSize int) error {
	switch {
	case p.Temperature < 0:
		return fmt.Errorf("temperature %v < 0", p.Temperature)
	case !(p.TopP > 0 && p.TopP <= 1):
		return fmt.Errorf("top_p %v not in (0, 1]", p.TopP)
	case !(p.MinP >= 0 && p.MinP <= 1):
		return fmt.Errorf("min_p %v not in [0, 1]", p.MinP)
	case !(p.TopK == -1 || p.TopK == TopKAll || (p.TopK >= 1 && p.TopK < 128)):
		return fmt.Errorf("top_k %d: want -1, %d or 1..127", p.TopK, TopKAll)
	case !(p.FrequencyPenalty >= -2 && p.FrequencyPenalty <= 2):
		return fmt.Errorf("frequency_penalty %v not in [-2, 2]", p.FrequencyPenalty)
	case !(p.PresencePenalty >= -2 && p.PresencePenalty <= 2):
		return fmt.Errorf("presence_penalty %v not in [-2, 2]", p.PresencePenalty)
	case !(p.RepetitionPenalty >= 0 && p.RepetitionPenalty <= 2):
		return fmt.Errorf("repetition_penalty %v not in [0, 2]", p.RepetitionPenalty)
	case p.MinNewTokens < 0:
		return fmt.Errorf("min_new_tokens %d < 0", p.MinNewTokens)
	case p.MaxNewTokens != nil && p.MinNewTokens > *p.MaxNewTokens:
		return fmt.Errorf("min_new_tokens %d > max_new_tokens %d", p.MinNewTokens, *p.MaxNewTokens)
	case p.Logprobs != nil && *p.Logprobs != 0:
		return fmt.Errorf("logprobs %d: only nil or 0 supported", *p.Logprobs)
	case p.N != 1:
		return fmt.Errorf("n %d: must be 1", p.N)
	}
	if p.MaxNewTokens != nil && *p.MaxNewTokens < 0 {
		return fmt.Errorf("max_new_tokens %d < 0", *p.MaxNewTokens)
	}
	constraints := 0
	for _, s := range []*string{p.JSONSchema, p.Regex, p.EBNF} {
		if s != nil {
			constraints++
		}
	}
	if constraints > 1 {
		return errors.New("at most one of json_schema, regex, ebnf")
	}
	if vocabSize > 0 {
		for _, lb := range p.LogitBias {
			id, err := strconv.Atoi(lb.Token)
			if err != nil || id < 0 || id >= vocabSize {
				return fmt.Errorf("logit_bias key %q outside vocab of %d", lb.Token, vocabSize)
			}
		}
	}
	return nil
}

func appendSampling(b []byte, p SamplingParams) []byte {
	b = msgpack.AppendArrayHeader(b, len(samplingFields))
	b = msgpack.AppendOptInt(b, p.MaxNewTokens)
	b = appendStringList(b, p.Stop)
	b = msgpack.AppendOptInt32s(b, p.StopTokenIDs)
	b = msgpack.AppendFloat(b, p.Temperature)
	b = msgpack.AppendFloat(b, p.TopP)
	b = msgpack.AppendInt(b, int64(p.TopK))
	b = msgpack.AppendFloat(b, p.MinP)
	b = msgpack.AppendFloat(b, p.FrequencyPenalty)
	b = msgpack.AppendFloat(b, p.PresencePenalty)
	b = msgpack.AppendFloat(b, p.RepetitionPenalty)
	b = msgpack.AppendInt(b, int64(p.MinNewTokens))
	b = msgpack.AppendOptStr(b, p.JSONSchema)
	b = msgpack.AppendOptStr(b, p.Regex)
	b = msgpack.AppendOptStr(b, p.EBNF)
	b = msgpack.AppendOptStr(b, p.StructuralTag)
	b = msgpack.AppendBool(b, p.IgnoreEOS)
	b = msgpack.AppendBool(b, p.SkipSpecialTokens)
	b = msgpack.AppendBool(b, p.SpacesBetweenSpecialTokens)
	b = msgpack.AppendBool(b, p.NoStopTrim)
	b = msgpack.AppendOptInt(b, p.ThinkingBudget)
	b = msgpack.AppendRaw(b, p.CustomParams)
	b = msgpack.AppendOptInt(b, p.StreamInterval)
	if p.LogitBias == nil {
		b = msgpack.AppendNil(b)
	} else {
		b = msgpack.AppendMapHeader(b, len(p.LogitBias))
		for _, lb := range p.LogitBias {
			b = msgpack.AppendFloat(msgpack.AppendStr(b, lb.Token), lb.Bias)
		}
	}
	if p.Seed == nil {
		b = msgpack.AppendNil(b)
	} else {
		b = msgpack.AppendInt(b, *p.Seed)
	}
	b = msgpack.AppendOptInt(b, p.Logprobs)
	b = msgpack.AppendInt(b, int64(p.N))
	b = appendStringList(b, p.StopStrs)
	b = msgpack.AppendInt(b, int64(p.StopStrMaxLen))
	b = msgpack.AppendBool(b, p.IsNormalized)
	return b
}

// readSampling is prefix-tolerant: missing trailing fields keep their
// defaults, extra trailing elements are skipped.
func (r *reader) readSampling() (SamplingParams, error) {
	p := DefaultSamplingParams()
	n, err := r.ReadArrayLen()
	if err != nil {
		return p, err
	}
	for i := 0; i < n; i++ {
		if err := r.readSamplingField(&p, i); err != nil {
			return p, msgpack.At(msgpack.Field(i, fieldName(samplingFields[:], i)), err)
		}
	}
	return p, nil
}

func (r *reader) readSamplingField(p *SamplingParams, i int) (err error) {
	switch i {
	case 0:
		p.MaxNewTokens, err = r.ReadOptInt()
	case 1:
		p.Stop, err = r.readStringList()
	case 2:
		p.StopTokenIDs, err = r.ReadOptInt32s()
	case 3:
		p.Temperature, err = r.ReadFloat()
	case 4:
		p.TopP, err = r.ReadFloat()
	case 5:
		p.TopK, err = r.ReadIntN()
	case 6:
		p.MinP, err = r.ReadFloat()
	case 7:
		p.FrequencyPenalty, err = r.ReadFloat()
	case 8:
		p.PresencePenalty, err = r.ReadFloat()
	case 9:
		p.RepetitionPenalty, err = r.ReadFloat()
	case 10:
		p.MinNewTokens, err = r.ReadIntN()
	case 11:
		p.JSONSchema, err = r.ReadOptStr()
	case 12:
		p.Regex, err = r.ReadOptStr()
	case 13:
		p.EBNF, err = r.ReadOptStr()
	case 14:
		p.StructuralTag, err = r.ReadOptStr()
	case 15:
		p.IgnoreEOS, err = r.ReadBool()
	case 16:
		p.SkipSpecialTokens, err = r.ReadBool()
	case 17:
		p.SpacesBetweenSpecialTokens, err = r.ReadBool()
	case 18:
		p.NoStopTrim, err = r.ReadBool()
	case 19:
		p.ThinkingBudget, err = r.ReadOptInt()
	case 20:
		p.CustomParams, err = r.ReadRaw()
	case 21:
		p.StreamInterval, err = r.ReadOptInt()
	case 22:
		p.LogitBias, err = r.readLogitBias()
	case 23:
		if !r.NextNil() {
			var v int64
			v, err = r.ReadInt()
			p.Seed = &v
		}
	case 24:
		p.Logprobs, err = r.ReadOptInt()
	case 25:
		p.N, err = r.ReadIntN()
	case 26:
		p.StopStrs, err = r.readStringList()
	case 27:
		p.StopStrMaxLen, err = r.ReadIntN()
	case 28:
		p.IsNormalized, err = r.ReadBool()
	default:
		err = r.Skip()
	}
	return err
}

func (r *reader) readLogitBias() ([]LogitBias, error) {
	if r.NextNil() {
		return nil, nil
	}
	n, err := r.ReadMapLen()
	if err != nil {
		return nil, err
	}
	out := make([]LogitBias, n)
	for i := range out {
		if out[i].Token, err = r.ReadStr(); err != nil {
			return nil, msgpack.At(msgpack.Index(i)+" key", err)
		}
		if out[i].Bias, err = r.ReadFloat(); err != nil {
			return nil, msgpack.At("."+out[i].Token, err)
		}
	}
	return out, nil
}
