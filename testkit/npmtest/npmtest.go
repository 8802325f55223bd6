// Package npmtest installs npm packages for tests that run real JavaScript
// clients against tsd: once per content into the shared test cache
// (testcache.Dir()), under a lock, never into the repository. A test
// skips, saying why, when node or npm is missing or the install fails
// (registry unreachable).
package npmtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/tokenizer/testcache"
)

// installTimeout bounds one npm run; a first install of the client set
// takes about half a minute on a warm registry.
const installTimeout = 5 * time.Minute

// doneMarker is written after npm succeeded, so an install cut short
// (timeout, kill) is redone instead of being taken for a complete one.
const doneMarker = ".tsd-installed"

// NeedNode skips the test unless node and npm are on PATH, and returns
// the path of node.
func NeedNode(tb testing.TB) string {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		tb.Skip("skipping: node is not installed")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		tb.Skip("skipping: npm is not installed")
	}
	return node
}

// NeedNodeMajor skips the test unless node is at least version major
// (clients use the built-in fetch and newer language features).
func NeedNodeMajor(tb testing.TB, major int) {
	tb.Helper()
	node := NeedNode(tb)
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		tb.Skipf("skipping: node --version: %v", err)
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	got, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if err != nil {
		tb.Skipf("skipping: node --version said %q", out)
	}
	if got < major {
		tb.Skipf("skipping: node %s is older than %d", v, major)
	}
}

// Packages installs specs (e.g. "openai@5") with `npm install` into
// testcache.Dir()/name and returns that directory (the one holding
// node_modules). The specs are part of the cache key, so changing them
// installs afresh.
func Packages(tb testing.TB, name string, specs ...string) string {
	tb.Helper()
	manifest := fmt.Sprintf(`{"name":"tsd-%s","private":true}`, name)
	key := hash([]byte(strings.Join(specs, "\n")))
	return install(tb, name, key, map[string][]byte{"package.json": []byte(manifest)},
		append([]string{"install", "--no-audit", "--no-fund"}, specs...))
}

// Project installs the npm project in srcDir (its package.json, and
// package-lock.json and .npmrc when present) into the test cache and
// returns the directory holding its node_modules. With a lock file it
// runs `npm ci`, so every transitive version is the committed one. The
// files' content is the cache key: editing them installs afresh.
func Project(tb testing.TB, name, srcDir string) string {
	tb.Helper()
	files := map[string][]byte{}
	var all []byte
	for _, f := range []string{"package.json", "package-lock.json", ".npmrc"} {
		b, err := os.ReadFile(filepath.Join(srcDir, f))
		if err != nil {
			if f == "package.json" {
				tb.Fatalf("npm project %s: %v", srcDir, err)
			}
			continue
		}
		files[f] = b
		all = append(append(all, f...), b...)
	}
	args := []string{"install", "--no-audit", "--no-fund"}
	if _, ok := files["package-lock.json"]; ok {
		args = []string{"ci", "--no-audit", "--no-fund"}
	}
	return install(tb, name, hash(all), files, args)
}

func hash(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:6])
}

// install fills testcache.Dir()/name-key with files and runs npm args
// there, unless a complete install is already in place.
func install(tb testing.TB, name, key string, files map[string][]byte, args []string) string {
	tb.Helper()
	NeedNode(tb)
	npm, _ := exec.LookPath("npm")
	dir := filepath.Join(testcache.Dir(), "npm-"+name+"-"+key)
	done := filepath.Join(dir, doneMarker)
	if _, err := os.Stat(done); err == nil {
		return dir
	}
	unlock := testcache.Lock(tb, "npm-"+name)
	defer unlock()
	if _, err := os.Stat(done); err == nil {
		return dir
	}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Skipf("skipping: test cache: %v", err)
	}
	for f, b := range files {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			tb.Skipf("skipping: test cache: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, args...)
	cmd.Dir = dir
	// The cache's own npm settings, not the caller's: no progress bars,
	// no update notice; .npmrc in dir still applies.
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false", "npm_config_progress=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		if unreachable(string(out)) || ctx.Err() != nil {
			tb.Skipf("skipping: npm %s in %s: registry unreachable: %v\n%s", strings.Join(args, " "), dir, err, tail(out))
		}
		tb.Fatalf("npm %s in %s: %v\n%s", strings.Join(args, " "), dir, err, tail(out))
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		tb.Skipf("skipping: test cache: %v", err)
	}
	return dir
}

// unreachable says whether npm failed for want of the registry (which
// skips) rather than for the project (which fails the test).
func unreachable(out string) bool {
	for _, s := range []string{"ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENETUNREACH", "EHOSTUNREACH", "network", "socket hang up", "self-signed certificate", "UNABLE_TO_GET_ISSUER_CERT"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
