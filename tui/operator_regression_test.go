package tui

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/tui/tuitest"
)

// What an operator tripped on, each pinned by the test that failed before
// its fix.

// rightCell is a right-aligned column's cell in row: the text ending
// under the end of its heading, back to the space before it.
func rightCell(head, row, col string) string {
	r := []rune(row)
	i := strings.Index(head, col)
	if i < 0 {
		return "no column " + col
	}
	end := len([]rune(head[:i])) + len([]rune(col))
	if end > len(r) {
		return ""
	}
	start := end - 1
	for start > 0 && r[start-1] != ' ' {
		start--
	}
	return strings.TrimSpace(string(r[start:end]))
}

// The gateway line's rates are the gateway's own (the window the rows'
// REQ/S use), not a smoothing of them: one screen, one number.
func TestHeaderRateIsTheGateways(t *testing.T) {
	t.Parallel()
	s := tuitest.WithTraffic(deployment())
	m, _ := newTestModel(t, 200, 60, s)
	for i, r := range []float64{40, 2, 30, 7.5} {
		s.Time = t0.Add(time.Duration(i+1) * 300 * time.Millisecond)
		s.Seq++
		s.Gateway.ReqPerSec, s.Gateway.TokPerSec = r, r*100
		m.setSnapshot(s)
	}
	gw := strings.Split(plain(m), "\n")[1]
	if !strings.Contains(gw, " 7.5 req/s · 750 tok/s ") {
		t.Fatalf("gateway line %q: want the snapshot's 7.5 req/s and 750 tok/s", gw)
	}
}

// A stopped, failed or backing-off role shows no req/s, tok/s or
// latencies: what the traffic window still holds is its past.
func TestIdleRoleShowsNoRates(t *testing.T) {
	t.Parallel()
	for _, st := range []string{snapshot.StateStopped, snapshot.StateFailed, snapshot.StateBackoff} {
		s := tuitest.WithTraffic(deployment())
		s.Roles[2].State = st // decode-1, with traffic
		m, _ := newTestModel(t, 200, 60, s)
		head := header(t, plain(m))
		row := rowOf(t, tableLines(t, m), "decode-1")
		for _, col := range []string{"REQ/S", "TOK/S", "TTFT p50/99", "ITL p50/99"} {
			if cell := rightCell(head, row, col); cell != "-" {
				t.Errorf("%s: %s reads %q, want -", st, col, cell)
			}
		}
	}
}

// UPTIME counts down to the next try during a backoff instead of showing
// the dead process's age.
func TestUptimeDuringBackoff(t *testing.T) {
	t.Parallel()
	s := deployment()
	r := &s.Roles[2]
	r.State, r.NextTryAt, r.StartedAt = snapshot.StateBackoff, t0.Add(13*time.Second), t0.Add(-2*time.Hour)
	m, _ := newTestModel(t, 200, 60, s)
	head := header(t, plain(m))
	row := rowOf(t, tableLines(t, m), "decode-1")
	end := len([]rune(head[:strings.Index(head, "UPTIME")])) + len("UPTIME")
	if cell := strings.TrimSpace(string([]rune(row)[end-len("UPTIME")-1 : end])); cell != "in 13s" {
		t.Fatalf("UPTIME in backoff reads %q, want the countdown in 13s:\n%s\n%s", cell, head, row)
	}
}

// The roles table has a PID column and each role's GPU utilization (the
// mean of the GPUs telemetry puts it on), as k9s and nvitop show them.
func TestPIDAndGPUUtilColumns(t *testing.T) {
	t.Parallel()
	s := deployment()
	m, _ := newTestModel(t, 200, 60, s)
	head := header(t, plain(m))
	for _, col := range []string{"PID", "GPU%"} {
		if !strings.Contains(head, col) {
			t.Fatalf("no %s column: %q", col, head)
		}
	}
	r := s.Roles[2] // decode-1 on GPU 2
	util := -1
	for _, g := range s.GPUs {
		if slices.Contains(g.Roles, r.Name) {
			util = g.UtilPct
		}
	}
	row := rowOf(t, tableLines(t, m), r.Name)
	if !strings.Contains(row, " "+itoa(r.PID)+" ") || !strings.Contains(row, " "+itoa(util)+"% ") {
		t.Fatalf("row %q lacks pid %d or GPU util %d%%", row, r.PID, util)
	}
	press(m, ":")
	typeText(m, "sort gpuutil")
	press(m, "enter")
	if h := header(t, plain(m)); !strings.Contains(h, "GPU%↓") {
		t.Fatalf(":sort gpuutil: %q", h)
	}
}

