package openai

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/tokenizer"
)

// Pins: chat and completions prompts are encoded through the tokenizer
// cache the Server is given, and the engine gets the ids the tokenizer
// gives without it, hit or miss; a cache in front of another tokenizer is
// not used.
func TestPromptsThroughTokenizerCache(t *testing.T) {
	tk := demoTokenizer(t)
	cache := tokenizer.NewCache(tk, 1<<20)
	eng := newFake(tk, "ok")
	srv := newTestServer(t, eng, Options{TokenizerCache: cache})
	sys := strings.Repeat("Answer in one line and name the file you read. ", 4)
	chat := `{"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"Q"}],"max_tokens":1}`
	for _, q := range []string{"hi", "hi", "other"} {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(strings.Replace(chat, `"Q"`, `"`+q+`"`, 1)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("chat %q: %d", q, resp.StatusCode)
		}
	}
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"plain text prompt","max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	st := cache.Stats()
	if st.L0Hits != 1 || st.L1Hits != 1 || st.Misses != 2 {
		t.Errorf("cache stats %+v: want 1 L0 hit, 1 L1 hit, 2 misses", st)
	}
	reqs := eng.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests reached the engine, want 4", len(reqs))
	}
	if !slices.Equal(reqs[0].InputIDs, reqs[1].InputIDs) {
		t.Errorf("an L0 hit sent other ids:\n %v\n %v", reqs[1].InputIDs, reqs[0].InputIDs)
	}
	want, _ := tk.Encode("plain text prompt", true)
	if !slices.Equal(reqs[3].InputIDs, want) {
		t.Errorf("completion ids %v, want %v", reqs[3].InputIDs, want)
	}

	// A cache of another tokenizer is ignored: prompts encode uncached.
	other := tokenizer.NewCache(demoTokenizer(t), 1<<20)
	eng2 := newFake(tk, "ok")
	srv2 := newTestServer(t, eng2, Options{TokenizerCache: other})
	resp, err = http.Post(srv2.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"plain text prompt","max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s := other.Stats(); s.L0Hits+s.L1Hits+s.Misses != 0 {
		t.Errorf("a cache of another tokenizer was used: %+v", s)
	}
}

// Pins: a chat served from the render level of the tokenizer cache (the
// same messages, tools, kwargs and add_generation_prompt seen before)
// sends the engine the very ids an uncached server sends, for chats with
// a system prompt, tools, tool calls and results, text content-part
// arrays, chat_template_kwargs and add_generation_prompt false; and a
// change of any of those inputs is a new entry, not a wrong hit.
func TestChatRenderCacheParity(t *testing.T) {
	tk := demoTokenizer(t)
	const tools = `"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}]`
	chats := []string{
		`"messages":[{"role":"user","content":"hello there"}]`,
		`"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}]`,
		`"messages":[{"role":"user","content":"read a.go"}],` + tools,
		`"messages":[{"role":"user","content":"read a.go"}],` + tools + `,"tool_choice":"none"`,
		`"messages":[{"role":"user","content":"read a.go"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.go\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"package a"}],` + tools,
		`"messages":[{"role":"user","content":[{"type":"text","text":"first part"},{"type":"text","text":"second part"}]}]`,
		`"messages":[{"role":"user","content":[{"type":"input_text","text":"first part"}]}]`,
		`"messages":[{"role":"user","content":"hello there"}],"chat_template_kwargs":{"enable_thinking":false}`,
		`"messages":[{"role":"user","content":"hello there"}],"add_generation_prompt":false`,
		`"messages":[{"role":"user","content":"hello there"},{"role":"assistant","content":"hi"}],"add_generation_prompt":false`,
	}
	post := func(url, chat string) {
		t.Helper()
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"max_tokens":1,`+chat+`}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", chat, resp.StatusCode)
		}
	}
	plain := newFake(tk, "ok")
	plainSrv := newTestServer(t, plain, Options{})
	cache := tokenizer.NewCache(tk, 1<<20)
	cached := newFake(tk, "ok")
	cachedSrv := newTestServer(t, cached, Options{TokenizerCache: cache})
	for _, c := range chats {
		post(plainSrv.URL, c)
		post(cachedSrv.URL, c) // stored
		post(cachedSrv.URL, c) // served from the render level
	}
	if st := cache.Stats(); st.RenderHits != uint64(len(chats)) {
		t.Errorf("cache stats %+v: want %d render hits", st, len(chats))
	}
	want, got := plain.requests(), cached.requests()
	if len(want) != len(chats) || len(got) != 2*len(chats) {
		t.Fatalf("%d and %d requests reached the engines, want %d and %d", len(want), len(got), len(chats), 2*len(chats))
	}
	for i, c := range chats {
		for j := range 2 {
			if g := got[2*i+j].InputIDs; !slices.Equal(g, want[i].InputIDs) {
				t.Errorf("%s (pass %d): ids %v, uncached %v", c, j, g, want[i].InputIDs)
			}
		}
	}
}

// Pins: a render entry is a miss once the chat template changed, and a
// template that reads the clock is never stored at the render level.
func TestRenderCacheFollowsTemplate(t *testing.T) {
	tk := demoTokenizer(t)
	c := tokenizer.NewCache(tk, 1<<20)
	key := tokenizer.RenderKey("m", []byte(`[{"role":"user","content":"x"}]`), nil, nil, true)
	c.PutRendered(key, "text", []int32{1, 2})
	if _, ids, ok := c.Rendered(key); !ok || !slices.Equal(ids, []int32{1, 2}) {
		t.Fatalf("stored entry: ok %v ids %v", ok, ids)
	}
	if err := tk.SetChatTemplate("{{ messages[0].content }}"); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.Rendered(key); ok {
		t.Error("an entry of the old template was a hit")
	}
	if err := tk.SetChatTemplate(`{{ strftime_now("%Y") }}{{ messages[0].content }}`); err != nil {
		t.Fatal(err)
	}
	c.PutRendered(key, "text", []int32{1, 2})
	if _, _, ok := c.Rendered(key); ok {
		t.Error("a clock-reading template's render was stored")
	}
}
