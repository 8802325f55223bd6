package main

// The demo profile as a two-node Slurm job on the repo's real test cluster
// (scripts/slurm/up.sh through testkit/slurmtest): prefill a step on n1,
// decode a step on n2, ts-fake engines, tsd up --launcher slurm inside the
// allocation.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/slurm"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/testkit/slurmtest"
)

var grantedRe = regexp.MustCompile(`Granted job allocation (\d+)`)

// slurmAlloc holds both test nodes (2 GPUs each) for a few minutes, and
// cancels the job when the test ends whatever happens.
func slurmAlloc(t *testing.T, conf string) (job, nodelist string) {
	t.Helper()
	// Another test's job may hold the GPUs for a moment: salloc waits for
	// them, up to a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "salloc", "--no-shell", "--nodes=2", "--gres=gpu:2", "--time=4", "--job-name=tsd-e2e")
	cmd.Env = slurmtest.Env(conf)
	out, err := cmd.CombinedOutput()
	m := grantedRe.FindStringSubmatch(string(out))
	if err != nil || m == nil {
		t.Fatalf("salloc: %v\n%s", err, out)
	}
	job = m[1]
	t.Cleanup(func() {
		c := exec.Command("scancel", job)
		c.Env = slurmtest.Env(conf)
		_ = c.Run()
	})
	nl, err := slurmOut(conf, "squeue", "-h", "-j", job, "-o", "%N")
	if err != nil || strings.TrimSpace(nl) == "" {
		t.Fatalf("squeue nodelist of job %s: %v %q", job, err, nl)
	}
	return job, strings.TrimSpace(nl)
}

func slurmOut(conf string, argv ...string) (string, error) {
	c := exec.Command(argv[0], argv[1:]...)
	c.Env = slurmtest.Env(conf)
	out, err := c.Output()
	return string(out), err
}

// roleSteps lists the job's tsd steps by name.
func roleSteps(t *testing.T, conf, job string) map[string]string {
	t.Helper()
	out, err := slurmOut(conf, slurm.SqueueStepsArgv(job)...)
	if err != nil {
		t.Fatalf("squeue --steps: %v", err)
	}
	steps := map[string]string{}
	for _, s := range slurm.ParseSteps(out) {
		if strings.HasPrefix(s.Name, "tsd.") {
			steps[s.Name] = s.ID
		}
	}
	return steps
}

// waitSteps polls squeue (Slurm has no event stream for step state) until
// cond holds or the deadline passes.
func waitSteps(t *testing.T, conf, job string, limit time.Duration, what string, cond func(map[string]string) bool) map[string]string {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		s := roleSteps(t, conf, job)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; steps: %v", what, limit, s)
		}
		<-tick.C
	}
}

func slurmChat(t *testing.T, d *deployment, base string) {
	t.Helper()
	body := `{"model":"demo","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, d.output())
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"finish_reason"`) {
		t.Fatalf("chat: %d %s\n%s", resp.StatusCode, b, d.output())
	}
}

// slurmDemoProfile writes the demo profile with prefill on node 0 and
// decode on node 1, its ports from testkit/testports.
func slurmDemoProfile(t *testing.T) (prof string, gw int) {
	t.Helper()
	// The gateway's port spaced from the dist-init clusters too: one
	// drawn apart could land inside a cluster's span.
	ports := spacedFreePorts(t, 4)
	gw = ports[3]
	prof = privateProfile(t, "demo.yaml",
		[2]string{"../../gateway/tokenizer/testdata/demo", absPath(t, "../../gateway/tokenizer/testdata/demo")},
		[2]string{"--fake-startup, 4s", "--fake-startup, 200ms"},
		[2]string{"port: 8000", fmt.Sprintf("port: %d", gw)},
		[2]string{"kind: prefill\n", fmt.Sprintf("kind: prefill\n    node: 0\n    bootstrap_port: %d\n    dist_init_port: %d\n", ports[0], ports[1])},
		[2]string{"kind: decode\n", fmt.Sprintf("kind: decode\n    node: 1\n    dist_init_port: %d\n", ports[2])},
		[2]string{"\nrestart:\n", "\nrun_dir: run\nlog_dir: logs\nslurm: {time: \"3\"}\nrestart:\n"},
	)
	return prof, gw
}

