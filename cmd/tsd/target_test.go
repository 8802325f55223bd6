package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/tsd-project/tsd/daemons"
	"github.com/tsd-project/tsd/internal/procfs"
	"github.com/tsd-project/tsd/supervisor"
)

// TestPickBare pins what a verb without NAME or PROFILE acts on: a control
// verb only on the deployment of the current directory (its socket in
// ./.tsd, or the one profile in the directory itself: never one below
// it, so nothing is picked from /, /home or $HOME), else it refuses (exit
// 2) and lists each candidate with the command to type; a read-only verb
// may take the only one running and says so.
func TestPickBare(t *testing.T) {
	cand := func(name, profile string) candidate {
		return candidate{Entry: daemons.Entry{Name: name, Profile: profile, Socket: "/runs/" + name + "/tsd.sock", PID: 100}}
	}
	apiprobe := cand("apiprobe", "/home/ann/probe/apiprobe.yaml")
	mine := cand("mine", "/home/me/work/pd.yaml")
	other := cand("other", "/home/me/work/epd.yaml") // a second profile of the same folder
	nested := cand("nested", "/home/me/work/sub/epd.yaml")
	sibling := cand("sibling", "/home/me/work-old/pd.yaml") // a prefix of the path, not a parent
	byDirSocket := candidate{Entry: daemons.Entry{Name: "here", Profile: "/elsewhere/x.yaml", Socket: "/home/me/work/.tsd/here/run/tsd.sock"}}
	legacy := candidate{Entry: daemons.Entry{Name: "old", Profile: "/elsewhere/old.yaml", Socket: "/home/me/work/.tsd/run/tsd.sock"}}
	dead := candidate{Entry: daemons.Entry{Name: "crashed", Profile: "/home/me/work/crashed.yaml", PID: 7},
		Dead: true, Leftovers: []supervisor.Leftover{{Role: "decode", PID: 8}, {Role: "decode", PID: 9}}}
	deadElsewhere := dead
	deadElsewhere.Profile = "/srv/crashed.yaml"

	const work, home = "/home/me/work", "/home/me"
	rows := []struct {
		name    string
		cwd     string // default work
		cmdline string
		control bool
		sockets []string // control sockets that exist in ./.tsd
		cands   []candidate
		want    string // the name picked, "socket" for the bare socket
		note    string // substring of the stderr note ("" = none)
		code    int    // refusal exit code (0: no refusal)
		msg     []string
	}{
		{name: "control: the only one runs elsewhere", cmdline: "tsd stop", control: true, cands: []candidate{apiprobe},
			code: 2, msg: []string{"stop without a NAME acts only on the deployment of this directory", "none runs from /home/me/work", "tsd stop apiprobe   # /home/ann/probe/apiprobe.yaml"}},
		{name: "control: a sibling directory is not cwd", cmdline: "tsd stop", control: true, cands: []candidate{sibling},
			code: 2, msg: []string{"tsd stop sibling"}},
		{name: "control: restart names the role in the suggestion", cmdline: "tsd restart decode", control: true, cands: []candidate{apiprobe, sibling},
			code: 2, msg: []string{"restart decode without a NAME acts only", "tsd restart decode apiprobe", "tsd restart decode sibling "}},
		{name: "control: the profile in cwd", cmdline: "tsd stop", control: true, cands: []candidate{apiprobe, mine}, want: "mine"},
		{name: "control: a profile below cwd is not this directory's", cmdline: "tsd start prefill", control: true, cands: []candidate{apiprobe, nested},
			code: 2, msg: []string{"acts only on the deployment of this directory", "tsd start prefill nested"}},
		{name: "control: the one in cwd, not the one below", cmdline: "tsd stop", control: true, cands: []candidate{nested, mine}, want: "mine"},
		{name: "control: two profiles of cwd run", cmdline: "tsd stop", control: true, cands: []candidate{mine, other, apiprobe},
			code: 2, msg: []string{"2 deployments run from /home/me/work", "tsd stop mine", "tsd stop other"}},
		{name: "control: from / a profile anywhere below is not picked", cwd: "/", cmdline: "tsd stop", control: true, cands: []candidate{mine},
			code: 2, msg: []string{"none runs from /", "tsd stop mine   # /home/me/work/pd.yaml"}},
		{name: "control: from /home", cwd: "/home", cmdline: "tsd restart decode", control: true, cands: []candidate{mine},
			code: 2, msg: []string{"tsd restart decode mine"}},
		{name: "control: from $HOME", cwd: home, cmdline: "tsd stop", control: true, cands: []candidate{mine, nested},
			code: 2, msg: []string{"none runs from /home/me", "tsd stop mine", "tsd stop nested"}},
		{name: "control: from $HOME, a profile in $HOME", cwd: home, cmdline: "tsd stop", control: true, cands: []candidate{mine, cand("top", "/home/me/top.yaml")}, want: "top"},
		{name: "control: the socket here wins over profiles elsewhere", cmdline: "tsd stop", control: true, sockets: []string{"/home/me/work/.tsd/here/run/tsd.sock"},
			cands: []candidate{byDirSocket, nested}, want: "here"},
		{name: "control: an earlier tsd's shared socket here", cmdline: "tsd stop", control: true, sockets: []string{"/home/me/work/.tsd/run/tsd.sock"},
			cands: []candidate{legacy, apiprobe}, want: "old"},
		{name: "control: two sockets here", cmdline: "tsd stop", control: true, sockets: []string{"/home/me/work/.tsd/here/run/tsd.sock", "/home/me/work/.tsd/run/tsd.sock"},
			cands: []candidate{byDirSocket, legacy}, code: 2, msg: []string{"2 deployments run from /home/me/work", "tsd stop here", "tsd stop old"}},
		{name: "control: an unregistered socket here", cmdline: "tsd stop", control: true, sockets: []string{"/home/me/work/.tsd/run/tsd.sock"},
			cands: []candidate{apiprobe}, want: "socket"},
		{name: "control: nothing runs", cmdline: "tsd stop", control: true, code: exitNotRunning, msg: []string{"no tsd deployment is running"}},
		{name: "control: a dead one here", cmdline: "tsd stop", control: true, cands: []candidate{apiprobe, dead}, want: "crashed"},
		{name: "control: a dead one elsewhere is listed as dead", cmdline: "tsd stop", control: true, cands: []candidate{deadElsewhere},
			code: 2, msg: []string{"tsd stop crashed", "(dead: 2 processes left)"}},
		{name: "read: the only one, said on stderr", cmdline: "tsd status", cands: []candidate{apiprobe}, want: "apiprobe",
			note: "tsd: apiprobe (the only deployment running; profile /home/ann/probe/apiprobe.yaml)"},
		{name: "read: from / the only one, said on stderr", cwd: "/", cmdline: "tsd logs", cands: []candidate{mine}, want: "mine", note: "the only deployment running"},
		{name: "read: this directory's, silently", cmdline: "tsd logs", cands: []candidate{apiprobe, mine}, want: "mine"},
		{name: "read: the only live one beside a dead one", cmdline: "tsd status", cands: []candidate{apiprobe, deadElsewhere}, want: "apiprobe", note: "the only deployment running"},
		{name: "read: only a dead one", cmdline: "tsd status", cands: []candidate{deadElsewhere}, want: "crashed"},
		{name: "read: several elsewhere", cmdline: "tsd attach", cands: []candidate{apiprobe, sibling},
			code: 2, msg: []string{"2 deployments are running; name one", "tsd attach apiprobe", "tsd attach sibling"}},
		{name: "read: nothing runs", cmdline: "tsd status", code: exitNotRunning, msg: []string{"no tsd deployment is running"}},
	}
	for _, r := range rows {
		cwd := r.cwd
		if cwd == "" {
			cwd = work
		}
		got := pickBare(r.cmdline, r.control, cwd, r.sockets, r.cands)
		if r.code != 0 {
			if got.err == nil || got.err.code != r.code {
				t.Errorf("%s: %+v, want a refusal with exit %d", r.name, got, r.code)
				continue
			}
			for _, m := range r.msg {
				if !strings.Contains(got.err.msg, m) {
					t.Errorf("%s: refusal lacks %q:\n%s", r.name, m, got.err.msg)
				}
			}
			continue
		}
		if got.err != nil {
			t.Errorf("%s: refused: %s", r.name, got.err.msg)
			continue
		}
		name := got.cand.Name
		if got.socket != "" {
			name = "socket"
		}
		if name != r.want {
			t.Errorf("%s: picked %q, want %q", r.name, name, r.want)
		}
		if r.note == "" && got.note != "" || !strings.Contains(got.note, r.note) {
			t.Errorf("%s: note %q, want %q", r.name, got.note, r.note)
		}
	}
}

