package generate

import (
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/front"
)

// The byte-level pre-check refuses a text that cannot fit before the
// tokenizer sees it.
func TestGenerateTextBytePrecheck(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("a", 16*front.MaxBytesPerToken+1)
	b := generateBody{Text: &text}
	called := false
	_, err := b.toRequest(func(string) ([]int32, error) { called = true; return []int32{1}, nil }, 16)
	re, ok := err.(*front.Error)
	if !ok || re.Code != "context_length_exceeded" || re.Param != "text" || called {
		t.Fatalf("%v (tokenizer called: %v)", err, called)
	}
	if _, err := b.toRequest(nil, 0); err == nil || !strings.Contains(err.Error(), "tokenizer") {
		t.Fatalf("no tokenizer: %v", err)
	}
}
