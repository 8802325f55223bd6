package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/profiles"
)

func testFacts() profiles.HostFacts {
	return profiles.HostFacts{RunDir: "/run/tsd-test/run", LogDir: "/run/tsd-test/logs", UID: 1000}
}

// shellWords splits a POSIX shell line (bare words, single quotes, double
// quotes, backslashes) the way sh would before running it.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	in := false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == ' ' || c == '\t':
			if in {
				words, in = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			in = true
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				t.Fatalf("unterminated quote: %s", line)
			}
			cur.WriteString(line[i+1 : i+1+j])
			i, in = i+j+1, true
		case c == '"':
			for i++; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte("$`\"\\", line[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(line[i])
			}
			in = true
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// Pins: `tsd plan profiles/examples/1e1p2d.yaml` prints, for every role, a
// command line that a shell splits back into exactly the planned env and
// argv.
func TestPlanPrintsPasteableCommands(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "..", "profiles", "examples", "1e1p2d.yaml")
	var out, errOut bytes.Buffer
	if err := (planCmd{Profile: path}).run(&out, &errOut, testFacts()); err != nil {
		t.Fatal(err)
	}
	_, plan, errs := profiles.LoadPlan(path, testFacts())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	lines := strings.Split(out.String(), "\n")
	seen := 0
	for i, l := range lines {
		if !strings.HasPrefix(l, "role ") {
			continue
		}
		name := strings.Fields(l)[1]
		r, ok := plan.Role(name)
		if !ok {
			t.Fatalf("printed unknown role %s", name)
		}
		words := shellWords(t, strings.TrimSpace(lines[i+1]))
		env := map[string]string{}
		j := 0
		for ; j < len(words); j++ {
			k, v, ok := strings.Cut(words[j], "=")
			if !ok || strings.HasPrefix(k, "-") {
				break
			}
			env[k] = v
		}
		if !reflect.DeepEqual(env, r.Env) {
			t.Errorf("%s env from printed line:\n got %v\nwant %v", name, env, r.Env)
		}
		if !reflect.DeepEqual(words[j:], r.Argv) {
			t.Errorf("%s argv from printed line:\n got %q\nwant %q", name, words[j:], r.Argv)
		}
		seen++
	}
	if seen != 4 {
		t.Errorf("printed %d role blocks, want 4:\n%s", seen, out.String())
	}
	for _, want := range []string{"gateway\n", "mode:       epd", "decode-1     decode   handshake tcp://127.0.0.1:", "ipc:///run/tsd-test/run/decode-1-out.sock"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errOut.String(), "warning: ") || !strings.Contains(errOut.String(), "33000") {
		t.Errorf("expected port warnings on stderr, got %q", errOut.String())
	}
}

// Pins: a remote role's block says where to run it, and --json is the plan.
func TestPlanRemoteAndJSON(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "..", "profiles", "examples", "seed-pd.yaml")
	var out, errOut bytes.Buffer
	if err := (planCmd{Profile: path}).run(&out, &errOut, testFacts()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "role decode (decode, GPUs 0,1) run this on decode-host:") {
		t.Errorf("remote role not marked:\n%s", out.String())
	}
	out.Reset()
	if err := (planCmd{Profile: path, JSON: true}).run(&out, &errOut, testFacts()); err != nil {
		t.Fatal(err)
	}
	var plan profiles.Plan
	if err := json.Unmarshal(out.Bytes(), &plan); err != nil {
		t.Fatalf("--json output is not a plan: %v", err)
	}
	if len(plan.Roles) != 2 || plan.Roles[0].Argv[5] != "--tp" || !strings.Contains(out.String(), `"--model",`+"\n"+`        "<model>"`) {
		t.Errorf("unexpected JSON plan:\n%s", out.String())
	}
}

