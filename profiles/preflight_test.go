package profiles

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeInfo is an fs.FileInfo for the injected Lstat.
type fakeInfo struct {
	mode fs.FileMode
}

func (f fakeInfo) Name() string       { return "x" }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return f.mode }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fakeInfo) Sys() any           { return nil }

func problemsText(ps []Problem) string {
	var lines []string
	for _, p := range ps {
		lines = append(lines, p.String())
	}
	return strings.Join(lines, "\n")
}

// Pins: preflight reports every problem at once: busy ports with their
// holder, a missing engine command, missing GPUs, unsafe socket
// directories, an unwritable log dir; remote roles' ports are not checked.
func TestPreflightAllProblems(t *testing.T) {
	t.Parallel()
	plan := planExample(t, "seed-pd.yaml") // prefill local, decode remote
	busy := map[int]bool{12580: true, 8000: true, 13580: true}
	env := PreflightEnv{
		PortFree:   func(p int) bool { return !busy[p] },
		PortHolder: func(p int) string { return "pid 42: nc -l " + strconv.Itoa(p) },
		LookPath:   func(string) (string, error) { return "", errors.New("not found") },
		GPUs:       []GPU{{Index: 0, UUID: "GPU-a"}},
		EUID:       1000,
		Lstat: func(path string) (fs.FileInfo, error) {
			if path == "/run/tsd-test/run" {
				return fakeInfo{mode: fs.ModeSymlink | 0o777}, nil
			}
			return nil, fs.ErrNotExist
		},
		Writable: func(dir string) error {
			if dir == "/run/tsd-test/logs" {
				return errors.New("read-only file system")
			}
			return nil
		},
	}
	ps := Preflight(plan, env)
	text := problemsText(ps)
	for _, want := range []string{
		"error: prefill: port 12580 (dist-init cluster port) is in use (held by pid 42: nc -l 12580)",
		"error: gateway: port 8000 (HTTP listener 0.0.0.0:8000) is in use",
		`error: prefill: engine command "ts" not found on PATH`,
		"error: prefill: GPU 1 does not exist on this host (1 GPU(s) found)",
		"control socket directory /run/tsd-test/run: is a symlink",
		"log directory /run/tsd-test/logs: read-only file system",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
	if strings.Contains(text, "13580") {
		t.Errorf("the remote decode's port was checked:\n%s", text)
	}
	if !HasErrors(ps) {
		t.Error("HasErrors = false")
	}

	// A healthy host has no problems; an unknown GPU list is a warning.
	ok := PreflightEnv{PortFree: func(int) bool { return true }, LookPath: func(s string) (string, error) { return "/bin/" + s, nil }}
	ps = Preflight(plan, ok)
	if len(ps) != 1 || ps[0].Severity != SeverityWarning || !strings.Contains(ps[0].Msg, "GPU list unknown") {
		t.Errorf("healthy host: %v", ps)
	}
}

// Pins: the ipc directory rules of docs/protocol.md on a real filesystem:
// another owner's or a symlinked directory is refused, a non-socket file
// where a socket goes is refused, a missing directory is fine.
func TestPreflightSocketDirs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	src := "model: m\nroles:\n  - {name: prefill, gpus: [0]}\n  - {name: decode, gpus: [1]}\n"
	p, errs := Parse(filepath.Join(dir, "p.yaml"), []byte(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	plan, errs := MakePlan(p, HostFacts{RunDir: run, LogDir: filepath.Join(dir, "logs")})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	env := LocalPreflightEnv()
	env.PortFree, env.LookPath, env.GPUs = nil, nil, []GPU{{Index: 0}, {Index: 1}}
	if ps := Preflight(plan, env); len(ps) != 0 {
		t.Fatalf("clean dir: %v", ps)
	}
	if err := os.WriteFile(filepath.Join(run, "decode-in.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env.EUID = os.Geteuid() + 1
	text := problemsText(Preflight(plan, env))
	for _, want := range []string{"decode-in.sock exists and is not a socket", "is owned by uid"} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
	// Symlinked run dir.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(run, link); err != nil {
		t.Fatal(err)
	}
	plan2, _ := MakePlan(p, HostFacts{RunDir: link, LogDir: filepath.Join(dir, "logs")})
	env.EUID = os.Geteuid()
	if text := problemsText(Preflight(plan2, env)); !strings.Contains(text, "is a symlink") {
		t.Errorf("symlink not refused:\n%s", text)
	}
}

// Pins: the real port checker and /proc holder lookup find a listener we
// hold ourselves.
func TestPortFreeAndHolder(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if PortFree(port) {
		t.Errorf("port %d held by us reads as free", port)
	}
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc")
	}
	h := PortHolder(port)
	if !strings.HasPrefix(h, "pid "+strconv.Itoa(os.Getpid())+":") {
		t.Errorf("holder of %d = %q, want our pid %d", port, h, os.Getpid())
	}
	if err := DirWritable(filepath.Join(t.TempDir(), "a", "b")); err != nil {
		t.Errorf("DirWritable on a fresh temp path: %v", err)
	}
}

// One GPU named by index in one role and by UUID in another is the same
// GPU: load-time validation compares strings, so preflight compares UUIDs.
func TestPreflightGPUsCompareByUUID(t *testing.T) {
	t.Parallel()
	gpus := []GPU{{Index: 0, UUID: "GPU-8731a51e-f4a8"}, {Index: 1, UUID: "GPU-9abc0000-0001"}}
	plan := &Plan{Roles: []RolePlan{
		{Name: "prefill", Local: true, GPUs: []string{"0"}},
		{Name: "decode", Local: true, GPUs: []string{"GPU-8731a51e-f4a8"}},
		{Name: "encode", Local: true, GPUs: []string{"9abc"}},
		{Name: "other", Local: true, GPUs: []string{"7"}},
	}}
	text := problemsText(Preflight(plan, PreflightEnv{GPUs: gpus}))
	for _, want := range []string{
		"error: decode: GPU GPU-8731a51e-f4a8 (GPU-8731a51e-f4a8) is already used by prefill (as 0)",
		"error: other: GPU 7 does not exist on this host (2 GPU(s) found)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
	if strings.Contains(text, "encode") {
		t.Errorf("a unique UUID prefix should resolve:\n%s", text)
	}
}

func TestResolveGPU(t *testing.T) {
	t.Parallel()
	gpus := []GPU{{Index: 0, UUID: "GPU-aa11"}, {Index: 1, UUID: "GPU-aa22"}, {Index: 2}}
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"0", "GPU-aa11", true}, {"2", "index:2", true}, {"3", "", false},
		{"GPU-aa22", "GPU-aa22", true}, {"aa2", "GPU-aa22", true},
		{"aa", "", false}, // ambiguous
		{"GPU-zz", "", false},
	} {
		got, ok := ResolveGPU(c.in, gpus)
		if got != c.want || ok != c.ok {
			t.Errorf("ResolveGPU(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// HasErrors reports whether any problem is an error.
func HasErrors(ps []Problem) bool {
	for _, p := range ps {
		if p.Severity == SeverityError {
			return true
		}
	}
	return false
}
