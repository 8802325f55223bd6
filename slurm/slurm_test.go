package slurm

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestExpandNodelist(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  string
	}{
		{"n1", []string{"n1"}, ""},
		{"n[1-2]", []string{"n1", "n2"}, ""},
		{"n[1-3,7],login", []string{"n1", "n2", "n3", "n7", "login"}, ""},
		{"gpu[01-03]", []string{"gpu01", "gpu02", "gpu03"}, ""},
		{"r[1-2]-g[0-1]", []string{"r1-g0", "r1-g1", "r2-g0", "r2-g1"}, ""},
		{"a,b[9-10]", []string{"a", "b9", "b10"}, ""},
		{"n[3-1]", nil, "bad range"},
		{"n[1-2", nil, "unbalanced ["},
		{"n1]", nil, "unbalanced ]"},
		{"n[x]", nil, "bad range"},
		{"", nil, "no node names"},
	} {
		got, err := ExpandNodelist(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %v %v, want %v", c.in, got, err, c.want)
		}
	}
}

func TestParseSteps(t *testing.T) {
	out := "12.0 tsd.demo.prefill\n12.1 tsd.demo.decode\n12.batch batch\n12.extern extern\n\ngarbage\n12.3 tsd.demo.decode\n13.0 tsd.demo.decode\n"
	steps := ParseSteps(out)
	want := []Step{
		{"12.0", "12", 0, "tsd.demo.prefill"}, {"12.1", "12", 1, "tsd.demo.decode"},
		{"12.batch", "12", -1, "batch"}, {"12.extern", "12", -1, "extern"},
		{"12.3", "12", 3, "tsd.demo.decode"}, {"13.0", "13", 0, "tsd.demo.decode"},
	}
	if !reflect.DeepEqual(steps, want) {
		t.Fatalf("ParseSteps = %+v", steps)
	}
	for _, c := range []struct {
		job, name, want string
		ok              bool
	}{
		{"12", "tsd.demo.decode", "12.3", true}, // the newest
		{"12", "tsd.demo.prefill", "12.0", true},
		{"13", "tsd.demo.decode", "13.0", true},
		{"12", "batch", "", false}, // not a role step
		{"12", "tsd.demo.encode", "", false},
	} {
		s, ok := FindStep(steps, c.job, c.name)
		if ok != c.ok || s.ID != c.want {
			t.Errorf("FindStep(%s, %s) = %v %v, want %v %v", c.job, c.name, s.ID, ok, c.want, c.ok)
		}
	}
}

func TestSrunArgv(t *testing.T) {
	shim := "sh -c " + shimScript + " tsd-step"
	multi := "sh -c " + shimScript + ` --node-rank "$SLURM_NODEID" tsd-step`
	for _, c := range []struct {
		spec StepSpec
		want string
	}{
		{StepSpec{JobID: "7", Name: "tsd.d.decode", Nodes: []string{"n2"}, GPUs: 1},
			"srun --jobid 7 --job-name tsd.d.decode --exact --overlap --nodes 1 --ntasks 1 --kill-on-bad-exit=1 --gres gpu:1 --nodelist n2 -- " + shim + " ts serve"},
		{StepSpec{JobID: "7", Name: "tsd.d.p", GPUs: 0, Time: "10"},
			"srun --jobid 7 --job-name tsd.d.p --exact --overlap --nodes 1 --ntasks 1 --kill-on-bad-exit=1 --time 10 -- " + shim + " ts serve"},
		// A role spanning nodes: one step, one task on each node, the
		// GPUs asked per node, each task's --node-rank from the shim.
		{StepSpec{JobID: "7", Name: "tsd.d.big", Nodes: []string{"n1", "n2", "n3"}, GPUs: 8},
			"srun --jobid 7 --job-name tsd.d.big --exact --overlap --nodes 3 --ntasks 3 --ntasks-per-node 1 --kill-on-bad-exit=1 --gres gpu:8 --nodelist n1,n2,n3 -- " + multi + " ts serve"},
	} {
		if got := strings.Join(SrunArgv(c.spec, []string{"ts", "serve"}), " "); got != c.want {
			t.Errorf("SrunArgv(%+v) =\n%s\nwant\n%s", c.spec, got, c.want)
		}
	}
	if got := strings.Join(ScancelArgv("7.2", "TERM"), " "); got != "scancel --signal=TERM 7.2" {
		t.Error(got)
	}
	if got := strings.Join(ScancelArgv("7.2", ""), " "); got != "scancel 7.2" {
		t.Error(got)
	}
}

func TestParseScontrol(t *testing.T) {
	if got := ParseHostnames("n1\nn2\n\n"); !reflect.DeepEqual(got, []string{"n1", "n2"}) {
		t.Error(got)
	}
	node := "NodeName=n2 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.0.0.7 NodeHostName=box Version=22.05.8"
	if got := ParseNodeAddr(node); got != "10.0.0.7" {
		t.Error(got)
	}
	if got := ParseNodeAddr("NodeName=n2"); got != "" {
		t.Error(got)
	}
	if got := ParseNodeHostname(node); got != "box" {
		t.Error(got)
	}
}