// e (next error) stops at tsd's own crash notes, often the clearest line
// of a crash, and skips its other notes.
func TestNextErrorStopsAtCrashNotes(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, deployment())
	var lines []snapshot.LogLine
	for i, text := range []string{
		"INFO scheduler: step 1",
		"[tsd] engine pid 4242 (process group 4242)",
		"INFO scheduler: step 2",
		"[tsd] exit 137 (SIGKILL) after 12m; process group 4242 verified empty",
		"[tsd] exit 0 after 3s; process group 4243 verified empty",
		"INFO scheduler: step 3",
	} {
		lines = append(lines, snapshot.LogLine{Seq: uint64(i + 1), Time: t0.Add(time.Duration(i) * time.Second), Role: "decode-0",
			Text: text, Note: strings.HasPrefix(text, "[tsd]")})
	}
	f.AppendLogs(lines...)
	runCmd(t, m, press(m, "down", "l"))
	press(m, "g", "e")
	if m.logs.errMsg != "error 1/1" || !strings.Contains(m.logs.buf.entry(m.logs.errAbs).text, "exit 137") {
		t.Fatalf("e: %q at %q (flash %q)", m.logs.errMsg, m.logs.buf.entry(m.logs.errAbs).text, m.flash.text)
	}
}

// The help page reopens at its top, G/End and PgDn move through it, and
// at 120×40 it fits whole.
func TestHelpScrollsAndReopensAtTop(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 80, 24, deployment())
	press(m, "?")
	first := strings.Split(plain(m), "\n")[1]
	press(m, "G")
	bottom := plain(m)
	if !strings.Contains(bottom, "esc cancels typing") {
		t.Fatalf("G did not reach the end:\n%s", bottom)
	}
	press(m, "g", "pgdown")
	if strings.Split(plain(m), "\n")[1] == first {
		t.Fatal("pgdn did not move")
	}
	press(m, "end")
	if plain(m) != bottom {
		t.Fatal("End is not G")
	}
	press(m, "esc", "?")
	if got := strings.Split(plain(m), "\n")[1]; got != first {
		t.Fatalf("the help page reopened scrolled: %q", got)
	}
	big, _ := newTestModel(t, 120, 40, deployment())
	press(big, "?")
	if out := plain(big); strings.Contains(out, "lines 1-") || !strings.Contains(out, "esc cancels typing") {
		t.Fatalf("the help page does not fit 120×40:\n%s", out)
	}
}

// The help page lists the prompt-only keys (d, s mean other things on the
// overview) under the prompts, not as global, and lists the `:` verbs from
// the grammar and the split and describe keys.
func TestHelpSections(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 200, 60, deployment())
	press(m, "?")
	out := plain(m)
	global := helpSections(m.c.Keys)[0]
	for _, b := range global.bindings {
		if k := b.Help().Key; k == "d" || k == "s" || k == "y" || k == "n" {
			t.Errorf("the global section lists the prompt key %s", k)
		}
	}
	for _, want := range []string{"answering a prompt", "detach (keep running)", "split (table + live log)", "describe (argv, env, ports)",
		":restart ROLE", ":signal ROLE [SIGNAL]", ":ctx [NAME]", ":apply [PROFILE]", ":scale ENTRY=N…", "K      send a signal"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// A read-only dashboard says "read-only" when r, s, R or K is pressed
// (the keys are off; silence read as a broken key), and t sends nothing.
func TestReadOnlyKeysSaySo(t *testing.T) {
	t.Parallel()
	m, f := newDetachModel(t, Options{ReadOnly: true})
	press(m, "down")
	for _, k := range []string{"r", "s", "R", "K", "t"} {
		m.flash.set("")
		if cmd := press(m, k); cmd != nil || m.confirm != nil || m.cmd.active {
			t.Fatalf("%s acted on a read-only dashboard", k)
		}
		if !strings.Contains(m.flash.text, "read-only") {
			t.Errorf("%s: flash %q, want it to say read-only", k, m.flash.text)
		}
	}
	if len(f.Calls()) != 0 {
		t.Fatalf("calls %v", f.Calls())
	}
}

// :start says what is happening, and "done" only once the role is ready.
func TestStartSaysWhenDone(t *testing.T) {
	t.Parallel()
	s := deployment()
	s.Roles[2].State = snapshot.StateStopped
	m, f := newTestModel(t, 120, 40, s)
	press(m, ":")
	typeText(m, "start decode-1")
	cmd := press(m, "enter")
	if !strings.Contains(m.flash.text, "starting decode-1…") {
		t.Fatalf("flash while starting: %q", m.flash.text)
	}
	runCmd(t, m, cmd)
	if !slices.Equal(f.Calls(), []string{"start decode-1"}) || strings.Contains(m.flash.text, "done") {
		t.Fatalf("calls %v, flash %q: done before ready", f.Calls(), m.flash.text)
	}
	s.Roles = slices.Clone(s.Roles)
	s.Roles[2].State = snapshot.StateStarting
	s.Seq++
	m.setSnapshot(s)
	if strings.Contains(m.flash.text, "done") {
		t.Fatalf("done while starting: %q", m.flash.text)
	}
	s.Roles = slices.Clone(s.Roles)
	s.Roles[2].State = snapshot.StateReady
	s.Seq++
	m.setSnapshot(s)
	if !strings.Contains(m.flash.text, "start decode-1: done, ready in") {
		t.Fatalf("flash once ready: %q", m.flash.text)
	}
}

// The events page cuts a line too long for it with "…".
func TestEventsPageCutsWithEllipsis(t *testing.T) {
	t.Parallel()
	s := deployment()
	s.Events = []snapshot.Event{{Time: t0, Role: "decode-1", Message: "crashed (exit 137 (SIGKILL)); " + strings.Repeat("a long reason ", 20) + "END"}}
	m, _ := newTestModel(t, 100, 30, s)
	press(m, "v")
	for _, l := range strings.Split(plain(m), "\n") {
		if strings.Contains(l, "decode-1") {
			if !strings.HasSuffix(strings.TrimRight(l, " "), "…") || strings.Contains(l, "END") {
				t.Fatalf("cut line %q has no ellipsis", l)
			}
			return
		}
	}
	t.Fatal("no event line")
}

// A message about one page goes when the page changes; news of something
// under way stays until its result replaces it.
func TestFlashClearsOnPageChange(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 120, 40, deployment())
	runCmd(t, m, press(m, "L"))
	press(m, "w", "right") // wrap on: "nothing to scroll"
	if !strings.Contains(m.flash.text, "wrap is on") {
		t.Fatalf("flash %q", m.flash.text)
	}
	press(m, "esc")
	if m.flash.text != "" {
		t.Fatalf("the logs page's message outlived it: %q", m.flash.text)
	}
	m.flash.set("restart decode-0: waiting for it to be ready…")
	press(m, "v")
	if !m.flash.underWay() {
		t.Fatalf("news of a restart under way went with the page: %q", m.flash.text)
	}
}

