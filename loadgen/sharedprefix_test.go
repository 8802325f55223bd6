package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// generated-shared-prefix: groups × prompts, each group one system prompt
// its prompts start with (ids and text), its own question after it, the
// lengths asked for, reproducible from the seed, shuffled unless ordered.
func TestGeneratedSharedPrefix(t *testing.T) {
	o := SharedPrefixOptions{NumGroups: 4, PromptsPerGroup: 3, SystemPromptLen: 40, QuestionLen: 8, OutputLen: 5, RangeRatio: 1, NumTurns: 1, Ordered: true, Seed: 7}
	ps, err := GeneratedSharedPrefix(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 12 {
		t.Fatalf("%d prompts, want 12", len(ps))
	}
	for g := range 4 {
		first := ps[g*3]
		sys := first.IDs[:40]
		sysText, _, _ := strings.Cut(first.Text, "\n\n")
		for k := range 3 {
			p := ps[g*3+k]
			if len(p.IDs) != 40+1+8 || p.InputLen != len(p.IDs) || p.OutputLen != 5 || len(p.Turns) != 0 {
				t.Fatalf("prompt %d/%d: %d ids, output %d", g, k, len(p.IDs), p.OutputLen)
			}
			if !slices.Equal(p.IDs[:40], sys) || !strings.HasPrefix(p.Text, sysText+"\n\n") {
				t.Fatalf("group %d prompt %d does not share the system prompt", g, k)
			}
			if k > 0 && slices.Equal(p.IDs, ps[g*3].IDs) {
				t.Fatalf("group %d: two prompts with the same question", g)
			}
		}
		if g > 0 && slices.Equal(ps[(g-1)*3].IDs[:40], sys) {
			t.Fatalf("groups %d and %d share a system prompt", g-1, g)
		}
	}
	again, _ := GeneratedSharedPrefix(o)
	if !slices.EqualFunc(ps, again, func(a, b Prompt) bool { return slices.Equal(a.IDs, b.IDs) && a.Text == b.Text }) {
		t.Fatal("not reproducible from the seed")
	}
	o.Ordered = false
	shuffled, _ := GeneratedSharedPrefix(o)
	if slices.EqualFunc(ps, shuffled, func(a, b Prompt) bool { return slices.Equal(a.IDs, b.IDs) }) {
		t.Fatal("not shuffled")
	}
	// Lengths drawn from [len·r, len]; turns; routing keys per group.
	o = SharedPrefixOptions{NumGroups: 2, PromptsPerGroup: 50, SystemPromptLen: 100, QuestionLen: 20, OutputLen: 10, RangeRatio: 0.5, NumTurns: 3, RoutingKey: true, Ordered: true}
	ps, err = GeneratedSharedPrefix(o)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, p := range ps {
		if p.OutputLen < 5 || p.OutputLen > 10 || len(p.Turns) != 2 || p.RoutingKey == "" {
			t.Fatalf("prompt %+v", p)
		}
		for _, tr := range p.Turns {
			if len(tr.IDs) < 10 || len(tr.IDs) > 20 || tr.Text == "" || tr.OutputLen < 5 || tr.OutputLen > 10 {
				t.Fatalf("turn %+v", tr)
			}
		}
		keys[p.RoutingKey] = true
	}
	if len(keys) != 2 || ps[0].RoutingKey == ps[50].RoutingKey {
		t.Fatalf("routing keys %v", keys)
	}
	for _, bad := range []SharedPrefixOptions{
		{NumGroups: 0, PromptsPerGroup: 1, SystemPromptLen: 1, QuestionLen: 1, OutputLen: 1, RangeRatio: 1, NumTurns: 1},
		{NumGroups: 1, PromptsPerGroup: 1, SystemPromptLen: 1, QuestionLen: 1, OutputLen: 1, RangeRatio: 0, NumTurns: 1},
		{NumGroups: 1, PromptsPerGroup: 1, SystemPromptLen: 1, QuestionLen: 1, OutputLen: 1, RangeRatio: 1, NumTurns: 0},
	} {
		if _, err := GeneratedSharedPrefix(bad); err == nil || !strings.Contains(err.Error(), "--gsp-") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// conversationServer answers each request with its turn number n (from
// how many assistant messages or answers the request carries) and reports
// the cached tokens as the gateway does, recording every body.
type conversationServer struct {
	mu     sync.Mutex
	bodies []map[string]any
	keys   []string
}

func (c *conversationServer) handler(backend Backend) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		c.mu.Lock()
		c.bodies = append(c.bodies, body)
		c.keys = append(c.keys, r.Header.Get("X-SMG-Routing-Key"))
		c.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		switch backend {
		case Chat:
			turn := 0
			for _, m := range body["messages"].([]any) {
				if m.(map[string]any)["role"] == "assistant" {
					turn++
				}
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a%d\"}}]}\n\n", turn)
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\n", 25*turn)
		case Completions:
			turn := strings.Count(body["prompt"].(string), " ANSWER")
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\" ANSWER%d\"}]}\n\n", turn)
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":50}}}\n\n")
		case Generate:
			n := len(body["input_ids"].([]any))
			// As the gateway's /generate: the usage and the finish on the last event.
			fmt.Fprintf(w, "data: {\"output_ids\":[%d],\"meta_info\":{\"prompt_tokens\":%d,\"completion_tokens\":1,\"cached_tokens\":%d},\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":1}}\n\n", 9000+n, n, n/2, n)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
}

