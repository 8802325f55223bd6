package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The committed demo tokenizer is what this generator writes; after editing
// corpus.txt or the template, run `go run ./cmd/gendemo`.
func TestCommittedFilesUpToDate(t *testing.T) {
	files, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join("..", "..", "gateway", "tokenizer", "testdata", "demo", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("testdata/demo/%s is stale: re-run gendemo", name)
		}
	}
}
