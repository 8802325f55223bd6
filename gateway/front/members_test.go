package front

import (
	"encoding/json"
	"maps"
	"reflect"
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

// keysFields is a row set with every kind of rule keysClean reads.
var keysFields = &Fields{
	Ignored: map[string]string{"user": "no effect"},
	Refused: map[string]string{"suffix": "not supported"},
	Values:  map[string]Allowed{"background": {Values: []string{"false"}, Why: "runs in the foreground only"}},
	Nested:  map[string]*Fields{"opts": {Refused: map[string]string{"deep": "no"}}},
}

type keysBody struct {
	Model string `json:"model"`
	N     int    `json:"n"`
	Opts  *struct {
		Include bool `json:"include"`
	} `json:"opts"`
}

// slowFields is checkFields' full pass alone (the one that names the
// offender), for comparing the walk with.
func slowFields(b []byte) *Error {
	top, ok := objectMembers(b)
	if !ok {
		top = nil
		if err := json.Unmarshal(b, &top); err != nil {
			return syntaxError(b)
		}
	}
	known := jsonFields(reflect.TypeOf(keysBody{}))
	if e := unknownKeys(top, known, keysFields, ""); e != nil {
		return e
	}
	if raw, ok := top["opts"]; ok && !isNull(raw) {
		sub, ok := objectMembers(raw)
		if !ok {
			if json.Unmarshal(raw, &sub) != nil {
				return nil
			}
		}
		return unknownKeys(sub, jsonFields(known["opts"]), keysFields.Nested["opts"], "opts.")
	}
	return nil
}

// Pins: the allocation-free walk passes a body only when the full pass
// finds nothing to refuse, and passes the ordinary clean bodies (so the
// full pass is the exception).
func TestKeysCleanAgreesWithTheFullPass(t *testing.T) {
	known := jsonFields(reflect.TypeOf(keysBody{}))
	for _, c := range []struct {
		in    string
		clean bool // keysClean must pass it
	}{
		{`{}`, true},
		{`{"model":"m","n":1}`, true},
		{`{"model":"m","user":"u"}`, true},
		{`{"suffix":null}`, true},
		{`{"suffix":"x"}`, false},
		{`{"background":false}`, true},
		{`{"background":true}`, false},
		{`{"background":null}`, true},
		{`{"what":1}`, false},
		{`{"opts":{"include":true}}`, true},
		{`{"opts":{"deep":1}}`, false},
		{`{"opts":{"deep":null}}`, true},
		{`{"opts":null}`, true},
		{`{"opts":{"other":1}}`, false},
		{`{"model":"a","model":"b"}`, true},
		{`{"suffix":"x","suffix":null}`, false}, // the full pass decides: last value wins there
		{`{"k\u0065y":1}`, false},               // escaped key: the walk declines
	} {
		got := keysClean([]byte(c.in), known, keysFields)
		if got != c.clean {
			t.Errorf("%s: keysClean %v, want %v", c.in, got, c.clean)
		}
		if got && slowFields([]byte(c.in)) != nil {
			t.Errorf("%s: keysClean passed what the full pass refuses: %v", c.in, slowFields([]byte(c.in)))
		}
	}
	b := []byte(`{"model":"m","n":2,"user":"u","opts":{"include":true}}`)
	if n := testing.AllocsPerRun(100, func() { keysClean(b, known, keysFields) }); n != 0 {
		t.Errorf("keysClean allocates %.0f times per clean body, want 0", n)
	}
}

// FuzzKeysClean: whatever the body, keysClean never passes what the full
// pass refuses.
func FuzzKeysClean(f *testing.F) {
	for _, s := range []string{`{}`, `{"model":"m"}`, `{"suffix":"x"}`, `{"opts":{"deep":1}}`, `{"background":true}`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	known := jsonFields(reflect.TypeOf(keysBody{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var v keysBody
		if json.Unmarshal(b, &v) != nil {
			return // checkFields runs only after a good struct decode
		}
		if keysClean(b, known, keysFields) && slowFields(b) != nil {
			t.Fatalf("%q: keysClean passed what the full pass refuses: %v", b, slowFields(b))
		}
	})
}
