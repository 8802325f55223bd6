package supervisor

import (
	"time"

	"github.com/tsd-project/tsd/profiles"
)

// Launcher is the seam between a role's lifecycle and how its process
// starts: it names what the guardian runs for a role and how long the
// guardian waits after SIGTERM. The lifecycle does not care which one a
// role has; the plan's RolePlan.Launcher picks it.
type Launcher interface {
	Command(rp *profiles.RolePlan, grace time.Duration) (argv []string, guardGrace time.Duration)
}

// launcherFor picks a role's launcher from its plan.
func launcherFor(rp *profiles.RolePlan, exe string) Launcher {
	if rp.Launcher == profiles.LauncherSlurm {
		return slurmLauncher{exe: exe}
	}
	return localLauncher{}
}

// localLauncher runs the engine itself under the guardian (the default).
type localLauncher struct{}

func (localLauncher) Command(rp *profiles.RolePlan, grace time.Duration) ([]string, time.Duration) {
	return rp.Argv, grace
}

// slurmLauncher runs the role as a job step: the guardian runs `tsd _srun`
// (slurm.RunStep), which runs srun and turns the guardian's SIGTERM
// into scancel of the step, so a restart is a new step, a stop signals the
// step, and the guardian's lifeline (tsd killed) cancels the step too. The
// guardian waits stopGraceSlack longer than the step's grace so that
// `tsd _srun` can still cancel the step before the guardian's SIGKILL.
type slurmLauncher struct{ exe string }

const stopGraceSlack = 4 * time.Second

func (l slurmLauncher) Command(rp *profiles.RolePlan, grace time.Duration) ([]string, time.Duration) {
	argv := []string{l.exe, "_srun", "--job", flagValue(rp.Srun, "--jobid"), "--name", rp.Step, "--grace", grace.String()}
	if rp.SlurmInfo != "" {
		argv = append(argv, "--info", rp.SlurmInfo)
	}
	argv = append(argv, "--")
	argv = append(argv, rp.Command()...)
	return argv, grace + stopGraceSlack
}

// flagValue is the value after flag in argv, or "".
func flagValue(argv []string, flag string) string {
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == flag {
			return argv[i+1]
		}
	}
	return ""
}
