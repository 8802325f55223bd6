package profiles

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const pd = "  - {name: prefill, gpus: [0]}\n  - {name: decode, gpus: [1]}\n"

// Pins: the rules on planned flags, devices, GPU sharing and Ascend each
// report an error naming the key and the line it is on, like
// TestValidationRules.
func TestDeviceAndFlagRules(t *testing.T) {
	t.Parallel()
	var cases []ruleCase
	// Flags that change the rank count behind the planner's back.
	for flag, key := range map[string]string{
		"--attn-tp-size": "tp:", "--tp-size": "tp:", "--world-size": "tp: and dp:", "--nprocs-per-node": "tp: and dp:",
		"--nnodes": "host:", "--node-rank": "host:", "--base-gpu-id": "gpus:", "--dp": "dp:", "--dp-size": "dp:",
		"--data-parallel-size": "dp:", "--tensor-parallel-size": "tp:",
	} {
		cases = append(cases, ruleCase{"rank flag " + flag, fmt.Sprintf("model: m\nroles:\n  - name: prefill\n    gpus: [0]\n    args: [%q, \"2\"] #<\n  - {name: decode, gpus: [1]}\n", flag+"=2"),
			"roles[0].args[0]", flag + " is planned by tsd ("})
		if !strings.Contains(plannedFlags[flag], key) {
			t.Errorf("%s: reason %q does not name %s", flag, plannedFlags[flag], key)
		}
	}
	cases = append(cases, []ruleCase{
		{"ENABLE_CP in env", "model: m\nengine:\n  env:\n    ENABLE_CP: \"1\" #<\nroles:\n" + pd, "engine.env.ENABLE_CP", "context parallelism"},
		{"ASCEND_RT_VISIBLE_DEVICES in env", "model: m\nroles:\n  - name: prefill\n    gpus: [0]\n    env: {ASCEND_RT_VISIBLE_DEVICES: \"0\"} #<\n  - {name: decode, gpus: [1]}\n", "roles[0].env.ASCEND_RT_VISIBLE_DEVICES", "set from each role's gpus"},
		{"accidental GPU sharing says how to opt in", "model: m\nroles:\n  - {name: prefill, gpus: [0], gpu_memory_utilization: 0.4}\n  - name: decode\n    gpus: [0] #<\n", "roles[1].gpus", "GPU 0 is already used by prefill (case.yaml:3:21); engines must not share a GPU by accident: to share it on purpose, set gpu_memory_utilization on every role that uses it"},
		{"sharer after a bare user", "model: m\nroles:\n  - {name: prefill, gpus: [0]}\n  - name: decode\n    gpu_memory_utilization: 0.4\n    gpus: [0] #<\n", "roles[1].gpus", "which sets no gpu_memory_utilization; set it there too"},
		{"shared fractions over the whole GPU", "model: m\nroles:\n  - {name: prefill, gpus: [0], gpu_memory_utilization: 0.6}\n  - name: decode\n    gpu_memory_utilization: 0.5\n    gpus: [0] #<\n", "roles[1].gpus", "GPU 0 is shared (prefill 0.6, decode 0.5): gpu_memory_utilization sums to 1.10, more than the whole GPU"},
		{"fraction zero", "model: m\nroles:\n  - name: prefill\n    gpus: [0]\n    gpu_memory_utilization: 0 #<\n  - {name: decode, gpus: [1]}\n", "roles[0].gpu_memory_utilization", "must be greater than 0 and at most 1, got 0"},
		{"fraction above one", "model: m\nroles:\n  - name: prefill\n    gpus: [0]\n    gpu_memory_utilization: 1.5 #<\n  - {name: decode, gpus: [1]}\n", "roles[0].gpu_memory_utilization", "at most 1, got 1.5"},
		{"fraction not a number", "model: m\nroles:\n  - name: prefill\n    gpus: [0]\n    gpu_memory_utilization: half #<\n  - {name: decode, gpus: [1]}\n", "roles[0].gpu_memory_utilization", `must be a number, got "half"`},
		{"fraction and the flag both", "model: m\nroles:\n  - name: prefill\n    gpus: [0]\n    gpu_memory_utilization: 0.5\n    args: [--gpu-memory-utilization, \"0.4\"] #<\n  - {name: decode, gpus: [1]}\n", "roles[0].args[0]", "--gpu-memory-utilization is set by the role's gpu_memory_utilization:"},
		{"engine.args would override a role's fraction", "model: m\nengine:\n  args: [--gpu-memory-utilization=0.9] #<\nroles:\n  - {name: prefill, gpus: [0], gpu_memory_utilization: 0.4}\n  - {name: decode, gpus: [1]}\n", "engine.args[0]", "would override roles[0].gpu_memory_utilization"},
		{"bad accelerator", "model: m\naccelerator: npu #<\nroles:\n" + pd, "accelerator", `must be nvidia or ascend, got "npu"`},
		{"ascend names NPUs by index", "model: m\naccelerator: ascend\nroles:\n  - {name: prefill, gpus: [0]}\n  - name: decode\n    gpus: [GPU-abc] #<\n", "roles[1].gpus", "with accelerator: ascend, gpus are NPU indices"},
		{"intranode_nvlink not a boolean", "model: m\nengine:\n  mooncake:\n    intranode_nvlink: yes #<\nroles:\n" + pd, "engine.mooncake.intranode_nvlink", "must be true or false"},
	}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			errs := loadAndPlan("case.yaml", c.src)
			line := markedLine(c.src)
			prefix := fmt.Sprintf("case.yaml:%d:", line)
			for _, e := range errs {
				s := e.Error()
				if strings.Contains(s, c.msg) && strings.HasPrefix(s, prefix) && strings.Contains(s, ": "+c.key+": ") {
					return
				}
			}
			t.Errorf("want an error at line %d naming %q with %q; got:\n%v", line, c.key, c.msg, errs)
		})
	}
}

