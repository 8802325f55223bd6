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
