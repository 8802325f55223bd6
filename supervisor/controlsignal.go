package supervisor

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"syscall"

	"github.com/tsd-project/tsd/snapshot"
)

// signalNames are what POST /v1/signal sends, by the names `kill -l`
// prints (the dashboard's K and :signal; verbs.Signals lists the same).
var signalNames = map[string]syscall.Signal{
	"TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP, "QUIT": syscall.SIGQUIT,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP,
	"KILL": syscall.SIGKILL,
}

// signalTarget decides whether a signal may go to a role in state st, and
// to which process group: only a local role whose engine runs now (its
// pid is its process group, docs/architecture.md §4.4). Pure, so every
// state has its row in the test.
func signalTarget(st snapshot.RoleStatus) (pgid int, err error) {
	switch {
	case st.Remote:
		return 0, fmt.Errorf("%s runs elsewhere: tsd has no process of it to signal", st.Name)
	case st.PID <= 0:
		return 0, fmt.Errorf("%s has no process to signal (%s)", st.Name, st.State)
	}
	switch st.State {
	case snapshot.StateStarting, snapshot.StateHandshaking, snapshot.StateReady, snapshot.StateStalled,
		snapshot.StateDraining, snapshot.StateStopping:
		return st.PID, nil
	}
	return 0, fmt.Errorf("%s has no process to signal (%s)", st.Name, st.State)
}

// Signal sends sig (TERM, USR1, …) to role's process group: its engine
// and what the engine started. What the engine makes of it is the
// engine's; an exit it causes is seen by the role's lifecycle as any
// other exit (a restart by the policy). The pid comes from the newest
// snapshot: a group id is reused only once that whole group is gone and
// the pid space has wrapped, far longer than a snapshot is old.
func (s *Supervisor) Signal(role, sig string) (string, error) {
	name := strings.TrimPrefix(strings.ToUpper(sig), "SIG")
	sg, ok := signalNames[name]
	if !ok {
		var names []string
		for n := range signalNames {
			names = append(names, n)
		}
		sort.Strings(names)
		return "", fmt.Errorf("unknown signal %q (one of %s)", sig, strings.Join(names, ", "))
	}
	st, ok := roleIn(s.Snapshot(), role)
	if !ok {
		return "", fmt.Errorf("%w %q (have %s)", ErrUnknownRole, role, strings.Join(s.Roles(), ", "))
	}
	pgid, err := signalTarget(st)
	if err != nil {
		return "", err
	}
	if err := syscall.Kill(-pgid, sg); err != nil {
		return "", fmt.Errorf("send SIG%s to process group %d: %w", name, pgid, err)
	}
	msg := fmt.Sprintf("SIG%s sent to process group %d", name, pgid)
	s.pub.event(role, msg)
	return msg, nil
}

// Signal asks the daemon to send sig to role's process group.
func (c *ControlClient) Signal(ctx context.Context, role, sig string) (string, error) {
	return c.Command(ctx, "signal", url.Values{"role": {role}, "sig": {sig}})
}
