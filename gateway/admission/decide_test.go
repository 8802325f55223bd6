package admission

import (
	"net/http"
	"reflect"
	"testing"
	"time"
)

var t0 = time.Unix(1_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

// One row per case of DecideAdmission.
func TestDecideAdmission(t *testing.T) {
	lim := Limits{Requests: 4, Tokens: 1000, QueueRequests: 3, QueueTokens: 3000, Aging: 5 * time.Second}
	ask := func(class, tokens int, deadline time.Duration) Ask {
		a := Ask{Class: class, Tokens: tokens, Arrived: t0}
		if deadline > 0 {
			a.Deadline = at(deadline)
		}
		return a
	}
	rows := []struct {
		name    string
		l       Limits
		st      State
		a       Ask
		verdict Verdict
		reason  string
		status  int
		after   time.Duration
	}{
		{"room and nobody ahead: admit", lim, State{InFlight: Load{2, 500}}, ask(0, 400, 0), Admit, "admitted", 0, 0},
		{"no bounds: always admit", Limits{}, State{InFlight: Load{1000, 1 << 30}}, ask(0, 400, 0), Admit, "admitted", 0, 0},
		{"requests at their bound: wait", lim, State{InFlight: Load{4, 0}}, ask(0, 10, 0), Wait, "queued", 0, 0},
		{"tokens over their bound: wait", lim, State{InFlight: Load{1, 700}}, ask(0, 400, 0), Wait, "queued", 0, 0},
		{"a prompt above the token bound goes alone", lim, State{InFlight: Load{1, 0}}, ask(0, 5000, 0), Admit, "admitted", 0, 0},
		{"room, but a request of its class or above waits: wait", lim, State{InFlight: Load{1, 100}, Queued: Load{1, 900}, Ahead: Load{1, 900}}, ask(0, 10, 0), Wait, "queued", 0, 0},
		{"room, and only lower classes wait: admit", lim, State{InFlight: Load{1, 100}, Queued: Load{2, 900}, Lowest: -1}, ask(1, 10, 0), Admit, "admitted", 0, 0},
		{"queue full in requests: shed 429", lim, State{InFlight: Load{4, 0}, Queued: Load{3, 300}, Ahead: Load{3, 300}, Lowest: 0}, ask(0, 10, 0), Shed, ReasonQueueFull, http.StatusTooManyRequests, time.Second},
		{"queue full in tokens: shed 429", lim, State{InFlight: Load{4, 0}, Queued: Load{1, 2900}, Ahead: Load{1, 2900}, Lowest: 0}, ask(0, 200, 0), Shed, ReasonQueueFull, http.StatusTooManyRequests, time.Second},
		{"queue full, Retry-After from the drain rate", lim, State{InFlight: Load{4, 0}, Queued: Load{3, 3000}, Ahead: Load{3, 3000}, DrainTokens: 1000}, ask(0, 10, 0), Shed, ReasonQueueFull, http.StatusTooManyRequests, 3 * time.Second},
		{"queue full, a higher class displaces the lowest", lim, State{InFlight: Load{4, 0}, Queued: Load{3, 300}, Lowest: 0}, ask(1, 10, 0), Displace, ReasonDisplaced, 0, 0},
		{"queue full of its own class: no displacing", lim, State{InFlight: Load{4, 0}, Queued: Load{3, 300}, Ahead: Load{3, 300}, Lowest: 1}, ask(1, 10, 0), Shed, ReasonQueueFull, http.StatusTooManyRequests, time.Second},
		{"the work ahead outlasts its deadline: shed 503", lim, State{InFlight: Load{4, 1000}, Queued: Load{2, 2000}, Ahead: Load{2, 2000}, DrainTokens: 500}, ask(0, 10, 3*time.Second), Shed, ReasonDeadline, http.StatusServiceUnavailable, 4 * time.Second},
		{"the work ahead fits its deadline: wait", lim, State{InFlight: Load{4, 1000}, Queued: Load{2, 2000}, Ahead: Load{2, 2000}, DrainTokens: 500}, ask(0, 10, 5*time.Second), Wait, "queued", 0, 0},
		{"the requests ahead outlast it: shed 503", lim, State{InFlight: Load{4, 0}, Queued: Load{2, 20}, Ahead: Load{2, 20}, DrainTokens: 1e6, DrainRequests: 0.5}, ask(0, 10, 3*time.Second), Shed, ReasonDeadline, http.StatusServiceUnavailable, 4 * time.Second},
		{"no drain rate known: wait", lim, State{InFlight: Load{4, 1000}, Queued: Load{2, 2000}, Ahead: Load{2, 2000}}, ask(0, 10, time.Millisecond), Wait, "queued", 0, 0},
		{"a deadline already passed: shed 503", lim, State{InFlight: Load{4, 0}}, Ask{Class: 0, Tokens: 10, Arrived: at(-time.Minute), Deadline: t0}, Shed, ReasonDeadline, http.StatusServiceUnavailable, time.Second},
		{"nothing may wait: shed at once", Limits{Requests: 1, Tokens: 0}, State{InFlight: Load{1, 0}}, ask(0, 10, 0), Shed, ReasonQueueFull, http.StatusTooManyRequests, time.Second},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := DecideAdmission(r.l, r.st, r.a, t0)
			if d.Verdict != r.verdict || d.Reason != r.reason || d.Status != r.status || d.After != r.after {
				t.Fatalf("got %v %s %d after %v (%s), want %v %s %d after %v", d.Verdict, d.Reason, d.Status, d.After, d.Message, r.verdict, r.reason, r.status, r.after)
			}
			if d.Verdict == Shed && d.Message == "" {
				t.Fatal("a shed says nothing")
			}
		})
	}
}

