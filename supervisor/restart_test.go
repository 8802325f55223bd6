package supervisor

import (
	"github.com/tsd-project/tsd/profiles"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDecide pins every row of the restart policy: policy × exit, budget,
// backoff growth, cap, jitter, stable-run reset and manual restarts.
func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)
	pol := RestartPolicy{Policy: PolicyOnFailure, Backoff: 2 * time.Second, MaxBackoff: 2 * time.Minute,
		ResetAfter: 10 * time.Minute, BudgetCount: 5, BudgetWindow: 10 * time.Minute, StopGrace: 30 * time.Second}
	with := func(f func(*RestartPolicy)) RestartPolicy { p := pol; f(&p); return p }
	ago := func(ds ...time.Duration) []time.Time {
		var out []time.Time
		for _, d := range ds {
			out = append(out, t0.Add(-d))
		}
		return out
	}
	half := func() float64 { return 0.5 } // jitter factor exactly 1
	kill := Exit{Code: 137, Signal: syscall.SIGKILL}
	fail := Exit{Code: 1}
	clean := Exit{Code: 0}

	rows := []struct {
		name    string
		in      RestartInput
		action  Action
		delay   time.Duration
		attempt int
		histLen int
		reason  string // exact, or prefix when it ends with "…"
	}{
		{"on-failure clean exit stops", RestartInput{Policy: pol, Exit: clean, Ran: 5 * time.Minute, Now: t0, Rand: half},
			ActionStop, 0, 0, 0, "exit 0 after 5m; clean exit, policy on-failure"},
		{"on-failure first crash", RestartInput{Policy: pol, Exit: fail, Ran: time.Second, Now: t0, Rand: half},
			ActionRestart, 2 * time.Second, 1, 1, "exit 1 after 1s; restart 1/5 in 10m; next try in 2s"},
		{"signal death is a failure and named", RestartInput{Policy: pol, Exit: kill, Ran: 12 * time.Minute, Now: t0, Rand: half,
			History: ago(time.Minute, 2*time.Minute), Attempt: 2},
			ActionRestart, 2 * time.Second, 1, 3, "exit 137 (SIGKILL) after 12m; restart 3/5 in 10m; next try in 2s"},
		{"geometric growth", RestartInput{Policy: pol, Exit: fail, Ran: time.Second, Now: t0, Rand: half, Attempt: 2, History: ago(time.Minute)},
			ActionRestart, 8 * time.Second, 3, 2, "exit 1 after 1s; restart 2/5 in 10m; next try in 8s"},
		{"cap", RestartInput{Policy: pol, Exit: fail, Ran: time.Second, Now: t0, Rand: half, Attempt: 10},
			ActionRestart, 2 * time.Minute, 11, 1, "exit 1 after 1s; restart 1/5 in 10m; next try in 2m"},
		{"jitter low", RestartInput{Policy: pol, Exit: fail, Ran: time.Second, Now: t0, Rand: func() float64 { return 0 }, Attempt: 1},
			ActionRestart, 3600 * time.Millisecond, 2, 1, "exit 1 after 1s; restart 1/5 in 10m; next try in 3.6s"},
		{"jitter high", RestartInput{Policy: pol, Exit: fail, Ran: time.Second, Now: t0, Rand: func() float64 { return 0.999999 }, Attempt: 1},
			ActionRestart, 4399999200, 2, 1, "exit 1 after 1s; restart 1/5 in 10m; next try in 4.4s"},
		{"jitter never exceeds the cap", RestartInput{Policy: pol, Exit: fail, Ran: time.Second, Now: t0, Rand: func() float64 { return 0.99 }, Attempt: 6},
			ActionRestart, 2 * time.Minute, 7, 1, "exit 1 after 1s; restart 1/5 in 10m; next try in 2m"},
		{"nil rand means no jitter", RestartInput{Policy: pol, Exit: fail, Ran: time.Second, Now: t0, Attempt: 1},
			ActionRestart, 4 * time.Second, 2, 1, "exit 1 after 1s; restart 1/5 in 10m; next try in 4s"},
		{"stable run resets backoff", RestartInput{Policy: pol, Exit: fail, Ran: 10 * time.Minute, Now: t0, Rand: half, Attempt: 5},
			ActionRestart, 2 * time.Second, 1, 1, "exit 1 after 10m; restart 1/5 in 10m; next try in 2s"},
		{"budget spent", RestartInput{Policy: pol, Exit: fail, Ran: time.Second, Now: t0, Rand: half, Attempt: 5,
			History: ago(time.Second, 2*time.Second, 3*time.Second, 4*time.Second, 5*time.Second)},
			ActionGiveUp, 0, 5, 5, "exit 1 after 1s; restart budget spent (5 in 10m)"},
		{"old history leaves the window", RestartInput{Policy: pol, Exit: fail, Ran: time.Second, Now: t0, Rand: half, Attempt: 1,
			History: ago(11*time.Minute, 12*time.Minute, 13*time.Minute, 14*time.Minute, time.Minute)},
			ActionRestart, 4 * time.Second, 2, 2, "exit 1 after 1s; restart 2/5 in 10m; next try in 4s"},
		{"manual bypasses budget", RestartInput{Policy: pol, Exit: fail, Manual: true, Now: t0, Rand: half, Attempt: 5,
			History: ago(time.Second, 2*time.Second, 3*time.Second, 4*time.Second, 5*time.Second)},
			ActionRestart, 0, 0, 5, "manual restart"},
		{"manual works with policy no", RestartInput{Policy: with(func(p *RestartPolicy) { p.Policy = PolicyNo }), Exit: clean, Manual: true, Now: t0},
			ActionRestart, 0, 0, 0, "manual restart"},
		{"policy no, failure → failed", RestartInput{Policy: with(func(p *RestartPolicy) { p.Policy = PolicyNo }), Exit: fail, Ran: 3 * time.Second, Now: t0},
			ActionGiveUp, 0, 0, 0, "exit 1 after 3s; restart policy no"},
		{"policy no, clean → stopped", RestartInput{Policy: with(func(p *RestartPolicy) { p.Policy = PolicyNo }), Exit: clean, Ran: 3 * time.Second, Now: t0},
			ActionStop, 0, 0, 0, "exit 0 after 3s; restart policy no"},
		{"always restarts a clean exit", RestartInput{Policy: with(func(p *RestartPolicy) { p.Policy = PolicyAlways }), Exit: clean, Ran: 90 * time.Second, Now: t0, Rand: half},
			ActionRestart, 2 * time.Second, 1, 1, "exit 0 after 1m30s; restart 1/5 in 10m; next try in 2s"},
		{"always still has a budget", RestartInput{Policy: with(func(p *RestartPolicy) { p.Policy = PolicyAlways; p.BudgetCount = 1 }), Exit: clean, Ran: time.Second, Now: t0,
			History: ago(time.Second)},
			ActionGiveUp, 0, 0, 1, "exit 0 after 1s; restart budget spent (1 in 10m)"},
		{"budget 0 is unlimited", RestartInput{Policy: with(func(p *RestartPolicy) { p.BudgetCount = 0 }), Exit: fail, Ran: time.Second, Now: t0, Rand: half,
			History: ago(1, 2, 3, 4, 5, 6, 7)},
			ActionRestart, 2 * time.Second, 1, 8, "exit 1 after 1s; restart 8; next try in 2s"},
		{"start error is a failure", RestartInput{Policy: pol, Exit: Exit{StartErr: "exec: \"ts\": not found", Code: 127}, Now: t0, Rand: half},
			ActionRestart, 2 * time.Second, 1, 1, "start failed: exec: \"ts\": not found; restart 1/5 in 10m; next try in 2s"},
		{"a lasting start error gives up at once", RestartInput{Policy: with(func(p *RestartPolicy) { p.Policy = PolicyAlways }),
			Exit: Exit{StartErr: "exec: \"ts\": executable file not found in $PATH", Code: 127, Lasting: true}, Now: t0, Rand: half},
			ActionGiveUp, 0, 0, 0, "start failed: exec: \"ts\": executable file not found in $PATH; trying again cannot fix it: fix it, then start the role"},
		{"a manual restart still tries a lasting start error again", RestartInput{Policy: pol, Manual: true,
			Exit: Exit{StartErr: "model folder /m not found", Code: 127, Lasting: true}, Now: t0},
			ActionRestart, 0, 0, 0, "manual restart"},
		{"unknown policy gives up", RestartInput{Policy: with(func(p *RestartPolicy) { p.Policy = "sometimes" }), Exit: fail, Ran: time.Second, Now: t0},
			ActionGiveUp, 0, 0, 0, "exit 1 after 1s; unknown restart policy \"sometimes\""},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := Decide(r.in)
			if d.Action != r.action || d.Delay != r.delay || d.Attempt != r.attempt || len(d.History) != r.histLen {
				t.Errorf("got %v delay=%v attempt=%d hist=%d; want %v delay=%v attempt=%d hist=%d",
					d.Action, d.Delay, d.Attempt, len(d.History), r.action, r.delay, r.attempt, r.histLen)
			}
			if want, ok := strings.CutSuffix(r.reason, "…"); ok {
				if !strings.HasPrefix(d.Reason, want) {
					t.Errorf("reason %q, want prefix %q", d.Reason, want)
				}
			} else if d.Reason != r.reason {
				t.Errorf("reason %q, want %q", d.Reason, r.reason)
			}
		})
	}
}

