package openai

import (
	"encoding/json"
	"reflect"
	"testing"
)

// Pins: a message whose content is already one string passes through
// normalizeMessages as sent (no re-encoding), and every message reads
// the same to the template as when setKey rewrote each one.
func TestNormalizeKeepsStringContent(t *testing.T) {
	for _, in := range []string{
		`[{"role":"user","content":"hi"}]`,
		`[{"role": "user",  "content" : "hi \"there\""}]`,
		`[{"content":"first","role":"system"},{"role":"user","content":"a<b & c"}]`,
		`[{"role":"user","content":"say \"content\" twice"}]`,
		`[{"role":"user","content":"A","content":"B"}]`,
		`[{"role":"assistant"}]`, // a user's null content is a 400 (TestOpenAIRefusals)
		`[{"role":"assistant","content":null}]`,
		`[{"role":"user","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]}]`,
		`[{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}]`,
	} {
		got, _, e := normalizeMessages(json.RawMessage(in))
		if e != nil {
			t.Fatalf("%s: %v", in, e)
		}
		// What normalizeMessages gave before it kept string content: every
		// message through setKey.
		var msgs []json.RawMessage
		if err := json.Unmarshal([]byte(in), &msgs); err != nil {
			t.Fatal(err)
		}
		var want []any
		for i, m := range msgs {
			var head struct {
				Content json.RawMessage `json:"content"`
			}
			_ = json.Unmarshal(m, &head)
			c, _, e := messageContent(head.Content, i)
			if e != nil {
				t.Fatal(e)
			}
			nm, err := setKey(m, "content", c)
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := json.Unmarshal(nm, &v); err != nil {
				t.Fatal(err)
			}
			want = append(want, v)
		}
		var have []any
		if err := json.Unmarshal(got, &have); err != nil {
			t.Fatalf("%s: normalized %s: %v", in, got, err)
		}
		if !reflect.DeepEqual(have, want) {
			t.Errorf("%s: normalized to %s, want the same values as %v", in, got, want)
		}
	}
	if got, _, _ := normalizeMessages(json.RawMessage(`[{"role": "user",  "content" : "hi"}]`)); string(got) != `[{"role": "user",  "content" : "hi"}]` {
		t.Errorf("string content re-encoded: %s", got)
	}
}
