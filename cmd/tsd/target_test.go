package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tsd-project/tsd/daemons"
	"github.com/tsd-project/tsd/internal/procfs"
	"github.com/tsd-project/tsd/supervisor"
)

// TestPickBare pins what a verb without NAME or PROFILE acts on: a control
// verb only on the deployment of the current directory (its socket in
// ./.tsd/run, or the one profile in or under it), else it refuses (exit 2)
// and lists each candidate with the command to type; a read-only verb may
// take the only one running and says so.
func TestPickBare(t *testing.T) {
	cand := func(name, profile string) candidate {
		return candidate{Entry: daemons.Entry{Name: name, Profile: profile, Socket: "/runs/" + name + "/tsd.sock", PID: 100}}
	}
	apiprobe := cand("apiprobe", "/home/ann/probe/apiprobe.yaml")
	mine := cand("mine", "/home/me/work/pd.yaml")
	nested := cand("nested", "/home/me/work/sub/epd.yaml")
	sibling := cand("sibling", "/home/me/work-old/pd.yaml") // a prefix of the path, not a parent
	byDirSocket := candidate{Entry: daemons.Entry{Name: "here", Profile: "/elsewhere/x.yaml", Socket: "/home/me/work/.tsd/run/tsd.sock"}}
	dead := candidate{Entry: daemons.Entry{Name: "crashed", Profile: "/home/me/work/crashed.yaml", PID: 7},
		Dead: true, Leftovers: []supervisor.Leftover{{Role: "decode", PID: 8}, {Role: "decode", PID: 9}}}
	deadElsewhere := dead
	deadElsewhere.Profile = "/srv/crashed.yaml"

	const cwd = "/home/me/work"
	rows := []struct {
		name    string
		cmdline string
		control bool
		socket  string // ./.tsd/run/tsd.sock when it exists
		cands   []candidate
		want    string // the name picked, "socket" for the bare socket
		note    string // substring of the stderr note ("" = none)
		code    int    // refusal exit code (0: no refusal)
		msg     []string
	}{
		{name: "control: the only one runs elsewhere", cmdline: "tsd stop", control: true, cands: []candidate{apiprobe},
			code: 2, msg: []string{"stop without a NAME acts only on the deployment of this directory", "none runs from /home/me/work", "tsd stop apiprobe   # /home/ann/probe/apiprobe.yaml"}},
		{name: "control: a sibling directory is not under cwd", cmdline: "tsd stop", control: true, cands: []candidate{sibling},
			code: 2, msg: []string{"tsd stop sibling"}},
		{name: "control: restart names the role in the suggestion", cmdline: "tsd restart decode", control: true, cands: []candidate{apiprobe, sibling},
			code: 2, msg: []string{"restart decode without a NAME acts only", "tsd restart decode apiprobe", "tsd restart decode sibling "}},
		{name: "control: the profile in cwd", cmdline: "tsd stop", control: true, cands: []candidate{apiprobe, mine}, want: "mine"},
		{name: "control: a profile under cwd", cmdline: "tsd start prefill", control: true, cands: []candidate{apiprobe, nested}, want: "nested"},
		{name: "control: two under cwd", cmdline: "tsd stop", control: true, cands: []candidate{mine, nested, apiprobe},
			code: 2, msg: []string{"2 deployments have their profile under /home/me/work", "tsd stop mine", "tsd stop nested"}},
		{name: "control: the socket here wins over profiles", cmdline: "tsd stop", control: true, socket: "/home/me/work/.tsd/run/tsd.sock",
			cands: []candidate{mine, byDirSocket}, want: "here"},
		{name: "control: an unregistered socket here", cmdline: "tsd stop", control: true, socket: "/home/me/work/.tsd/run/tsd.sock",
			cands: []candidate{apiprobe}, want: "socket"},
		{name: "control: nothing runs", cmdline: "tsd stop", control: true, code: exitNotRunning, msg: []string{"no tsd deployment is running"}},
		{name: "control: a dead one here", cmdline: "tsd stop", control: true, cands: []candidate{apiprobe, dead}, want: "crashed"},
		{name: "control: a dead one elsewhere is listed as dead", cmdline: "tsd stop", control: true, cands: []candidate{deadElsewhere},
			code: 2, msg: []string{"tsd stop crashed", "(dead: 2 processes left)"}},
		{name: "read: the only one, said on stderr", cmdline: "tsd status", cands: []candidate{apiprobe}, want: "apiprobe",
			note: "tsd: apiprobe (the only deployment running; profile /home/ann/probe/apiprobe.yaml)"},
		{name: "read: this directory's, silently", cmdline: "tsd logs", cands: []candidate{apiprobe, mine}, want: "mine"},
		{name: "read: the only live one beside a dead one", cmdline: "tsd status", cands: []candidate{apiprobe, deadElsewhere}, want: "apiprobe", note: "the only deployment running"},
		{name: "read: only a dead one", cmdline: "tsd status", cands: []candidate{deadElsewhere}, want: "crashed"},
		{name: "read: several elsewhere", cmdline: "tsd attach", cands: []candidate{apiprobe, sibling},
			code: 2, msg: []string{"2 deployments are running; name one", "tsd attach apiprobe", "tsd attach sibling"}},
		{name: "read: nothing runs", cmdline: "tsd status", code: exitNotRunning, msg: []string{"no tsd deployment is running"}},
	}
	for _, r := range rows {
		got := pickBare(r.cmdline, r.control, cwd, r.socket, r.cands)
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

func TestInOrUnder(t *testing.T) {
	for _, c := range []struct {
		dir, path string
		want      bool
	}{
		{"/a/b", "/a/b/p.yaml", true},
		{"/a/b", "/a/b/c/d/p.yaml", true},
		{"/a/b", "/a/bc/p.yaml", false},
		{"/a/b", "/a/p.yaml", false},
		{"/a/b", "/a/b", false},
		{"/a/b", "/a/b/..p.yaml", true},
		{"/", "/p.yaml", true},
		{"/a/b", "", false},
		{"", "/a/b/p.yaml", false},
	} {
		if got := inOrUnder(c.dir, c.path); got != c.want {
			t.Errorf("inOrUnder(%q, %q) = %v, want %v", c.dir, c.path, got, c.want)
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