// TestDecideIsPure: the same input always gives the same decision and the
// caller's history slice is never modified.
func TestDecideIsPure(t *testing.T) {
	t0 := time.Unix(1000, 0)
	hist := []time.Time{t0.Add(-time.Second)}
	in := RestartInput{Policy: PolicyFromPlanDefaults(), Exit: Exit{Code: 1}, History: hist, Now: t0, Rand: func() float64 { return 0.3 }}
	a, b := Decide(in), Decide(in)
	if a.Reason != b.Reason || a.Delay != b.Delay {
		t.Fatalf("not deterministic: %+v vs %+v", a, b)
	}
	if len(hist) != 1 || !hist[0].Equal(t0.Add(-time.Second)) {
		t.Fatalf("history mutated: %v", hist)
	}
}

// TestCrashLoopSequence walks a crash loop through Decide: delays double
// until the budget ends it.
func TestCrashLoopSequence(t *testing.T) {
	p := RestartPolicy{Policy: PolicyOnFailure, Backoff: time.Second, MaxBackoff: 5 * time.Second,
		ResetAfter: time.Hour, BudgetCount: 4, BudgetWindow: time.Hour}
	now := time.Unix(0, 0)
	var hist []time.Time
	attempt := 0
	var delays []time.Duration
	for i := 0; i < 10; i++ {
		d := Decide(RestartInput{Policy: p, Exit: Exit{Code: 1}, Ran: time.Second, History: hist, Attempt: attempt, Now: now})
		if d.Action == ActionGiveUp {
			break
		}
		delays = append(delays, d.Delay)
		hist, attempt = d.History, d.Attempt
		now = now.Add(d.Delay + time.Second)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second}
	if len(delays) != len(want) {
		t.Fatalf("delays %v, want %v", delays, want)
	}
	for i := range want {
		if delays[i] != want[i] {
			t.Fatalf("delays %v, want %v", delays, want)
		}
	}
}

func PolicyFromPlanDefaults() RestartPolicy { return PolicyFromPlan(profilesRestartZero()) }

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		800 * time.Millisecond:      "800ms",
		time.Second:                 "1s",
		1500 * time.Millisecond:     "1.5s",
		8 * time.Second:             "8s",
		12 * time.Second:            "12s",
		90 * time.Second:            "1m30s",
		12 * time.Minute:            "12m",
		2*time.Hour + 5*time.Minute: "2h5m",
		3 * time.Hour:               "3h",
	} {
		if got := HumanDuration(d); got != want {
			t.Errorf("HumanDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func profilesRestartZero() profiles.RestartPlan { return profiles.RestartPlan{} }
