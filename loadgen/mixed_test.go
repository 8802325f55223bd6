package loadgen

import (
	"slices"
	"strings"
	"testing"
)

// The mixed dataset: the long share of the requests are RAG prompts of
// their length, each unique; the rest are chat turns after one of the
// shared system prompts, in conversations of the turns asked for; every
// prompt says its class; reproducible from the seed and shuffled.
func TestMixed(t *testing.T) {
	o := MixedOptions{N: 100, LongShare: 0.3, SystemPrompts: 2, SystemPromptLen: 30, ChatLen: 10, ChatOutputLen: 7,
		ChatTurns: 1, RAGLen: 400, RAGOutputLen: 9, RangeRatio: 1, Seed: 4}
	ps, err := Mixed(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 100 {
		t.Fatalf("%d prompts, want 100", len(ps))
	}
	systems := map[string]bool{}
	rags := map[string]bool{}
	firstRAG := -1
	for i, p := range ps {
		switch p.Class {
		case ClassRAG:
			if firstRAG < 0 {
				firstRAG = i
			}
			if len(p.IDs) != 400 || p.InputLen != 400 || p.OutputLen != 9 || len(strings.Fields(p.Text)) != 400 || len(p.Turns) != 0 {
				t.Fatalf("rag prompt %d: %d ids, output %d, %d words", i, len(p.IDs), p.OutputLen, len(strings.Fields(p.Text)))
			}
			rags[p.Text] = true
		case ClassChat:
			sys, q, ok := strings.Cut(p.Text, "\n\n")
			if !ok || len(strings.Fields(sys)) != 30 || len(strings.Fields(q)) != 10 || len(p.IDs) != 30+1+10 || p.OutputLen != 7 {
				t.Fatalf("chat prompt %d: %q", i, p.Text)
			}
			systems[sys] = true
		default:
			t.Fatalf("prompt %d has class %q", i, p.Class)
		}
	}
	if len(rags) != 30 {
		t.Errorf("%d distinct RAG prompts, want 30", len(rags))
	}
	if len(systems) != 2 {
		t.Errorf("%d system prompts, want 2", len(systems))
	}
	if firstRAG > 50 {
		t.Errorf("not shuffled: the first RAG prompt is request %d", firstRAG)
	}
	again, _ := Mixed(o)
	if !slices.EqualFunc(ps, again, func(a, b Prompt) bool { return a.Text == b.Text && slices.Equal(a.IDs, b.IDs) }) {
		t.Fatal("not reproducible from the seed")
	}

	// Conversations: 70 chat requests in conversations of 3 turns (the
	// last of one turn), every turn counted in N.
	o.ChatTurns = 3
	ps, err = Mixed(o)
	if err != nil {
		t.Fatal(err)
	}
	chat, convs, rag := 0, 0, 0
	for _, p := range ps {
		switch p.Class {
		case ClassChat:
			convs++
			chat += 1 + len(p.Turns)
			for _, tr := range p.Turns {
				if len(tr.IDs) != 10 || tr.OutputLen != 7 {
					t.Fatalf("turn %+v", tr)
				}
			}
		case ClassRAG:
			rag++
		}
	}
	if chat != 70 || rag != 30 || convs != 24 {
		t.Fatalf("%d chat requests in %d conversations and %d RAG, want 70 in 24 and 30", chat, convs, rag)
	}

	for _, bad := range []MixedOptions{
		{N: 0, LongShare: 0.3, SystemPrompts: 1, SystemPromptLen: 1, ChatLen: 1, ChatOutputLen: 1, ChatTurns: 1, RAGLen: 1, RAGOutputLen: 1, RangeRatio: 1},
		{N: 10, LongShare: 1.5, SystemPrompts: 1, SystemPromptLen: 1, ChatLen: 1, ChatOutputLen: 1, ChatTurns: 1, RAGLen: 1, RAGOutputLen: 1, RangeRatio: 1},
		{N: 10, LongShare: 0.3, SystemPrompts: 0, SystemPromptLen: 1, ChatLen: 1, ChatOutputLen: 1, ChatTurns: 1, RAGLen: 1, RAGOutputLen: 1, RangeRatio: 1},
		{N: 10, LongShare: 0.3, SystemPrompts: 1, SystemPromptLen: 1, ChatLen: 1, ChatOutputLen: 1, ChatTurns: 0, RAGLen: 1, RAGOutputLen: 1, RangeRatio: 1},
		{N: 10, LongShare: 0.3, SystemPrompts: 1, SystemPromptLen: 1, ChatLen: 1, ChatOutputLen: 1, ChatTurns: 1, RAGLen: 0, RAGOutputLen: 1, RangeRatio: 1},
		{N: 10, LongShare: 0.3, SystemPrompts: 1, SystemPromptLen: 1, ChatLen: 1, ChatOutputLen: 1, ChatTurns: 1, RAGLen: 1, RAGOutputLen: 1, RangeRatio: 0},
	} {
		if _, err := Mixed(bad); err == nil || !strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: error %v should name the flag", bad, err)
		}
	}
}

// A share of 0 or 1 gives only one class.
func TestMixedEdgeShares(t *testing.T) {
	base := MixedOptions{N: 10, SystemPrompts: 1, SystemPromptLen: 5, ChatLen: 2, ChatOutputLen: 1, ChatTurns: 1, RAGLen: 20, RAGOutputLen: 1, RangeRatio: 1}
	for share, want := range map[float64]string{0: ClassChat, 1: ClassRAG} {
		o := base
		o.LongShare = share
		ps, err := Mixed(o)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Class != want {
				t.Fatalf("share %g: a %s prompt", share, p.Class)
			}
		}
	}
}

// With a token counter, text is built to the budget on that tokenizer:
// a counter that charges a word (with its leading space, as a byte-level
// BPE does) a token per three letters gives texts that cost exactly what
// was asked.
func TestTextToTokenBudget(t *testing.T) {
	count := func(s string) int {
		n := 0
		for _, w := range strings.Fields(s) {
			n += (len(w) + 2) / 3
		}
		return n
	}
	ps, err := Random(RandomOptions{N: 50, InputLen: 37, OutputLen: 1, RangeRatio: 0.5, Seed: 2, Count: count})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		if got := count(p.Text); got != p.InputLen || len(p.IDs) != p.InputLen {
			t.Fatalf("prompt %d: text costs %d tokens, %d ids, want %d", i, got, len(p.IDs), p.InputLen)
		}
		if len(strings.Fields(p.Text)) >= p.InputLen {
			t.Fatalf("prompt %d: %d words for %d tokens: words were counted, not tokens", i, len(strings.Fields(p.Text)), p.InputLen)
		}
	}
	// Without a counter a word is a token, as before.
	ps, _ = Random(RandomOptions{N: 5, InputLen: 37, OutputLen: 1, Seed: 2})
	for _, p := range ps {
		if len(strings.Fields(p.Text)) != 37 {
			t.Fatalf("%d words, want 37", len(strings.Fields(p.Text)))
		}
	}
}
