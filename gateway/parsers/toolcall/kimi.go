package toolcall

import (
	"strconv"
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

// Kimi K2 (SMG "kimik2"): a section of calls whose ids the model writes
// itself as functions.NAME:IDX, as the Kimi-K2 chat template renders them:
//
//	<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>
//
// The id is kept as written when it has that shape; otherwise it is made
// as SMG does: functions.NAME:(HistoryCalls + index).
const (
	kimiSection    = "<|tool_calls_section_begin|>"
	kimiSectionEnd = "<|tool_calls_section_end|>"
	kimiCall       = "<|tool_call_begin|>"
	kimiArgs       = "<|tool_call_argument_begin|>"
	kimiCallEnd    = "<|tool_call_end|>"
)

func kimiK2Format() *format {
	return &format{opens: []string{kimiSection}, close: kimiSectionEnd,
		parse: parseKimiK2, next: nextMarkedCall([]string{kimiCallEnd}, kimiK2Head),
		ids: func(f found, index int, o *Options) string {
			if f.id != "" {
				return f.id
			}
			return "functions." + f.name + ":" + strconv.Itoa(o.HistoryCalls+index)
		}}
}

func parseKimiK2(_, body string, _ *Options) ([]found, bool) {
	return markedCalls(body, kimiCall, kimiCallEnd, func(call string) (found, bool) {
		head, args, ok := strings.Cut(call, kimiArgs)
		if !ok {
			return found{}, false
		}
		head = delta.TrimSpace(head)
		name, id := head, ""
		if k := strings.LastIndexByte(head, ':'); k >= 0 {
			if _, err := strconv.Atoi(head[k+1:]); err == nil {
				name = head[:k]
				if strings.HasPrefix(name, "functions.") {
					id = head
				}
			}
		}
		name = strings.TrimPrefix(name, "functions.")
		a, ok := compactObject(args)
		if !ok || !validName(name) {
			return found{}, false
		}
		return found{id: id, name: name, args: a}, true
	})
}

// Kimi K3 (SMG "kimi_k3") writes XTML channels: the answer in a response
// channel (unwrapped into content) and calls in a tools channel,
//
//	<|open|>response<|sep|>Let me check.<|close|>response<|sep|>
//	<|open|>tools<|sep|><|open|>call tool="get_weather" index="0"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>
//
// type="string" values are raw; others JSON (raw text when they do not
// parse). Attribute values unescape &quot; then &amp;. Ids are
// NAME:INDEX with the per-reply ordinal, as SMG makes them for K3.
const (
	k3Open  = "<|open|>"
	k3Close = "<|close|>"
	k3Sep   = "<|sep|>"
)

func kimiK3Format() *format {
	return &format{opens: []string{k3Open + "tools" + k3Sep}, close: k3Close + "tools" + k3Sep,
		drop:  []string{k3Open + "response" + k3Sep, k3Close + "response" + k3Sep},
		parse: parseKimiK3,
		ids:   func(f found, index int, _ *Options) string { return f.name + ":" + strconv.Itoa(index) },
	}
}

func xtmlAttr(head, key string) (string, bool) {
	_, v, ok := strings.Cut(head, key+`="`)
	if !ok {
		return "", false
	}
	v, _, ok = strings.Cut(v, `"`)
	v = strings.ReplaceAll(strings.ReplaceAll(v, "&quot;", `"`), "&amp;", "&")
	return v, ok
}

func parseKimiK3(_, body string, o *Options) ([]found, bool) {
	var out []found
	rest := body
	callEnd := k3Close + "call" + k3Sep
	argEnd := k3Close + "argument" + k3Sep
	for !onlySpace(rest) {
		rest = delta.TrimSpace(rest)
		if !strings.HasPrefix(rest, k3Open+"call ") {
			return nil, false
		}
		head, after, ok := strings.Cut(rest[len(k3Open):], k3Sep)
		if !ok {
			return nil, false
		}
		name, ok := xtmlAttr(head, "tool")
		if !ok || !validName(name) {
			return nil, false
		}
		call, after, ok := strings.Cut(after, callEnd)
		if !ok {
			return nil, false
		}
		rest = after
		var keys, vals []string
		for !onlySpace(call) {
			call = delta.TrimSpace(call)
			if !strings.HasPrefix(call, k3Open+"argument ") {
				return nil, false
			}
			ahead, arest, ok := strings.Cut(call[len(k3Open):], k3Sep)
			if !ok {
				return nil, false
			}
			key, ok := xtmlAttr(ahead, "key")
			if !ok || key == "" {
				return nil, false
			}
			typ, _ := xtmlAttr(ahead, "type")
			val, arest, ok := strings.Cut(arest, argEnd)
			if !ok {
				return nil, false
			}
			call = arest
			keys = append(keys, key)
			if typ == "string" {
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
	register("kimik2", kimiK2Format)
	register("kimi_k3", kimiK3Format)
}
