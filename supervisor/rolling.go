package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// RollingTargets lists the role instances a rolling restart of target
// covers, in plan order: an instance name, a profile entry (all its
// replicas), a kind (every role of it), or "" (every local role).
func (s *Supervisor) RollingTargets(target string) ([]string, error) {
	var out []string
	members := s.roster.current().members
	for _, m := range members {
		if m.local && (target == "" || m.name == target) {
			out = append(out, m.name)
		}
	}
	if len(out) > 0 && target != "" {
		return out, nil
	}
	for _, match := range []func(m member) bool{
		func(m member) bool { return target == "" },
		func(m member) bool { return m.group == target },
		func(m member) bool { return m.kind == target },
	} {
		out = out[:0]
		for _, m := range members {
			if m.local && match(m) {
				out = append(out, m.name)
			}
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	return nil, fmt.Errorf("%w %q: not a role, replica group or kind of a local role (have %s)", ErrUnknownRole, target, strings.Join(s.Roles(), ", "))
}

// RollingRestart restarts the instances of target (see RollingTargets)
// one at a time: each is drained (unless now), restarted, and must be
// ready again (every rank registered) before the next one goes, so the
// others carry the traffic meanwhile. It stops at the first instance that
// does not come back (crashed, failed or stopped) with an error naming
// it, and when ctx ends. progress, if set, hears one line per step.
func (s *Supervisor) RollingRestart(ctx context.Context, target string, now bool, progress func(string)) error {
	names, err := s.RollingTargets(target)
	if err != nil {
		return err
	}
	say := func(format string, a ...any) {
		msg := fmt.Sprintf(format, a...)
		if progress != nil {
			progress(msg)
		}
	}
	s.rolling.Add(1) // the SLO planner waits for it (planner.go)
	defer s.rolling.Add(-1)
	s.pub.event("", fmt.Sprintf("rolling restart of %s", strings.Join(names, ", ")))
	for i, name := range names {
		start := time.Now()
		say("restarting %s (%d/%d)", name, i+1, len(names))
		// The actor answers once the instance is ready again, or once it
		// crashed, backs off, failed or stopped on the way (goalBack).
		_, w, err := ask(s.roster.current(), name, event{Kind: evRestart, Now: now, Why: whyRestart}, goalBack)
		if err != nil {
			return fmt.Errorf("rolling restart: restart %s: %w", name, err)
		}
		o, err := await(ctx, w)
		if err == nil && o.Kind != outReady {
			err = errors.New(name + " " + o.State + ": " + o.Reason)
		}
		if err != nil {
			s.pub.event(name, "rolling restart stopped: "+err.Error())
			rest := names[i+1:]
			if len(rest) > 0 {
				return fmt.Errorf("rolling restart stopped at %s (%s not restarted): %w", name, strings.Join(rest, ", "), err)
			}
			return fmt.Errorf("rolling restart stopped at %s: %w", name, err)
		}
		say("%s ready again after %s", name, HumanDuration(time.Since(start)))
	}
	s.pub.event("", fmt.Sprintf("rolling restart of %s done", strings.Join(names, ", ")))
	return nil
}

func roleIn(s snapshot.Snapshot, name string) (snapshot.RoleStatus, bool) {
	for _, r := range s.Roles {
		if r.Name == name {
			return r, true
		}
	}
	return snapshot.RoleStatus{}, false
}
