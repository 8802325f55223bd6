package front

import (
	"encoding/json"
	"maps"
	"testing"
)

// Pins: objectMembers gives what json.Unmarshal into a map of raw values
// gives (values compared as bytes), or declines, for every shape of
// object a body can be: nesting, strings holding brackets, quotes and
// escapes, duplicate keys, odd spacing, empty objects.
func TestObjectMembersMatchesUnmarshal(t *testing.T) {
	for _, in := range []string{
		`{}`, ` { } `, `{"a":1}`, "{\n\t\"a\" : 1 ,\r\n \"b\":\"x\"\n}",
		`{"a":{"b":[1,{"c":"}]"}]},"d":[],"e":null,"f":true,"g":-1.5e3}`,
		`{"s":"a\"b\\","t":"[{"}`, `{"a":1,"a":2}`, `{"a":[[[]]],"b":{}}`,
		`{"k\u00e9y":1}`, `{"a\"b":1}`, `[1]`, `"x"`, `{"a":1}}`,
		`{"messages":[{"role":"user","content":"hi {there} [x]"}],"stream":true,"max_tokens":64}`,
	} {
		var want map[string]json.RawMessage
		werr := json.Unmarshal([]byte(in), &want)
		got, ok := objectMembers([]byte(in))
		if !ok {
			continue // the caller falls back to Unmarshal
		}
		if werr != nil {
			t.Errorf("%s: members %v, Unmarshal refused it: %v", in, got, werr)
			continue
		}
		if werr == nil && !maps.EqualFunc(got, want, func(a, b json.RawMessage) bool { return string(a) == string(b) }) {
			t.Errorf("%s: members %q, Unmarshal %q", in, got, want)
		}
	}
	for _, in := range []string{`{"a\"b":1}`, `[1]`, `{"a":`, `{"a" 1}`, `{"a":1`, `{"a":1}}`, `{}}`} {
		if got, ok := objectMembers([]byte(in)); ok {
			t.Errorf("%s: members %q, want a decline", in, got)
		}
	}
}