func TestInDir(t *testing.T) {
	for _, c := range []struct {
		dir, path string
		want      bool
	}{
		{"/a/b", "/a/b/p.yaml", true},
		{"/a/b/", "/a/b/p.yaml", true},
		{"/a/b", "/a/b/c/d/p.yaml", false},
		{"/a/b", "/a/bc/p.yaml", false},
		{"/a/b", "/a/p.yaml", false},
		{"/a/b", "/a/b", false},
		{"/a/b", "/a/b/..p.yaml", true},
		{"/", "/p.yaml", true},
		{"/", "/home/me/p.yaml", false},
		{"/a/b", "", false},
		{"", "/a/b/p.yaml", false},
	} {
		if got := inDir(c.dir, c.path); got != c.want {
			t.Errorf("inDir(%q, %q) = %v, want %v", c.dir, c.path, got, c.want)
		}
	}
}

// TestDeadNameInUse: `tsd up` of another run folder under the name of a
// dead deployment that left processes is refused (its leftovers would lose
// their only entry); the same run folder's up goes ahead (it kills them
// itself before starting), and so does any name once nothing is left.
func TestDeadNameInUse(t *testing.T) {
	dir := t.TempDir()
	reg, err := daemons.Open(filepath.Join(dir, "reg"))
	if err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	leftover := exec.Command("sleep", "1000")
	leftover.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := leftover.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = leftover.Process.Kill(); _ = leftover.Wait() }()
	st, _ := procfs.ReadStat("", leftover.Process.Pid)
	recs := filepath.Join(dir, "run", "groups")
	if err := os.MkdirAll(recs, 0o700); err != nil {
		t.Fatal(err)
	}
	rec := fmt.Sprintf(`{"role":"decode","pgid":%d,"start":%d,"tsd_pid":%d,"tsd_start":1}`, leftover.Process.Pid, st.Start, gone.Process.Pid)
	if err := os.WriteFile(filepath.Join(recs, "decode.json"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := reg.Add(daemons.Entry{Name: "pd", Profile: "/a/pd.yaml", PID: gone.Process.Pid, PIDStart: 1, Records: recs}); err != nil {
		t.Fatal(err)
	}
	err = deadNameInUse(reg, daemons.Entry{Name: "pd", Records: filepath.Join(dir, "other", "groups")})
	if ee, ok := err.(*exitError); !ok || !strings.Contains(ee.msg, `a dead deployment named "pd" (profile /a/pd.yaml) left 1 process running`) || !strings.Contains(ee.msg, "tsd stop pd") {
		t.Fatalf("another run folder under a dead name: %v", err)
	}
	if err := deadNameInUse(reg, daemons.Entry{Name: "pd", Records: recs}); err != nil {
		t.Fatalf("the same run folder: %v", err)
	}
	if err := deadNameInUse(reg, daemons.Entry{Name: "other", Records: filepath.Join(dir, "x")}); err != nil {
		t.Fatalf("another name: %v", err)
	}
}

// The help of every verb that changes a deployment says what a bare one
// means: the deployment of this directory, never "the only one running".
func TestControlVerbHelpSaysThisDirectory(t *testing.T) {
	for _, verb := range []string{"restart", "start", "stop", "apply", "scale"} {
		var c cli
		var out strings.Builder
		parser, err := kong.New(&c, kong.Name("tsd"), kong.Writers(&out, &out), kong.Exit(func(int) {}))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = parser.Parse([]string{verb, "--help"})
		help := strings.Join(strings.Fields(out.String()), " ")
		if strings.Contains(help, "the only one running") {
			t.Errorf("tsd %s --help still says a bare verb takes the only one running:\n%s", verb, out.String())
		}
		if verb == "restart" || verb == "start" {
			if !strings.Contains(help, "the deployment of this directory") {
				t.Errorf("tsd %s --help does not say what a bare one acts on:\n%s", verb, out.String())
			}
		}
	}
}
