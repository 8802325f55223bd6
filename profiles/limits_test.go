package profiles

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Pins: a 200 KB profile of 100k nested `[` is refused with a
// clear error at the offending bracket, in bounded memory (it used to
// take 8.7 GB in the YAML parser).
func TestDeepNestingRefusedCheaply(t *testing.T) {
	src := []byte("model: m\nroles: " + strings.Repeat("[", 100_000) + "\n")
	var errs Errors
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, errs = Parse("deep.yaml", src)
	runtime.ReadMemStats(&after)
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("refusing 100k nested [ allocated %d bytes", got)
	if got > 16<<20 {
		t.Errorf("refusing the file allocated %d bytes; want under 16 MiB", got)
	}
	allocs := testing.AllocsPerRun(5, func() { _, _ = Parse("deep.yaml", src) })
	if allocs > 100 {
		t.Errorf("%.0f allocations per refusal; want a bounded handful", allocs)
	}
	// The top mapping is level 1, so the 64th bracket (column 71) is level 65.
	want := "deep.yaml:2:71: nested deeper than 64 levels"
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), want) {
		t.Errorf("got %v, want %q", errs, want)
	}
}

// Pins: the limits refuse what they must and nothing a profile needs;
// each case names the line:col where the error must point.
func TestLimits(t *testing.T) {
	t.Parallel()
	nestedMaps := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteString(strings.Repeat("  ", i) + "k:\n")
		}
		return b.String()
	}
	for _, c := range []struct {
		name, src string
		pos       string // "" = accepted
	}{
		{"block maps at the limit", nestedMaps(64), ""},
		{"block maps past the limit", nestedMaps(65), ":65:129:"},
		{"dash chain past the limit", "a:\n" + strings.Repeat("- ", 70) + "x\n", ":2:129:"},
		{"flow maps past the limit", "a: " + strings.Repeat("{b: ", 70) + "\n", ":1:256:"},
		{"brackets in quotes and comments do not count", "a: '" + strings.Repeat("[", 200) + "'\nb: \"" + strings.Repeat("{", 200) + "\" # " + strings.Repeat("[", 200) + "\n", ""},
		{"brackets inside a plain scalar do not count", "a: x" + strings.Repeat("[", 200) + "\n", ""},
		{"closed brackets do not add up", "a: " + strings.Repeat("[[]]", 500) + "\n", ""},
	} {
		err := checkLimits("l.yaml", []byte(c.src))
		switch {
		case c.pos == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.pos != "" && err == nil:
			t.Errorf("%s: accepted", c.name)
		case c.pos != "" && !strings.HasPrefix(err.Error(), "l.yaml"+c.pos):
			t.Errorf("%s: %v, want at %s", c.name, err, c.pos)
		}
	}
	// Every example stays far inside both limits.
	// (Only *.yaml: `make demo` leaves its .tsd/ folder beside them.)
	files, _ := filepath.Glob(filepath.Join("examples", "*.yaml"))
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkLimits(name, data); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Pins: a file over 1 MiB is refused by name, without being read whole.
func TestSizeLimit(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "big.yaml")
	big := "model: m\n# " + strings.Repeat("x", MaxProfileBytes) + "\n"
	if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errs := Load(path)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), path+": the file is over the 1048576-byte (1 MiB) limit") {
		t.Errorf("got %v", errs)
	}
	data, err := readProfile(path)
	if err != nil || len(data) != MaxProfileBytes+1 {
		t.Errorf("readProfile read %d bytes (%v), want the cap + 1", len(data), err)
	}
}

// BenchmarkRefuseDeep: refusing the 200 KB file of nested [
// costs microseconds and a few KB, however long the file.
func BenchmarkRefuseDeep(b *testing.B) {
	src := []byte("model: m\nroles: " + strings.Repeat("[", 100_000) + "\n")
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Parse("deep.yaml", src)
	}
}

// BenchmarkScanLimits1MiB: the depth scan of a profile at the size cap
// (a flat file of 1 MiB), the price every load pays before parsing.
func BenchmarkScanLimits1MiB(b *testing.B) {
	line := "  - {name: prefill, gpus: [0, 1], args: [--x, 'y']} # c\n"
	src := []byte(strings.Repeat(line, MaxProfileBytes/len(line)))
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if err := checkLimits("b.yaml", src); err != nil {
			b.Fatal(err)
		}
	}
}
