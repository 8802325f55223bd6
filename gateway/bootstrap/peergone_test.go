package bootstrap

import (
	"context"
	"errors"
	"testing"
	"time"
)

// FetchEmbeddingFrom fails fast with ErrPeerGone when the encode rank's
// endpoint stops answering or started after the request arrived; it
// fetches normally from the endpoint it expected; plain FetchEmbedding
// still polls through refused connections until its deadline.
func TestFetchEmbeddingFromFailsFastWhenPeerGone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	arrivedEarly := time.Now()
	ts := NewTransferServer()
	if err := ts.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ts.Close() })
	start := time.Now()
	if _, err := FetchEmbeddingFrom(ctx, ts.Addr(), 1, arrivedEarly); !errors.Is(err, ErrPeerGone) {
		t.Fatalf("endpoint started after the request: %v", err)
	}

	arrived := time.Now()
	want := Embedding{Room: 2, Rid: "enc", Tokens: 1, Hidden: 2, Values: []float32{1, 2}}
	go func() { _ = ts.SendEmbedding(ctx, want) }()
	if e, err := FetchEmbeddingFrom(ctx, ts.Addr(), 2, arrived); err != nil || e.Rid != "enc" {
		t.Fatalf("expected endpoint: %+v %v", e, err)
	}

	addr := ts.Addr()
	_ = ts.Close()
	if _, err := FetchEmbeddingFrom(ctx, addr, 3, arrived); !errors.Is(err, ErrPeerGone) {
		t.Fatalf("closed endpoint: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %s to notice", el)
	}
	short, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	if _, err := FetchEmbedding(short, addr, 3); !errors.Is(err, ErrTransferTimeout) {
		t.Fatalf("plain fetch from a closed endpoint: %v", err)
	}
}