// Pins: warnings of those rules land in the plan, naming the
// key and line; and what must not warn, does not.
func TestDeviceAndFlagWarnings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, src string
		want      string // "" = no warning at all
	}{
		{"NVLink forced in engine.env", "model: m\nengine:\n  env: {MC_INTRANODE_NVLINK: \"1\"}\nroles:\n" + pd,
			"w.yaml:3:9: engine.env.MC_INTRANODE_NVLINK: MC_INTRANODE_NVLINK is set: on containerized hosts the forced intra-node NVLink transport has reported success without writing the destination pages"},
		{"NVLink forced in a role's env", "model: m\nroles:\n  - name: prefill\n    gpus: [0]\n    env: {MC_INTRA_NVLINK: \"true\"}\n  - {name: decode, gpus: [1]}\n",
			"w.yaml:5:11: roles[0].env.MC_INTRA_NVLINK: MC_INTRA_NVLINK is set"},
		{"NVLink acknowledged", "model: m\nengine:\n  mooncake: {intranode_nvlink: true}\n  env: {MC_INTRANODE_NVLINK: \"1\"}\nroles:\n" + pd, ""},
		{"NVLink off is fine", "model: m\nengine:\n  env: {MC_INTRANODE_NVLINK: \"0\"}\nroles:\n" + pd, ""},
		{"tight GPU share", "model: m\nroles:\n  - {name: prefill, gpus: [0], gpu_memory_utilization: 0.5}\n  - {name: decode, gpus: [0], gpu_memory_utilization: 0.48}\n",
			"w.yaml:4:20: roles[1].gpus: GPU 0 is shared (prefill 0.5, decode 0.48): gpu_memory_utilization sums to 0.98"},
		{"share within 0.95", "model: m\nroles:\n  - {name: prefill, gpus: [0], gpu_memory_utilization: 0.45}\n  - {name: decode, gpus: [0], gpu_memory_utilization: 0.5}\n", ""},
	} {
		p, errs := Parse("w.yaml", []byte(c.src))
		if len(errs) > 0 {
			t.Fatalf("%s: %v", c.name, errs)
		}
		plan, errs := MakePlan(p, fixedFacts())
		if len(errs) > 0 {
			t.Fatalf("%s: %v", c.name, errs)
		}
		got := strings.Join(plan.Warnings, "\n")
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: warnings\n%s\nwant %q", c.name, got, c.want)
		}
	}
}