// K opens the `:` line naming the role and TERM; the signal is editable
// (tab offers the others), and enter asks, naming signal, role and
// process group, before anything is sent.
func TestSignalFromDashboard(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, deployment())
	press(m, "down") // decode-0
	press(m, "K")
	if !m.cmd.active || m.cmd.in.text != "signal decode-0 TERM" {
		t.Fatalf("K: line %q (open %v)", m.cmd.in.text, m.cmd.active)
	}
	press(m, "ctrl+w")
	typeText(m, "US")
	press(m, "tab")
	if m.cmd.in.text != "signal decode-0 USR" {
		t.Fatalf("tab: %q", m.cmd.in.text)
	}
	typeText(m, "1")
	if cmd := press(m, "enter"); cmd != nil || m.confirm == nil {
		t.Fatal("enter sent the signal without asking")
	}
	pid := m.snap.Roles[1].PID
	if q := m.confirm.text; !strings.Contains(q, "send SIGUSR1 to decode-0 (process group "+itoa(pid)+")?") {
		t.Fatalf("question %q", q)
	}
	runCmd(t, m, press(m, "y"))
	if !slices.Equal(f.Calls(), []string{"signal decode-0 USR1"}) {
		t.Fatalf("calls %v", f.Calls())
	}
	if !strings.Contains(m.flash.text, "send SIGUSR1 to decode-0: done") {
		t.Fatalf("flash %q", m.flash.text)
	}
}

// switcher is a backend that knows other deployments (tui.Switcher) over
// fakes, one per deployment name.
type switcher struct {
	*tuitest.Fake
	all    map[string]*tuitest.Fake
	closed chan string
}