// slurmSpanProfile writes the demo profile with prefill (one GPU) on node
// 0 and decode spanning both nodes: DP 2, one DP rank on each node.
func slurmSpanProfile(t *testing.T) (prof string, gw int) {
	t.Helper()
	// The gateway's port spaced from the dist-init clusters too: one
	// drawn apart could land inside a cluster's span.
	ports := spacedFreePorts(t, 4)
	gw = ports[3]
	prof = privateProfile(t, "demo.yaml",
		[2]string{"../../gateway/tokenizer/testdata/demo", absPath(t, "../../gateway/tokenizer/testdata/demo")},
		[2]string{"--fake-startup, 4s", "--fake-startup, 200ms"},
		[2]string{"port: 8000", fmt.Sprintf("port: %d", gw)},
		[2]string{"gpus: [0, 1]\n    dp: 2\n", "gpus: [0]\n"},
		[2]string{"kind: prefill\n", fmt.Sprintf("kind: prefill\n    node: 0\n    bootstrap_port: %d\n    dist_init_port: %d\n", ports[0], ports[1])},
		[2]string{"kind: decode\n    gpus: [2]\n", fmt.Sprintf("kind: decode\n    gpus: [2, 3]\n    dp: 2\n    nodes: [0, 1]\n    dist_init_port: %d\n", ports[2])},
		[2]string{"\nrestart:\n", "\nrun_dir: run\nlog_dir: logs\nslurm: {time: \"3\"}\nrestart:\n"},
	)
	return prof, gw
}

// slurmDemo starts tsd up --launcher slurm on the demo profile (prefill on
// node 0, decode on node 1) inside a fresh two-node allocation.
func slurmDemo(t *testing.T) (d *deployment, conf, job string, gw int) {
	t.Helper()
	return slurmDeploy(t, slurmDemoProfile)
}

// slurmDeploy starts tsd up --launcher slurm on the profile mk writes,
// inside a fresh two-node allocation.
func slurmDeploy(t *testing.T, mk func(*testing.T) (string, int)) (d *deployment, conf, job string, gw int) {
	t.Helper()
	conf = slurmtest.Start(t)
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	job, nodelist := slurmAlloc(t, conf)
	prof, gw := mk(t)
	dir := filepath.Dir(prof)
	// tsd runs as if inside the allocation: what salloc/sbatch would set.
	t.Setenv("SLURM_CONF", conf)
	t.Setenv("SLURM_JOB_ID", job)
	t.Setenv("SLURM_JOB_NODELIST", nodelist)
	t.Setenv("PATH", binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	d = runTSD(t, dir, "up", "--headless", "--launcher", "slurm", prof)
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range []string{"prefill", "decode"} {
				b, _ := os.ReadFile(filepath.Join(dir, "logs", r+".log"))
				t.Logf("%s.log:\n%s", r, b)
			}
		}
	})
	return d, conf, job, gw
}

