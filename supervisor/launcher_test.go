package supervisor

import (
	"reflect"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
)

// The seam: a local role's guardian runs the engine argv with the role's
// grace; a Slurm role's runs `tsd _srun` around its srun line, with slack
// for _srun to cancel the step before the guardian's SIGKILL.
func TestLauncherCommand(t *testing.T) {
	local := profiles.RolePlan{Argv: []string{"ts", "serve"}}
	sl := profiles.RolePlan{Argv: []string{"ts", "serve"}, Launcher: profiles.LauncherSlurm, Step: "tsd.d.decode",
		Srun: []string{"srun", "--jobid", "9", "--job-name", "tsd.d.decode", "--"}}
	for _, c := range []struct {
		name      string
		rp        profiles.RolePlan
		wantArgv  []string
		wantGrace time.Duration
	}{
		{"local", local, []string{"ts", "serve"}, 5 * time.Second},
		{"slurm", sl, []string{"/tsd", "_srun", "--job", "9", "--name", "tsd.d.decode", "--grace", "5s", "--",
			"srun", "--jobid", "9", "--job-name", "tsd.d.decode", "--", "ts", "serve"}, 5*time.Second + stopGraceSlack},
	} {
		argv, grace := launcherFor(&c.rp, "/tsd").Command(&c.rp, 5*time.Second)
		if !reflect.DeepEqual(argv, c.wantArgv) || grace != c.wantGrace {
			t.Errorf("%s: %q %s, want %q %s", c.name, argv, grace, c.wantArgv, c.wantGrace)
		}
	}
}
