package toolcall

import (
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

// DeepSeek's special tokens (full-width bars and the ▁ "lower one eighth
// block"), as in the DeepSeek-V3/V3.1 tokenizer_config.json.
const (
	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
)

// DeepSeek-V3 (SMG "deepseek"): each call names its type, then the
// function and a fenced JSON block, as the V3 chat template renders it:
//
//	<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
//	```json
//	{"city": "Paris"}
//	```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
func deepseekV3Format() *format {
	return &format{opens: []string{dsCallsBegin}, close: dsCallsEnd,
		next: nextMarkedCall([]string{"```", dsCallEnd}, deepseekV3Head),
		parse: func(_, body string, _ *Options) ([]found, bool) {
			return markedCalls(body, dsCallBegin, dsCallEnd, func(call string) (found, bool) {
				_, rest, ok := strings.Cut(call, dsSep)
				if !ok {
					return found{}, false
				}
				name, args, ok := strings.Cut(rest, "\n")
				if !ok {
					return found{}, false
				}
				args = delta.TrimSpace(args)
				args = strings.TrimPrefix(args, "```json")
				args = strings.TrimSuffix(args, "```")
				return dsFound(name, args)
			})
		}}
}

// DeepSeek-V3.1 and V3.2-Exp (SMG "deepseek31"): no type and no fence,
//
//	<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
func deepseekV31Format() *format {
	return &format{opens: []string{dsCallsBegin}, close: dsCallsEnd,
		next: nextMarkedCall([]string{dsCallEnd}, deepseekV31Head),
		parse: func(_, body string, _ *Options) ([]found, bool) {
			return markedCalls(body, dsCallBegin, dsCallEnd, func(call string) (found, bool) {
				name, args, ok := strings.Cut(call, dsSep)
				if !ok {
					return found{}, false
				}
				return dsFound(name, args)
			})
		}}
}

func dsFound(name, args string) (found, bool) {
	name = delta.TrimSpace(name)
	a, ok := compactObject(args)
	if !ok || !validName(name) {
		return found{}, false
	}
	return found{name: name, args: a}, true
}

// DeepSeek-V3.2 (SMG "deepseek32") and V4 (SMG "deepseek_v4") write calls
// in DSML, differing only in the outer block's name (function_calls /
// tool_calls), as their model cards' encoding documents:
//
//	<｜DSML｜tool_calls>
//	<｜DSML｜invoke name="get_weather">
//	<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
//	<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
//	</｜DSML｜invoke>
//	</｜DSML｜tool_calls>
//
// string="true" values are raw text; others are JSON (raw text when they do
// not parse). An invoke holding a bare JSON object instead of parameters is
// read as the arguments.
func dsmlFormat(block string) func() *format {
	return func() *format {
		return &format{opens: []string{"<｜DSML｜" + block + ">"}, close: "</｜DSML｜" + block + ">", parse: parseDSML}
	}
}

const (
	dsmlInvoke    = "<｜DSML｜invoke name=\""
	dsmlInvokeEnd = "</｜DSML｜invoke>"
	dsmlParam     = "<｜DSML｜parameter name=\""
	dsmlParamEnd  = "</｜DSML｜parameter>"
)

func parseDSML(_, body string, o *Options) ([]found, bool) {
	var out []found
	rest := body
	for !onlySpace(rest) {
		rest = delta.TrimSpace(rest)
		if !strings.HasPrefix(rest, dsmlInvoke) {
			return nil, false
		}
		rest = rest[len(dsmlInvoke):]
		name, after, ok := strings.Cut(rest, "\">")
		if !ok || !validName(name) {
			return nil, false
		}
		inv, after, ok := strings.Cut(after, dsmlInvokeEnd)
		if !ok {
			return nil, false
		}
		rest = after
		if a, ok := compactObject(inv); ok {
			out = append(out, found{name: name, args: a})
			continue
		}
		var keys, vals []string
		for !onlySpace(inv) {
			inv = delta.TrimSpace(inv)
			if !strings.HasPrefix(inv, dsmlParam) {
				return nil, false
			}
			inv = inv[len(dsmlParam):]
			key, attrs, ok := strings.Cut(inv, "\"")
			if !ok || key == "" {
				return nil, false
			}
			attrs, val, ok := strings.Cut(attrs, ">")
			if !ok {
				return nil, false
			}
			val, inv, ok = strings.Cut(val, dsmlParamEnd)
			if !ok {
				return nil, false
			}
			keys = append(keys, key)
			if strings.Contains(attrs, `string="true"`) {
				vals = append(vals, marshal(val))
			} else {
				vals = append(vals, typedValue(o, name, key, val))
			}
		}
		out = append(out, found{name: name, args: argObject(keys, vals)})
	}
	return out, len(out) > 0
}

func init() {
	register("deepseek", deepseekV3Format)
	register("deepseek31", deepseekV31Format)
	register("deepseek32", dsmlFormat("function_calls"))
	register("deepseek_v4", dsmlFormat("tool_calls"))
}