// TestE2ESlurmTwoNodes: ready on two nodes, a chat answered, a step Slurm
// cancels comes back as a new step, kill -9 of tsd leaves no step, and the
// job's end leaves nothing.
func TestE2ESlurmTwoNodes(t *testing.T) {
	d, conf, job, gw := slurmDemo(t)
	d.waitLine(0, "prefill", "→ ready")
	n := d.waitLine(0, "decode", "→ ready")
	steps := waitSteps(t, conf, job, 10*time.Second, "both role steps listed", func(s map[string]string) bool { return len(s) == 2 })
	pre, dec := steps["tsd.demo.prefill"], steps["tsd.demo.decode"]
	if pre == "" || dec == "" {
		t.Fatalf("steps %v", steps)
	}
	// Each step landed on the node its role names, with Slurm's GPUs.
	for _, c := range []struct{ log, want string }{{"prefill", "n1"}, {"decode", "n2"}} {
		out, _ := slurmOut(conf, "squeue", "--steps", "-h", "-j", job, "-o", "%j %N")
		if !strings.Contains(out, "tsd.demo."+c.log+" "+c.want) {
			t.Fatalf("%s not on %s:\n%s", c.log, c.want, out)
		}
	}
	// GPUs come from Slurm: each step asked for tp × dp of them, and tsd
	// set no CUDA_VISIBLE_DEVICES of its own (Slurm sets the step's).
	for _, c := range []struct{ step, want string }{{pre, "TresPerNode=gres:gpu:2"}, {dec, "TresPerNode=gres:gpu:1"}} {
		out, err := slurmOut(conf, "scontrol", "show", "step", c.step)
		if err != nil || !strings.Contains(out, c.want) {
			t.Fatalf("step %s: %v, want %s:\n%s", c.step, err, c.want, out)
		}
	}
	if strings.Contains(d.output(), "CUDA_VISIBLE_DEVICES=") {
		t.Fatalf("tsd set CUDA_VISIBLE_DEVICES in slurm mode:\n%s", d.output())
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", gw)
	slurmChat(t, d, base)

	// The status carries the GPUs Slurm gave each step, as the step saw
	// them (NODE:INDEX), and the decode step on n2 is labelled remote:
	// this node's telemetry cannot read it.
	st := slurmWaitStatus(t, d, func(s snapshot.Snapshot) bool {
		p, dd := slurmRole(s, "prefill"), slurmRole(s, "decode")
		return p != nil && dd != nil && p.SlurmStep == pre && dd.SlurmStep == dec
	})
	if p := slurmRole(st, "prefill"); !reflect.DeepEqual(p.SlurmGPUs, []string{"n1:0", "n1:1"}) || p.NoTelemetry != "" {
		t.Fatalf("prefill on n1: slurm_gpus %v, no_telemetry %q", p.SlurmGPUs, p.NoTelemetry)
	}
	if dd := slurmRole(st, "decode"); !reflect.DeepEqual(dd.SlurmGPUs, []string{"n2:0"}) || dd.NoTelemetry != "remote, no telemetry" ||
		!reflect.DeepEqual(dd.Nodes, []string{"n2"}) || dd.GPUMemB != 0 || dd.Proc != nil {
		t.Fatalf("decode on n2: slurm_gpus %v nodes %v no_telemetry %q gpu mem %d proc %v", dd.SlurmGPUs, dd.Nodes, dd.NoTelemetry, dd.GPUMemB, dd.Proc)
	}

	// Slurm ends the decode step: a crash to the restart policy, so a new
	// step starts and the gateway re-admits it.
	cancelled := time.Now()
	if out, err := slurmOut(conf, "scancel", dec); err != nil {
		t.Fatalf("scancel %s: %v %s", dec, err, out)
	}
	d.waitLine(n, "decode", "→ ready")
	steps = waitSteps(t, conf, job, 10*time.Second, "decode as a new step", func(s map[string]string) bool {
		return s["tsd.demo.decode"] != "" && s["tsd.demo.decode"] != dec
	})
	if steps["tsd.demo.prefill"] != pre {
		t.Fatalf("prefill step changed: %v (was %s)", steps, pre)
	}
	t.Logf("decode back as a new step and ready %s after scancel", time.Since(cancelled).Round(time.Millisecond))
	slurmChat(t, d, base)
	slurmWaitStatus(t, d, func(s snapshot.Snapshot) bool {
		r := slurmRole(s, "decode")
		return r != nil && r.SlurmStep == steps["tsd.demo.decode"] && len(r.SlurmGPUs) == 1
	})

	// kill -9 of tsd: the guardians' lifelines cancel every step within
	// stop_grace (5 s) + 2 s.
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-d.done
	waitSteps(t, conf, job, 7*time.Second, "no step left after kill -9 of tsd", func(s map[string]string) bool { return len(s) == 0 })
	t.Logf("no step listed %s after kill -9 of tsd", time.Since(killed).Round(time.Millisecond))

	// The job's end ends everything: nothing of it is left in the queue.
	if out, err := slurmOut(conf, "scancel", job); err != nil {
		t.Fatalf("scancel %s: %v %s", job, err, out)
	}
	waitJobGone(t, conf, job)
}

// TestE2ESlurmJobEnd: the job ending under a running tsd ends its steps,
// and tsd, seeing the job gone, stops and exits.
func TestE2ESlurmJobEnd(t *testing.T) {
	d, conf, job, _ := slurmDemo(t)
	d.waitLine(0, "prefill", "→ ready")
	d.waitLine(0, "decode", "→ ready")
	if out, err := slurmOut(conf, "scancel", job); err != nil {
		t.Fatalf("scancel %s: %v %s", job, err, out)
	}
	d.waitLine(0, "tsd: Slurm job "+job+" ended")
	_ = d.wait() // exits; the roles it could not restart may make it non-zero
	if s := roleSteps(t, conf, job); len(s) != 0 {
		t.Fatalf("steps left: %v", s)
	}
}

// TestE2ESlurmBatchScript: `tsd export slurm` writes a script that sbatch
// runs as is: both role steps come up, the gateway answers, and cancelling
// the job leaves nothing.
func TestE2ESlurmBatchScript(t *testing.T) {
	conf := slurmtest.Start(t)
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	prof, gw := slurmDemoProfile(t)
	dir := filepath.Dir(prof)
	// tsd up in the job runs without --name: a name of its own, so another
	// "demo" running on this machine does not refuse it.
	name := fmt.Sprintf("slurm-batch-%d", os.Getpid())
	b, err := os.ReadFile(prof)
	if err != nil || !strings.Contains(string(b), "name: demo\n") {
		t.Fatalf("profile %s: %v", prof, err)
	}
	if err := os.WriteFile(prof, []byte(strings.Replace(string(b), "name: demo\n", "name: "+name+"\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "job.sh")
	if out, err := exec.Command(tsdBin, "export", "slurm", prof, "-o", script, "--tsd", tsdBin).CombinedOutput(); err != nil {
		t.Fatalf("tsd export slurm: %v\n%s", err, out)
	}
	sb := exec.Command("sbatch", "--parsable", script)
	sb.Dir = dir
	sb.Env = append(slurmtest.Env(conf), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := sb.Output()
	if err != nil {
		t.Fatalf("sbatch: %v %s", err, out)
	}
	job := strings.TrimSpace(strings.Split(string(out), ";")[0])
	t.Cleanup(func() { _, _ = slurmOut(conf, "scancel", job) })
	// The job's output file is the only view of it: read it until the
	// script says the deployment is ready (tsd up -d returned: every role
	// ready) and where to attach (no event reaches a process outside the
	// job).
	outFile := filepath.Join(dir, "tsd-"+name+"-"+job+".out")
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, _ := os.ReadFile(outFile)
		if regexp.MustCompile(`tsd: ready; attach with: ssh \S+ \S+ attach `).Match(b) {
			break
		}
		if time.Now().After(deadline) {
			ents, _ := os.ReadDir(dir)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			st, _ := slurmOut(conf, "scontrol", "show", "job", job)
			t.Fatalf("job %s never ready; %s in %v; output:\n%s\n%s", job, outFile, names, b, st)
		}
		time.Sleep(100 * time.Millisecond) // polling the job's output file
	}
	if s := roleSteps(t, conf, job); len(s) != 2 {
		t.Fatalf("steps %v", s)
	}
	body := `{"model":"demo","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", gw), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"finish_reason"`) {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}
	if st, err := exec.Command(tsdBin, "status", name).CombinedOutput(); err != nil || !strings.Contains(string(st), "prefill") {
		t.Fatalf("tsd status %s (the detached daemon): %v\n%s", name, err, st)
	}
	if out, err := slurmOut(conf, "scancel", job); err != nil {
		t.Fatalf("scancel %s: %v %s", job, err, out)
	}
	waitJobGone(t, conf, job)
	// The detached daemon sees its job end and stops (tsd status: exit 3,
	// none running).
	deadline = time.Now().Add(20 * time.Second)
	for {
		err := exec.Command(tsdBin, "status", name).Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deployment %s still running after its job ended: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond) // polling: the daemon's exit reaches no event here
	}
	if s := roleSteps(t, conf, job); len(s) != 0 {
		t.Fatalf("steps left: %v", s)
	}
}

// waitJobGone polls squeue until the job is no longer listed.
func waitJobGone(t *testing.T, conf, job string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := slurmOut(conf, "squeue", "-h", "-j", job, "-o", "%i %T")
		if err != nil || strings.TrimSpace(out) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still listed: %s", job, out)
		}
		time.Sleep(100 * time.Millisecond) // polling squeue: Slurm has no completion event here
	}
}