// A multi-turn conversation sends turn t with everything before it: the
// earlier questions and the answers they got (chat as messages, the text
// endpoints as one growing prompt, /generate as growing token ids), one
// result per turn; the cached-token share comes from the usage.
func TestRunConversations(t *testing.T) {
	ps, err := GeneratedSharedPrefix(SharedPrefixOptions{NumGroups: 2, PromptsPerGroup: 2, SystemPromptLen: 10, QuestionLen: 3, OutputLen: 1, RangeRatio: 1, NumTurns: 3, RoutingKey: true, Ordered: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range []Backend{Chat, Completions, Generate} {
		t.Run(string(backend), func(t *testing.T) {
			cs := &conversationServer{}
			srv := httptest.NewServer(cs.handler(backend))
			defer srv.Close()
			rs, _, err := Run(context.Background(), Config{BaseURL: srv.URL, Backend: backend, Model: "m", Prompts: ps, MaxConcurrency: 2})
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != 12 {
				t.Fatalf("%d results, want 12 (4 conversations × 3 turns)", len(rs))
			}
			for i, r := range rs {
				if !r.OK || !r.HasCached {
					t.Fatalf("result %d: %+v", i, r)
				}
			}
			// The requests of the first conversation, in order.
			var conv []map[string]any
			var convKeys []string
			for i, b := range cs.bodies {
				before := len(conv)
				switch backend {
				case Chat:
					if strings.HasPrefix(b["messages"].([]any)[0].(map[string]any)["content"].(string), ps[0].Text) {
						conv = append(conv, b)
					}
				case Completions:
					if strings.HasPrefix(b["prompt"].(string), ps[0].Text) {
						conv = append(conv, b)
					}
				case Generate:
					ids := b["input_ids"].([]any)
					if len(ids) >= len(ps[0].IDs) && int32(ids[len(ps[0].IDs)-1].(float64)) == ps[0].IDs[len(ps[0].IDs)-1] && int32(ids[0].(float64)) == ps[0].IDs[0] {
						conv = append(conv, b)
					}
				}
				if len(conv) > before {
					convKeys = append(convKeys, cs.keys[i])
				}
				if len(conv) == 3 {
					break
				}
			}
			if len(conv) != 3 {
				t.Fatalf("found %d requests of the first conversation", len(conv))
			}
			if !slices.Equal(convKeys, []string{ps[0].RoutingKey, ps[0].RoutingKey, ps[0].RoutingKey}) || ps[0].RoutingKey == ps[2].RoutingKey {
				t.Fatalf("routing keys %q: want the group's on every turn", convKeys)
			}
			switch backend {
			case Chat:
				msgs := conv[2]["messages"].([]any)
				if len(msgs) != 5 || msgs[1].(map[string]any)["content"] != "a0" || msgs[3].(map[string]any)["content"] != "a1" ||
					msgs[4].(map[string]any)["content"] != ps[0].Turns[1].Text {
					t.Fatalf("third turn's messages %v", msgs)
				}
			case Completions:
				want := ps[0].Text + " ANSWER0\n\n" + ps[0].Turns[0].Text + " ANSWER1\n\n" + ps[0].Turns[1].Text
				if conv[2]["prompt"] != want {
					t.Fatalf("third turn's prompt %q, want %q", conv[2]["prompt"], want)
				}
			case Generate:
				n0 := len(ps[0].IDs)
				ids := conv[2]["input_ids"].([]any)
				if len(ids) != n0+1+3+1+3 || int(ids[n0].(float64)) != 9000+n0 {
					t.Fatalf("third turn's ids %v", ids)
				}
			}
			s := Summarize(rs, 1)
			if s.CachedTokenShare == nil || *s.CachedTokenShare <= 0 {
				t.Fatalf("no cached-token share: %+v", s)
			}
			if backend == Completions && math.Abs(*s.CachedTokenShare-0.5) > 1e-9 {
				t.Fatalf("share %g, want 0.5", *s.CachedTokenShare)
			}
		})
	}
}

// A turn that fails ends its conversation; the rest are failures unsent.
func TestRunConversationStopsOnFailure(t *testing.T) {
	n := 0
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		if k == 2 {
			http.Error(w, `{"error":{"message":"boom"}}`, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	p := Prompt{Text: "hi", InputLen: 1, OutputLen: 1, Turns: []Turn{{Text: "more", OutputLen: 1}, {Text: "again", OutputLen: 1}}}
	rs, _, err := Run(context.Background(), Config{BaseURL: srv.URL, Backend: Chat, Model: "m", Prompts: []Prompt{p}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 || !rs[0].OK || rs[1].OK || rs[2].OK || !strings.Contains(rs[2].Err, "turn 1 of the conversation failed") {
		t.Fatalf("results %+v", rs)
	}
	if n != 2 {
		t.Fatalf("%d requests sent after the failure", n-2)
	}
}
