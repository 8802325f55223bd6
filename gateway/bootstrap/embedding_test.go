package bootstrap

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An embedding and a KV offered under the same room are separate
// transfers; a fetch parked before the offer gets it; a fetch of a room
// nobody offers times out with ErrTransferTimeout.
func TestEmbeddingTransfer(t *testing.T) {
	t.Parallel()
	ts := NewTransferServer()
	if err := ts.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ts.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan Embedding, 1)
	errc := make(chan error, 2)
	go func() {
		e, err := FetchEmbedding(ctx, ts.Addr(), 7)
		if err != nil {
			errc <- err
			return
		}
		got <- e
	}()
	go func() { errc <- ts.Send(ctx, KV{Room: 7, Rid: "kv", FirstToken: 3}) }()
	want := Embedding{Room: 7, Rid: "enc", Tokens: 2, Hidden: 2, Values: []float32{1, 2, 3, 4}}
	if err := ts.SendEmbedding(ctx, want); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		if e.Rid != "enc" || e.Tokens != 2 || len(e.Values) != 4 || e.Values[3] != 4 {
			t.Fatalf("embedding %+v", e)
		}
	case err := <-errc:
		t.Fatal(err)
	}
	kv, err := Fetch(ctx, ts.Addr(), 7)
	if err != nil || kv.Rid != "kv" {
		t.Fatalf("KV under the same room: %+v %v", kv, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	if _, err := FetchEmbedding(short, ts.Addr(), 8); !errors.Is(err, ErrTransferTimeout) {
		t.Fatalf("missing embedding: %v", err)
	}
}

// FetchEmbedding waits for room's embedding at the encode rank addr until
// ctx ends, like Fetch.
func FetchEmbedding(ctx context.Context, addr RankAddr, room uint64) (Embedding, error) {
	var e Embedding
	err := fetch(ctx, addr, slotKey{kindEmbedding, room}, &e, fetchOpts{})
	return e, err
}