// slurmRole is the named role's status, nil when absent.
func slurmRole(s snapshot.Snapshot, name string) *snapshot.RoleStatus {
	for i := range s.Roles {
		if s.Roles[i].Name == name {
			return &s.Roles[i]
		}
	}
	return nil
}

// TestE2ESlurmSpanningRole: a role with nodes: [0, 1] runs as one step
// across n1 and n2, one task per node: the node-1 task joins node 0's
// rendezvous on the shared --dist-init-addr, both DP ranks register and
// answer, the status lists Slurm's GPU on each node, and stopping tsd
// leaves no step.
func TestE2ESlurmSpanningRole(t *testing.T) {
	d, conf, job, gw := slurmDeploy(t, slurmSpanProfile)
	d.waitLine(0, "prefill", "→ ready")
	d.waitLine(0, "decode", "→ ready")
	steps := waitSteps(t, conf, job, 10*time.Second, "both role steps listed", func(s map[string]string) bool { return len(s) == 2 })
	out, _ := slurmOut(conf, "squeue", "--steps", "-h", "-j", job, "-o", "%j %N")
	if !strings.Contains(out, "tsd.demo.decode n[1-2]") || !strings.Contains(out, "tsd.demo.prefill n1") {
		t.Fatalf("decode not one step over n1 and n2:\n%s", out)
	}
	if sc, err := slurmOut(conf, "scontrol", "show", "step", steps["tsd.demo.decode"]); err != nil ||
		!strings.Contains(sc, "Tasks=2") || !strings.Contains(sc, "TresPerNode=gres:gpu:1") {
		t.Fatalf("decode step: %v\n%s", err, sc)
	}
	d.waitLine(0, "decode", "node 1 of 2: joined the rendezvous")
	st := slurmWaitStatus(t, d, func(s snapshot.Snapshot) bool {
		r := slurmRole(s, "decode")
		return r != nil && r.RanksRegistered == 2 && len(r.SlurmGPUs) == 2
	})
	r := slurmRole(st, "decode")
	if !reflect.DeepEqual(r.Nodes, []string{"n1", "n2"}) || !strings.HasPrefix(r.SlurmGPUs[0], "n1:") || !strings.HasPrefix(r.SlurmGPUs[1], "n2:") ||
		r.NoTelemetry != "remote, no telemetry" || r.SlurmStep != steps["tsd.demo.decode"] {
		t.Fatalf("decode status: nodes %v gpus %v no_telemetry %q step %q", r.Nodes, r.SlurmGPUs, r.NoTelemetry, r.SlurmStep)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", gw)
	slurmChat(t, d, base)
	slurmChat(t, d, base) // round robin: the other DP rank, on the other node

	// Node 1's engine dies (kill -9, as a node failure would): Slurm ends
	// the whole step (--kill-on-bad-exit), a crash to the restart policy,
	// and the role comes back as a new step over both nodes.
	n := len(d.linesCopy())
	prof, err := os.ReadFile(filepath.Join(d.dir, "demo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ports := regexp.MustCompile(`dist_init_port: (\d+)`).FindAllStringSubmatch(string(prof), -1)
	dist := "127.0.0.1:" + ports[len(ports)-1][1] // decode's, the last role
	victims := procsWithArgs("--dist-init-addr", dist, "--node-rank", "1")
	if len(victims) == 0 {
		t.Fatalf("no node-1 engine process with --dist-init-addr %s", dist)
	}
	for _, pid := range victims {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	d.waitLine(n, "decode", "→ ready")
	steps2 := waitSteps(t, conf, job, 10*time.Second, "decode as a new step", func(s map[string]string) bool {
		return s["tsd.demo.decode"] != "" && s["tsd.demo.decode"] != steps["tsd.demo.decode"]
	})
	slurmWaitStatus(t, d, func(s snapshot.Snapshot) bool {
		r := slurmRole(s, "decode")
		return r != nil && r.RanksRegistered == 2 && r.Restarts == 1 && r.SlurmStep == steps2["tsd.demo.decode"] && len(r.SlurmGPUs) == 2
	})
	slurmChat(t, d, base)

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = d.wait()
	// srun is gone once tsd is; Slurm may list the step a moment longer
	// while it completes on both nodes.
	waitSteps(t, conf, job, 7*time.Second, "no step left after tsd stopped", func(s map[string]string) bool { return len(s) == 0 })
}

// slurmWaitStatus asks `tsd status --json NAME` (other engineers' and
// tests' deployments may be running beside this one) until cond holds,
// for up to 30 s.
func slurmWaitStatus(t *testing.T, d *deployment, cond func(snapshot.Snapshot) bool) snapshot.Snapshot {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := d.ctl("status", "--json", testDeploymentName(t))
		var s snapshot.Snapshot
		if jerr := json.Unmarshal([]byte(out), &s); jerr != nil {
			t.Fatalf("tsd status --json: %v %v\n%s", err, jerr, out)
		}
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never matched; last: %+v\noutput:\n%s", s, d.output())
		}
		select {
		case <-tick.C:
		case <-d.done:
			t.Fatalf("tsd exited (%v) before its status matched; output:\n%s", d.err, d.output())
		}
	}
}

// procsWithArgs lists the processes whose argv holds each flag followed
// by its value (flag, value, flag, value, …).
func procsWithArgs(pairs ...string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		all := true
		for i := 0; i+1 < len(pairs) && all; i += 2 {
			found := false
			for k := 0; k+1 < len(argv); k++ {
				found = found || argv[k] == pairs[i] && argv[k+1] == pairs[i+1]
			}
			all = found
		}
		if all {
			out = append(out, pid)
		}
	}
	return out
}