// One row per case of DecideNext and Lowest.
func TestDecideNext(t *testing.T) {
	lim := Limits{Requests: 2, Tokens: 1000, Aging: 10 * time.Second}
	w := func(class, tokens int, arrived time.Duration) Waiter {
		return Waiter{Class: class, Tokens: tokens, Arrived: at(arrived)}
	}
	rows := []struct {
		name     string
		in       Load
		ws       []Waiter
		now      time.Duration
		next     int
		promoted bool
		lowest   int
	}{
		{"nothing waits", Load{}, nil, 0, -1, false, -1},
		{"higher class first", Load{}, []Waiter{w(0, 10, 0), w(1, 10, time.Second)}, 2 * time.Second, 1, false, 0},
		{"equal classes: first come", Load{}, []Waiter{w(0, 10, time.Second), w(0, 10, 0)}, 2 * time.Second, 1, false, 0},
		{"the first in line does not fit: nobody passes it", Load{1, 900}, []Waiter{w(1, 500, 0), w(0, 10, 0)}, time.Second, -1, false, 1},
		{"no room for a request", Load{2, 0}, []Waiter{w(1, 10, 0)}, time.Second, -1, false, 0},
		{"aging: a low request waited past a fresh high one", Load{}, []Waiter{w(0, 10, 0), w(1, 10, 15*time.Second)}, 15 * time.Second, 0, true, 1},
		{"aging ties go to the earlier", Load{}, []Waiter{w(1, 10, 5*time.Second), w(0, 10, 0)}, 10 * time.Second, 1, true, 0},
		{"not yet aged", Load{}, []Waiter{w(0, 10, 0), w(1, 10, 5*time.Second)}, 9 * time.Second, 1, false, 0},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			next, promoted := DecideNext(lim, r.in, r.ws, at(r.now))
			if next != r.next || promoted != r.promoted {
				t.Errorf("next %d promoted %v, want %d %v", next, promoted, r.next, r.promoted)
			}
			if low := Lowest(r.ws, lim.Aging, at(r.now)); low != r.lowest {
				t.Errorf("lowest %d, want %d", low, r.lowest)
			}
		})
	}
}

