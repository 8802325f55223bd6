package npmtest

import "testing"

// A registry that cannot be reached skips; any other npm failure (a lock
// file out of step with package.json, a bad version) fails the test.
func TestUnreachable(t *testing.T) {
	for out, want := range map[string]bool{
		"npm error code ENOTFOUND\nnpm error network request to https://registry.npmjs.org/ai failed": true,
		"npm error code EAI_AGAIN":    true,
		"npm error code ECONNREFUSED": true,
		"npm error code ETIMEDOUT":    true,
		"npm error code EUSAGE\nnpm error `npm ci` can only install packages when your package.json and package-lock.json are in sync": false,
		"npm error code ETARGET\nnpm error notarget No matching version found for ai@99.0.0":                                           false,
	} {
		if got := unreachable(out); got != want {
			t.Errorf("unreachable(%q) = %v, want %v", out, got, want)
		}
	}
}

// The cache key follows the content: another spec or file installs afresh.
func TestHashFollowsContent(t *testing.T) {
	if a1, a2 := hash([]byte("a")), hash([]byte("a")); hash([]byte("openai@5")) == hash([]byte("openai@6")) || a1 != a2 {
		t.Fatal("hash does not follow content")
	}
}