// Pins: validate says ok for a good profile, and exits 1 listing every
// error of a bad one.
func TestValidate(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	good := filepath.Join("..", "..", "profiles", "examples", "demo.yaml")
	if err := (validateCmd{Profile: good}).run(&out, &errOut, testFacts(), profiles.PreflightEnv{}); err != nil || out.String() != "ok: 2 engines (1 prefill, 1 decode), disaggregation always\n" {
		t.Fatalf("good profile: %v %q", err, out.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	src := "model: m\nroles:\n  - {name: prefill, gpus: [0], tp: 2}\n  - {name: decode, gpus: [1], workr: x}\n"
	if err := os.WriteFile(bad, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	err := (validateCmd{Profile: bad}).run(&out, &errOut, testFacts(), profiles.PreflightEnv{})
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("bad profile: %v", err)
	}
	for _, want := range []string{"bad.yaml:3:21: roles[0].gpus", "bad.yaml:4:31: roles[1].workr: unknown key (did you mean \"worker\"?)", "2 errors"} {
		if !strings.Contains(ee.msg, want) {
			t.Errorf("message lacks %q:\n%s", want, ee.msg)
		}
	}
	// --preflight turns host problems into exit 1.
	env := profiles.PreflightEnv{LookPath: func(string) (string, error) { return "", errors.New("no") }}
	err = (validateCmd{Profile: good, Preflight: true}).run(&out, &errOut, testFacts(), env)
	if !errors.As(err, &ee) || !strings.Contains(ee.msg, `engine command "ts-fake" not found`) {
		t.Errorf("preflight: %v", err)
	}
}

// Pins: validate refuses a model folder that does not exist, a tokenizer
// that is no local folder or does not load, each at its key's line; and
// --no-model-files skips those checks.
func TestValidateModelFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	roles := "roles:\n  - {name: prefill, gpus: [0]}\n  - {name: decode, gpus: [1]}\n"
	for _, c := range []struct{ name, src, want string }{
		{"missing model", "model: ./nope\n" + roles, "p.yaml:1:1: model: " + filepath.Join(dir, "nope") + " does not exist"},
		{"model id without tokenizer", "model: Qwen/Qwen3-8B\n" + roles, `p.yaml:1:1: model: "Qwen/Qwen3-8B" is not a local folder`},
		{"tokenizer missing", "model: Qwen/Qwen3-8B\ntokenizer: ./tok\n" + roles, "p.yaml:2:1: tokenizer: tokenizer does not load"},
		{"tokenizer empty", "model: ./empty\n" + roles, "p.yaml:1:1: model: tokenizer does not load, so the OpenAI API would be off"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sub := t.TempDir()
			if err := os.Mkdir(filepath.Join(sub, "empty"), 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(sub, "p.yaml")
			if err := os.WriteFile(path, []byte(c.src), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			err := (validateCmd{Profile: path}).run(&out, &errOut, testFacts(), profiles.PreflightEnv{})
			want := strings.ReplaceAll(c.want, dir, sub)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want %q", err, want)
			}
			if err := (validateCmd{Profile: path, NoModelDirs: true}).run(&out, &errOut, testFacts(), profiles.PreflightEnv{}); err != nil {
				t.Fatalf("--no-model-files: %v", err)
			}
		})
	}
}

// Pins: validate warns that a remote role's lane is
// unauthenticated (nothing ties its connections to a process tsd owns).
func TestValidateWarnsRemoteLane(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	p := filepath.Join("..", "..", "profiles", "examples", "seed-epd.yaml")
	if err := (validateCmd{Profile: p, NoModelDirs: true}).run(&out, &errOut, testFacts(), profiles.PreflightEnv{}); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if !strings.Contains(errOut.String(), "runs on another host: its lane (handshake, input, output sockets) is unauthenticated") {
		t.Fatalf("no remote-lane warning:\n%s", errOut.String())
	}
}

// Pins: `tsd plan` shows where a kv_aware prefill publishes its KV events
// (per DP rank, and its replay sockets), and its pasteable command
// carries the --kv-events-config JSON intact.
func TestPlanShowsKVEvents(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "kv.yaml")
	if err := os.WriteFile(prof, []byte("model: /m\ngateway: {policy: {prefill: kv_aware}}\nroles:\n  - {name: prefill, gpus: [0, 1], dp: 2}\n  - {name: decode, gpus: [2]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, plan, errs := profiles.LoadPlan(prof, testFacts())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var b bytes.Buffer
	if err := renderPlan(&b, plan); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "  kv events:  tcp://127.0.0.1:9100 tcp://127.0.0.1:9101, replay tcp://127.0.0.1:9102 tcp://127.0.0.1:9103\n") {
		t.Fatalf("plan output lacks the kv events line:\n%s", out)
	}
	pf, _ := plan.Role("prefill")
	words := shellWords(t, pf.CommandLine())
	i := slices.Index(words, "--kv-events-config")
	if i < 0 || i+1 >= len(words) || words[i+1] != pf.KVEvents.Config {
		t.Fatalf("command line %q does not carry the config %s", pf.CommandLine(), pf.KVEvents.Config)
	}
}

// Pins: every shipped example passes `tsd validate` (its summary naming
// the kinds it runs and how requests split) and `tsd plan` (a block per
// role naming its kind, the gateway's policy per kind present), the layout
// examples with the shapes their names promise.
func TestExamplesValidateAndPlan(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "..", "profiles", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	layouts := map[string]string{
		"agg-4.yaml":             "ok: 4 engines (4 aggregated), disaggregation never\n",
		"pd-1p3d.yaml":           "ok: 4 engines (1 prefill, 3 decode), disaggregation always\n",
		"pd-2p2d.yaml":           "ok: 4 engines (2 prefill, 2 decode), disaggregation always\n",
		"mixed-conditional.yaml": "ok: 4 engines (1 prefill, 1 decode, 2 aggregated), disaggregation conditional\n",
		"1e1p2d.yaml":            "ok: 4 engines (1 encode, 1 prefill, 2 decode), disaggregation always\n",
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			if err := (validateCmd{Profile: f, NoModelDirs: true}).run(&out, &errOut, testFacts(), profiles.PreflightEnv{}); err != nil || !strings.HasPrefix(out.String(), "ok: ") {
				t.Fatalf("validate: %v %q", err, out.String())
			}
			if want, ok := layouts[name]; ok && out.String() != want {
				t.Errorf("validate says %q, want %q", out.String(), want)
			}
			out.Reset()
			if err := (planCmd{Profile: f}).run(&out, &errOut, testFacts()); err != nil {
				t.Fatalf("plan: %v", err)
			}
			_, plan, errs := profiles.LoadPlan(f, testFacts())
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			for _, r := range plan.Roles {
				if !strings.Contains(out.String(), "\nrole "+r.Name+" ("+r.Kind+", ") {
					t.Errorf("plan output lacks role %s's kind %s:\n%s", r.Name, r.Kind, out.String())
				}
				if k, _ := profiles.KindOf(r.Kind); !strings.Contains(out.String(), " "+r.Kind+"="+k.PolicyOf(plan.Gateway.Policy)) {
					t.Errorf("plan output lacks the %s policy", r.Kind)
				}
			}
		})
	}
}

// Pins: `tsd plan` of a profile with gateway.tracing says where traces go
// and how many, and names the headers' variable, never its value.
func TestPlanShowsTracing(t *testing.T) {
	t.Setenv("TSD_TEST_PLAN_OTEL", "Authorization=Bearer%20s3cret")
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "..", "profiles", "examples", "seed-pd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(src), "gateway:\n", "gateway:\n  tracing: {endpoint: \"http://127.0.0.1:4318\", sample_ratio: 0.25, headers_env: TSD_TEST_PLAN_OTEL}\n", 1)
	if text == string(src) {
		t.Fatal("the example has no gateway section to add tracing to")
	}
	path := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := (planCmd{Profile: path}).run(&out, &errOut, testFacts()); err != nil {
		t.Fatal(err)
	}
	want := "  tracing:    OTLP/HTTP to http://127.0.0.1:4318/v1/traces, 25% of requests sampled (a client's traceparent decides for its own), headers from $TSD_TEST_PLAN_OTEL\n"
	if !strings.Contains(out.String(), want) || strings.Contains(out.String()+errOut.String(), "s3cret") {
		t.Errorf("plan output lacks %q or shows the header's value:\n%s", want, out.String())
	}
}