func TestOnFirstNode(t *testing.T) {
	job := &Job{Nodes: []string{"gpu-a01", "gpu-a02"}, firstHost: "box1.cluster"}
	for _, c := range []struct {
		host string
		want bool
	}{
		{"gpu-a01", true},
		{"gpu-a01.cluster.example", true},
		{"box1", true},
		{"gpu-a02", false},
		{"login1", false},
		{"", true},
	} {
		if got := OnFirstNode(job, c.host); got != c.want {
			t.Errorf("OnFirstNode(%q) = %v, want %v", c.host, got, c.want)
		}
	}
	if !OnFirstNode(&Job{}, "login1") {
		t.Error("no nodes: cannot tell, so true")
	}
}

func TestDetect(t *testing.T) {
	fake := func(hostnames bool) Runner {
		return func(_ context.Context, argv []string) (string, error) {
			switch strings.Join(argv[:3], " ") {
			case "scontrol show hostnames":
				if !hostnames {
					return "", errors.New("scontrol: not found")
				}
				return "n1\nn2\n", nil
			case "scontrol show node":
				if argv[4] == "n1" {
					return "NodeName=n1 NodeAddr=10.0.0.1 State=IDLE", nil
				}
				return "", errors.New("down")
			}
			return "", errors.New("unexpected")
		}
	}
	for _, c := range []struct {
		name string
		env  Env
		run  Runner
		want *Job
		err  string
	}{
		{"scontrol", Env{JobID: "5", NodeList: "n[1-2]", GPUs: "2"}, fake(true), &Job{ID: "5", Nodes: []string{"n1", "n2"}, Addrs: []string{"10.0.0.1", "n2"}, GPUsPerNode: 2}, ""},
		{"fallback expansion", Env{JobID: "5", NodeList: "n[1-2]"}, fake(false), &Job{ID: "5", Nodes: []string{"n1", "n2"}, Addrs: []string{"10.0.0.1", "n2"}}, ""},
		{"no job", Env{}, fake(true), nil, "SLURM_JOB_ID is not set"},
		{"no nodelist", Env{JobID: "5"}, fake(true), nil, "SLURM_JOB_NODELIST is not set"},
		{"bad nodelist", Env{JobID: "5", NodeList: "n[2-1]"}, fake(false), nil, "bad range"},
	} {
		got, err := Detect(context.Background(), c.env, c.run)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v %v, want %+v", c.name, got, err, c.want)
		}
	}
	env := ReadEnv(func(k string) string {
		return map[string]string{"SLURM_JOBID": "9", "SLURM_NODELIST": "a", "SLURM_GPUS_ON_NODE": "4"}[k]
	})
	if env != (Env{JobID: "9", NodeList: "a", GPUs: "4"}) {
		t.Error(env)
	}
}

func TestPlace(t *testing.T) {
	one := func(ns ...int) [][]int {
		out := make([][]int, len(ns))
		for i, n := range ns {
			if n >= 0 {
				out[i] = []int{n}
			}
		}
		return out
	}
	for _, c := range []struct {
		name           string
		gpus           []int
		fixed          [][]int
		nodes, perNode int
		want           [][]int
		err            string
	}{
		{"fixed", []int{1, 1}, one(0, 1), 2, 0, one(0, 1), ""},
		{"unknown capacity packs on the first node", []int{1, 1}, one(-1, -1), 2, 0, one(0, 0), ""},
		{"first fit", []int{2, 1, 1}, one(-1, -1, -1), 2, 2, one(0, 1, 1), ""},
		{"fixed first, then the rest fills", []int{1, 2}, one(1, -1), 2, 2, one(1, 0), ""},
		{"out of range", []int{1}, one(2), 2, 0, nil, "node 2 is out of range: the job has 2 node(s)"},
		{"too big", []int{3}, one(-1), 2, 2, nil, "no node of the job has that many left"},
		// A role spanning nodes takes its per-node share on each; the
		// packed ones fit around it.
		{"spanning", []int{1, 1}, [][]int{{0, 1}, nil}, 2, 2, [][]int{{0, 1}, {0}}, ""},
		{"spanning fills both nodes", []int{2, 1}, [][]int{{0, 1}, nil}, 3, 2, [][]int{{0, 1}, {2}}, ""},
		{"spanning out of range", []int{1}, [][]int{{0, 3}}, 2, 0, nil, "node 3 is out of range"},
		{"fixed over capacity", []int{2, 1}, [][]int{{0, 1}, {1}}, 2, 2, nil, "the roles placed on node 1 need 3 GPU(s); the job has 2 per node"},
	} {
		got, err := Place(c.gpus, c.fixed, c.nodes, c.perNode)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v %v, want %v", c.name, got, err, c.want)
		}
	}
	if n, per := NodesNeeded([]int{2, 1, 1}, one(0, 1, 1)); n != 2 || per != 2 {
		t.Error(n, per)
	}
	if n, per := NodesNeeded([]int{4, 1}, [][]int{{0, 1, 2}, {1}}); n != 3 || per != 5 {
		t.Error(n, per)
	}
}

func TestJobEnded(t *testing.T) {
	for _, c := range []struct {
		out  string
		err  error
		want bool
	}{
		{"RUNNING\n", nil, false},
		{"CONFIGURING\n", nil, false},
		{"COMPLETING\n", nil, true},
		{"CANCELLED\n", nil, true},
		{"TIMEOUT\n", nil, true},
		{"", nil, true},
		{"", errors.New("run squeue: exit status 1 slurm_load_jobs error: Invalid job id specified"), true},
		{"", errors.New("run squeue: exit status 1 Unable to contact slurm controller"), false},
	} {
		if got := JobEnded(c.out, c.err); got != c.want {
			t.Errorf("JobEnded(%q, %v) = %v", c.out, c.err, got)
		}
	}
}