// One row per case of the key limits: the buckets start full, refill
// continuously, refuse without debiting, and say when to retry.
func TestDecideLimit(t *testing.T) {
	k := KeyLimits{RPM: 60, TPM: 6000}
	rows := []struct {
		name     string
		k        KeyLimits
		rpm, tpm Bucket
		tokens   int
		now      time.Duration
		verdict  Verdict
		reason   string
		after    time.Duration
		rpmLevel float64 // after
		tpmLevel float64
	}{
		{"no limits", KeyLimits{}, Bucket{}, Bucket{}, 1 << 20, 0, Admit, "admitted", 0, 0, 0},
		{"a full bucket", k, Bucket{}, Bucket{}, 1000, 0, Admit, "admitted", 0, 59, 5000},
		{"refilled by the time passed", k, Bucket{Level: 0, At: t0}, Bucket{Level: 0, At: t0}, 1000, 10 * time.Second, Admit, "admitted", 0, 9, 0},
		{"out of requests: retry when one refills", k, Bucket{Level: 0.5, At: t0}, Bucket{}, 10, 0, Shed, ReasonRateLimit, time.Second, 0.5, 6000},
		{"out of tokens: retry when enough refill", k, Bucket{}, Bucket{Level: 0, At: t0}, 2500, 0, Shed, ReasonRateLimit, 25 * time.Second, 60, 0},
		{"in debt after a long answer", k, Bucket{}, Bucket{Level: -1000, At: t0}, 100, 0, Shed, ReasonRateLimit, 11 * time.Second, 60, -1000},
		{"more than a minute's tokens: never", k, Bucket{}, Bucket{}, 7000, 0, Shed, ReasonTooLarge, 60 * time.Second, 60, 6000},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d, rpm, tpm := DecideLimit(r.k, r.rpm, r.tpm, r.tokens, at(r.now))
			if d.Verdict != r.verdict || d.Reason != r.reason || d.After != r.after {
				t.Fatalf("got %v %s after %v (%s), want %v %s after %v", d.Verdict, d.Reason, d.After, d.Message, r.verdict, r.reason, r.after)
			}
			if d.Verdict == Shed && d.Status != http.StatusTooManyRequests {
				t.Fatalf("status %d", d.Status)
			}
			if r.k.RPM > 0 {
				if got := rpm.level(r.k.RPM, at(r.now)); got != r.rpmLevel {
					t.Errorf("rpm level %v, want %v", got, r.rpmLevel)
				}
				if got := tpm.level(r.k.TPM, at(r.now)); got != r.tpmLevel {
					t.Errorf("tpm level %v, want %v", got, r.tpmLevel)
				}
			}
		})
	}
	// Settle: the output tokens come off at the end, debt and all.
	b := Settle(Bucket{}, 6000, 7000, t0)
	if got := b.level(6000, t0); got != -1000 {
		t.Fatalf("settled level %v, want -1000", got)
	}
}

// The decisions are pure: the same inputs give the same answers.
func TestDecideIsPure(t *testing.T) {
	lim := Limits{Requests: 1, Tokens: 100, QueueRequests: 2, QueueTokens: 100, Aging: time.Second}
	st := State{InFlight: Load{1, 50}, Queued: Load{1, 20}, Ahead: Load{1, 20}, DrainTokens: 10}
	a := Ask{Class: 0, Tokens: 20, Arrived: t0, Deadline: at(time.Second)}
	first := DecideAdmission(lim, st, a, t0)
	ws := []Waiter{{0, 10, t0}, {1, 10, at(time.Second)}}
	n1, p1 := DecideNext(lim, Load{}, ws, at(3*time.Second))
	for range 100 {
		if d := DecideAdmission(lim, st, a, t0); !reflect.DeepEqual(d, first) {
			t.Fatalf("%+v then %+v", first, d)
		}
		if n, p := DecideNext(lim, Load{}, ws, at(3*time.Second)); n != n1 || p != p1 {
			t.Fatal("DecideNext changed its mind")
		}
	}
}

func TestHeaderClass(t *testing.T) {
	for v, want := range map[string]int{"system": 2, " Interactive ": 1, "DEFAULT": 0, "bulk": -1} {
		if c, ok := HeaderClass(v); !ok || c != want {
			t.Errorf("%q: %d %v", v, c, ok)
		}
	}
	if c, ok := HeaderClass("urgent"); ok || c != ClassDefault {
		t.Errorf("unknown value: %d %v, want default, not ok", c, ok)
	}
}