// Pins: one GPU shared by a prefill and a decode plans on a one-GPU
// workstation, each engine told its fraction; ib_device per role wins
// over engine.ib_device.
func TestGPUSharingPlan(t *testing.T) {
	t.Parallel()
	src := `model: m
engine: {ib_device: mlx5_0}
roles:
  - {name: prefill, gpus: [0], gpu_memory_utilization: 0.45, ib_device: "mlx5_1,mlx5_2"}
  - {name: decode, gpus: [0], gpu_memory_utilization: 0.45}
`
	p, errs := Parse("s.yaml", []byte(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	plan, errs := MakePlan(p, fixedFacts())
	if len(errs) > 0 || len(plan.Warnings) > 0 {
		t.Fatal(errs, plan.Warnings)
	}
	pf, _ := plan.Role("prefill")
	dc, _ := plan.Role("decode")
	for _, c := range []struct {
		r    *RolePlan
		want string
	}{
		{pf, "--disaggregation-ib-device mlx5_1,mlx5_2 --dist-init-addr"},
		{dc, "--disaggregation-ib-device mlx5_0 --dist-init-addr"},
		{pf, "--zmq-engine-index 0 --gpu-memory-utilization 0.45"},
		{dc, "--zmq-engine-index 0 --gpu-memory-utilization 0.45"},
	} {
		if !strings.Contains(strings.Join(c.r.Argv, " "), c.want) {
			t.Errorf("%s argv %q lacks %q", c.r.Name, c.r.Argv, c.want)
		}
	}
	if pf.GPUMemoryUtilization != 0.45 || pf.IBDevice != "mlx5_1,mlx5_2" || pf.Env["CUDA_VISIBLE_DEVICES"] != "0" || dc.Env["CUDA_VISIBLE_DEVICES"] != "0" {
		t.Errorf("plans %+v %+v", pf, dc)
	}
	// Preflight agrees by UUID, and refuses when the sum is over 1.
	env := PreflightEnv{GPUs: []GPU{{Index: 0, UUID: "GPU-a"}}}
	if ps := Preflight(plan, env); HasErrors(ps) {
		t.Errorf("preflight: %s", problemsText(ps))
	}
	plan.Roles[1].GPUMemoryUtilization = 0.6
	if ps := Preflight(plan, env); !strings.Contains(problemsText(ps), "GPU GPU-a is shared and gpu_memory_utilization sums to 1.05") {
		t.Errorf("preflight over 1: %s", problemsText(ps))
	}
	plan.Roles[1].GPUMemoryUtilization = 0
	if ps := Preflight(plan, env); !strings.Contains(problemsText(ps), "unless every role on it sets gpu_memory_utilization") {
		t.Errorf("preflight bare share: %s", problemsText(ps))
	}
}

// Pins: accelerator picks the device variable: ascend hands devices
// through ASCEND_RT_VISIBLE_DEVICES with no CUDA variables; without the
// key the host's only kind wins, else nvidia.
func TestAccelerator(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		key, host, want string
	}{
		{"", "", AcceleratorNVIDIA},
		{"", AcceleratorAscend, AcceleratorAscend},
		{"accelerator: nvidia\n", AcceleratorAscend, AcceleratorNVIDIA},
		{"accelerator: ascend\n", "", AcceleratorAscend},
	} {
		p, errs := Parse("a.yaml", []byte("model: m\n"+c.key+"roles:\n  - {name: prefill, gpus: [0, 1], tp: 2}\n  - {name: decode, gpus: [2]}\n"))
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		facts := fixedFacts()
		facts.Accelerator = c.host
		plan, errs := MakePlan(p, facts)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		pf, _ := plan.Role("prefill")
		if plan.Accelerator != c.want || plan.DevicesVar() != VisibleDevicesVar(c.want) {
			t.Errorf("%q on %q: accelerator %q", c.key, c.host, plan.Accelerator)
		}
		_, cvd := pf.Env["CUDA_VISIBLE_DEVICES"]
		_, order := pf.Env["CUDA_DEVICE_ORDER"]
		asc := pf.Env["ASCEND_RT_VISIBLE_DEVICES"]
		if c.want == AcceleratorAscend && (cvd || order || asc != "0,1") || c.want == AcceleratorNVIDIA && (!cvd || !order || asc != "") {
			t.Errorf("%q on %q: env %v", c.key, c.host, pf.Env)
		}
		if got := EnvOrder(pf.Env)[0]; got != plan.DevicesVar() {
			t.Errorf("env order starts with %s", got)
		}
	}
}

// Pins: the host's accelerator kind is read from its device nodes.
func TestDetectAccelerator(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		nodes []string
		want  string
	}{
		{nil, ""},
		{[]string{"nvidia0", "nvidiactl"}, AcceleratorNVIDIA},
		{[]string{"davinci0", "davinci_manager"}, AcceleratorAscend},
		{[]string{"nvidia0", "davinci0"}, ""},
		{[]string{"nvidiactl"}, ""},
	} {
		dir := t.TempDir()
		for _, n := range c.nodes {
			if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if got := DetectAccelerator(dir); got != c.want {
			t.Errorf("%v: %q, want %q", c.nodes, got, c.want)
		}
	}
}

// Pins: preflight's Transfer checks: MC_INTRANODE_NVLINK in tsd's own
// environment (unless acknowledged), ib_device against an injected
// /sys/class/infiniband, and the Ascend Mooncake build.
func TestPreflightTransfer(t *testing.T) {
	t.Parallel()
	sys := t.TempDir()
	if err := os.MkdirAll(filepath.Join(sys, "class", "infiniband", "mlx5_0"), 0o755); err != nil {
		t.Fatal(err)
	}
	noSys := t.TempDir()
	mc := t.TempDir()
	plain := filepath.Join(mc, "plain", "mooncake")
	ascend := filepath.Join(mc, "ascend", "mooncake")
	for _, f := range []string{filepath.Join(plain, "engine.so"), filepath.Join(ascend, "libascend_transport_mem.so")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base := func(accel string, ack bool, ib string) *Plan {
		return &Plan{Accelerator: accel, IntranodeNVLink: ack, TransferBackend: "mooncake", Roles: []RolePlan{
			{Name: "prefill", Local: true, IBDevice: ib}, {Name: "decode", Local: true}}}
	}
	nvlinkEnv := func(k string) string {
		if k == "MC_INTRANODE_NVLINK" {
			return "1"
		}
		return ""
	}
	for _, c := range []struct {
		name string
		plan *Plan
		env  PreflightEnv
		want []string // substrings of the warnings, in order; nil = none
	}{
		{"nvlink in tsd env", base("nvidia", false, ""), PreflightEnv{Getenv: nvlinkEnv}, []string{"warning: MC_INTRANODE_NVLINK is set in tsd's environment, so every engine inherits it: on containerized hosts"}},
		{"nvlink acknowledged", base("nvidia", true, ""), PreflightEnv{Getenv: nvlinkEnv}, nil},
		{"ib device present", base("nvidia", false, "mlx5_0"), PreflightEnv{SysfsRoot: sys}, nil},
		{"ib device missing", base("nvidia", false, "mlx5_0,mlx5_9"), PreflightEnv{SysfsRoot: sys}, []string{"warning: prefill: ib_device mlx5_9 is not in " + filepath.Join(sys, "class", "infiniband") + " (found: mlx5_0)"}},
		{"no infiniband in sysfs", base("nvidia", false, "mlx5_0"), PreflightEnv{SysfsRoot: noSys}, []string{"warning: prefill: ib_device mlx5_0: this host shows no RDMA devices"}},
		{"ascend, no mooncake found", base("ascend", false, ""), PreflightEnv{MooncakeDirs: func() []string { return nil }}, []string{"tsd cannot check that Mooncake is an Ascend-compatible build"}},
		{"ascend, plain mooncake", base("ascend", false, ""), PreflightEnv{MooncakeDirs: func() []string { return []string{plain} }}, []string{"the Mooncake at " + plain + " has no Ascend transport"}},
		{"ascend, ascend mooncake", base("ascend", false, ""), PreflightEnv{MooncakeDirs: func() []string { return []string{plain, ascend} }}, nil},
		{"nvidia skips the ascend check", base("nvidia", false, ""), PreflightEnv{MooncakeDirs: func() []string { return nil }}, nil},
	} {
		var got []string
		for _, p := range Preflight(c.plan, c.env) {
			if !strings.Contains(p.Msg, "GPU list unknown") && !strings.Contains(p.Msg, "NPU list unknown") {
				got = append(got, p.String())
			}
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: got %q, want %d problems", c.name, got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: %q lacks %q", c.name, got[i], w)
			}
		}
	}
	venv := filepath.Join(mc, "venv")
	pkg := filepath.Join(venv, "lib", "python3.11", "site-packages", "mooncake")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	got := MooncakeDirs(func(k string) string {
		if k == "VIRTUAL_ENV" {
			return venv
		}
		return ""
	})
	if len(got) == 0 || got[0] != pkg {
		t.Errorf("MooncakeDirs = %v, want %s first", got, pkg)
	}
}
