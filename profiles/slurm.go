package profiles

import (
	"net"
	"path/filepath"
	"strconv"

	"github.com/tsd-project/tsd/slurm"
)

// slurm rewrites a planned deployment for --launcher slurm: each instance
// is placed on a node of the job (its role's node:, or packed), runs as its
// own step through srun, and is reached across nodes: its worker becomes
// tcp://<first node's address>:<handshake port> (the daemon and gateway run
// on the job's first node; the engine dials them, the "roles on other
// hosts" form of docs/protocol.md), and its --dist-init-addr and bootstrap
// host are its own node's address. Slurm hands out the GPUs, so the plan
// sets no CUDA_VISIBLE_DEVICES and lists no GPU indices.
func (pl *planner) slurm(plan *Plan, insts []*inst) {
	job := pl.facts.Slurm
	plan.Launcher, plan.SlurmJob = LauncherSlurm, job.ID
	if len(job.Nodes) == 0 || len(job.Addrs) != len(job.Nodes) {
		pl.err("roles", "the Slurm job %s lists no nodes", job.ID)
		return
	}
	gpus := make([]int, len(insts))
	fixed := make([][]int, len(insts))
	for i, in := range insts {
		fixed[i] = in.role.Nodes
		if in.role.Node >= 0 {
			fixed[i] = []int{in.role.Node}
		}
		// GPUs per node: a role spanning nodes splits tp × dp evenly
		// (the loader refuses a count that does not divide it).
		gpus[i] = in.role.TP * in.role.DP / max(1, len(fixed[i]))
		if !in.role.Local() {
			pl.err(in.key+".host", "host: %s and --launcher slurm do not mix: Slurm starts every role; use node: to place it", in.role.Host)
		}
		key := in.key + ".node"
		if len(in.role.Nodes) > 0 {
			key = in.key + ".nodes"
		}
		for _, n := range fixed[i] {
			if n >= len(job.Nodes) {
				pl.err(key, "node %d is out of range: Slurm job %s has %d node(s) (%v)", n, job.ID, len(job.Nodes), job.Nodes)
				fixed[i] = nil
				break
			}
		}
	}
	placed, err := slurm.Place(gpus, fixed, len(job.Nodes), job.GPUsPerNode)
	if err != nil {
		pl.err("roles", "placing roles on Slurm job %s: %v", job.ID, err)
		return
	}
	first := job.Addrs[0]
	for i, in := range insts {
		rp, wp := &plan.Roles[i], &plan.Gateway.Workers[i]
		var nodes []string
		remote := false
		for _, k := range placed[i] {
			nodes = append(nodes, job.Nodes[k])
			remote = remote || k != 0
		}
		// The engine's node rank 0 runs on the step's first node: its
		// rendezvous (dist-init) and bootstrap server are there.
		node, addr := nodes[0], job.Addrs[placed[i][0]]
		w := in.worker
		if w.Scheme == "ipc" {
			w = Worker{Scheme: "tcp", Host: first, Port: w.DialPort()}
		}
		rp.Worker, rp.Handshake = w.URL(), w.Handshake()
		wp.URL, wp.Handshake, wp.Input, wp.Output = w.URL(), w.Handshake(), w.Input(), w.Output()
		if in.dist > 0 {
			rp.DistInitAddr = net.JoinHostPort(addr, strconv.Itoa(in.dist))
		}
		if in.boot > 0 && in.role.BootstrapHost == "" {
			rp.Bootstrap = net.JoinHostPort(addr, strconv.Itoa(in.boot))
			wp.Bootstrap = rp.Bootstrap
		}
		if k := rp.KVEvents; k != nil {
			// DP rank r publishes from the node running its first
			// global rank, r·tp (tp × dp ranks split evenly over nodes).
			ppn := max(1, in.role.TP*in.role.DP/len(placed[i]))
			for r := range k.Publish {
				host := job.Addrs[placed[i][min(len(placed[i])-1, r*in.role.TP/ppn)]]
				k.Publish[r] = "tcp://" + net.JoinHostPort(host, strconv.Itoa(k.Port+r))
				k.Replay[r] = "tcp://" + net.JoinHostPort(host, strconv.Itoa(k.ReplayPort+r))
			}
		}
		setFlag(rp.Argv, "--dist-init-addr", rp.DistInitAddr)
		setFlag(rp.Argv, "--data-parallel-address", w.DialHost())
		if len(nodes) > 1 {
			// Each task's --node-rank comes from the step shim
			// (slurm.StepShim): one argv serves every node.
			rp.Argv = append(rp.Argv, "--nnodes", strconv.Itoa(len(nodes)))
			rp.Nodes = nodes
		}
		delete(rp.Env, VisibleDevicesVar(plan.Accelerator))
		rp.GPUs = []string{}
		rp.Launcher, rp.Node, rp.NodeAddr = LauncherSlurm, node, addr
		rp.NodeRemote = remote
		rp.SlurmGPUs = gpus[i]
		rp.Step = slurm.StepName(plan.Name, rp.Name)
		rp.SlurmInfo = filepath.Join(plan.RunDir, rp.Name+".slurm.json")
		rp.Srun = slurm.SrunArgv(slurm.StepSpec{JobID: job.ID, Name: rp.Step, Nodes: nodes, GPUs: gpus[i]}, nil)
	}
}

// setFlag replaces the value after flag in argv, where it is present.
func setFlag(argv []string, flag, value string) {
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == flag {
			argv[i+1] = value
			return
		}
	}
}

// OnOtherNode reports whether a Slurm role runs on another node than tsd
// (the job's first node, whose address its worker names), so checks of
// this host's ports or devices do not apply to it.
func (r *RolePlan) OnOtherNode() bool {
	if r.Launcher != LauncherSlurm {
		return false
	}
	w, err := ParseWorker(r.Worker)
	return err == nil && w.Scheme == "tcp" && w.Host != r.NodeAddr
}