func (s *switcher) Deployments() ([]string, error) {
	var names []string
	for n := range s.all {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

func (s *switcher) Switch(_ context.Context, name string) (Backend, error) {
	f, ok := s.all[name]
	if !ok {
		return nil, errors.New("no running deployment named " + name)
	}
	return &switcher{Fake: f, all: s.all, closed: s.closed}, nil
}

func (s *switcher) Close() { s.closed <- s.Snapshot().Name }

// :ctx lists the deployments running here; :ctx NAME switches the
// dashboard to it: the old streams end, the new one's roles show.
func TestCtxSwitchesDeployment(t *testing.T) {
	t.Parallel()
	a, b := deployment(), tuitest.Deployment(2, 1, 1, t0)
	a.Name, b.Name = "alpha", "beta"
	all := map[string]*tuitest.Fake{"alpha": tuitest.NewFake(a), "beta": tuitest.NewFake(b)}
	sw := &switcher{Fake: all["alpha"], all: all, closed: make(chan string, 4)}
	m := New(sw, Options{Now: func() time.Time { return t0 }, Detach: true})
	m.Update(teaSize(120, 40))
	runCmd(t, m, subscribeCmd(sw, m.feed))
	t.Cleanup(m.closeSubscriptions)
	cmd := press(m, ":")
	runCmd(t, m, cmd) // the list Tab completes from
	typeText(m, "ctx b")
	press(m, "tab")
	if m.cmd.in.text != "ctx beta " {
		t.Fatalf("tab: %q", m.cmd.in.text)
	}
	press(m, "ctrl+u")
	typeText(m, "ctx")
	runCmd(t, m, press(m, "enter"))
	if !strings.Contains(m.flash.text, "deployments: alpha (this one) · beta") {
		t.Fatalf(":ctx: %q", m.flash.text)
	}
	press(m, ":")
	typeText(m, "ctx beta")
	next := runCmd(t, m, press(m, "enter"))
	if got := <-sw.closed; got != "alpha" {
		t.Fatalf("closed %q, want the old backend", got)
	}
	if all["alpha"].Subscribers() != 0 {
		t.Fatal("the old deployment's stream is still subscribed")
	}
	runCmd(t, m, next)
	out := plain(m)
	if !strings.Contains(out, "tsd · beta") || strings.Contains(out, "decode-3") || m.out.Deployment != "beta" {
		t.Fatalf("after :ctx beta:\n%s", out)
	}
	press(m, ":")
	typeText(m, "ctx beta")
	press(m, "enter")
	if !strings.Contains(m.flash.text, "already on beta") {
		t.Fatalf("flash %q", m.flash.text)
	}
}

// applier is a backend that can :apply (tui.Applier), recording calls.
type applier struct {
	*tuitest.Fake
	preview ApplyPreview
	mu      sync.Mutex
	applied []string
}

func (a *applier) PlanApply(_ context.Context, profile string) (ApplyPreview, error) {
	pv := a.preview
	pv.Profile = profile
	return pv, nil
}

func (a *applier) Apply(_ context.Context, profile, expect string, progress func(string)) error {
	a.mu.Lock()
	a.applied = append(a.applied, profile+"@"+expect)
	a.mu.Unlock()
	progress("stop decode-3")
	progress("start decode-4")
	return nil
}

// :apply shows the dry run's diff first and asks, naming the revisions;
// nothing is applied before y, and the apply's steps show as they come.
func TestApplyShowsTheDiffFirst(t *testing.T) {
	t.Parallel()
	ap := &applier{Fake: tuitest.NewFake(deployment()), preview: ApplyPreview{From: "a1b2", To: "c3d4", Summary: "1 restart, 1 start",
		Lines: []string{"decode-0: restart (argv: --max-num-seqs 128 → 256)", "decode-4: start (new)"}, Steps: []string{"restart decode-0", "start decode-4"}, Changes: true}}
	m := New(ap, Options{Now: func() time.Time { return t0 }})
	m.Update(teaSize(120, 40))
	runCmd(t, m, subscribeCmd(ap, m.feed))
	t.Cleanup(m.closeSubscriptions)
	press(m, ":")
	typeText(m, "apply edited.yaml")
	cmd := press(m, "enter")
	if m.focus != pageApply {
		t.Fatalf("focus %v", m.focus)
	}
	for _, msg := range batchMsgs(cmd) {
		m.Update(msg)
	}
	out := plain(m)
	for _, want := range []string{"decode-0: restart (argv: --max-num-seqs 128 → 256)", "1. restart decode-0", "apply revision a1b2 → c3d4 to demo"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the diff and question lack %q:\n%s", want, out)
		}
	}
	if len(ap.applied) != 0 || m.confirm == nil {
		t.Fatal("applied before y")
	}
	next := runCmd(t, m, press(m, "y"))
	for next != nil {
		next = runCmd(t, m, next)
	}
	if !slices.Equal(ap.applied, []string{"edited.yaml@c3d4"}) {
		t.Fatalf("applied %v", ap.applied)
	}
	if out := plain(m); !strings.Contains(out, "start decode-4") || !strings.Contains(m.flash.text, "apply: done, demo runs revision c3d4") {
		t.Fatalf("after the apply (flash %q):\n%s", m.flash.text, out)
	}
	// Nothing to change: said, and nothing asked.
	ap.preview.Changes = false
	press(m, "esc", ":")
	typeText(m, "apply")
	for _, msg := range batchMsgs(press(m, "enter")) {
		m.Update(msg)
	}
	if m.confirm != nil || !strings.Contains(m.flash.text, "nothing to change") {
		t.Fatalf("nothing to change: flash %q, confirm %v", m.flash.text, m.confirm != nil)
	}
}
