package snapshot

// RoleSpec is one role instance as planned: what `tsd plan` prints for
// it, with secret-looking env values and flags masked. The dashboard's
// describe view shows it; the control socket serves it
// (docs/protocol.md, the control socket). It changes only with the plan,
// so it travels on request, never in the Snapshot stream.
type RoleSpec struct {
	Name     string   `json:"name"`
	Group    string   `json:"group,omitempty"`
	Kind     string   `json:"kind"`
	Host     string   `json:"host"` // "local" or the host it runs on
	Local    bool     `json:"local"`
	Launcher string   `json:"launcher,omitempty"` // "slurm" for a job step
	GPUs     []string `json:"gpus"`               // CUDA_VISIBLE_DEVICES as planned (indices or UUIDs)
	TP       int      `json:"tp"`
	DP       int      `json:"dp"`
	// Argv is the whole command (the srun prefix first under Slurm); Env
	// is what tsd adds to the environment, in the order the command line
	// sets it; CommandLine both as one shell line.
	Argv        []string `json:"argv"`
	Env         []EnvVar `json:"env"`
	CommandLine string   `json:"command_line"`

	Worker       string `json:"worker"`
	Handshake    string `json:"handshake"`
	DistInitAddr string `json:"dist_init_addr"`
	PortCluster  []int  `json:"port_cluster"`
	Bootstrap    string `json:"bootstrap,omitempty"`
	LogFile      string `json:"log_file"`

	Restart     RestartSpec `json:"restart"`
	StallAction string      `json:"stall_action,omitempty"`
}

// EnvVar is one variable of a role's environment.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// RestartSpec is a role's resolved restart policy; durations are Go
// duration text ("2s", "10m0s"), as in `tsd plan --json`.
type RestartSpec struct {
	Policy       string `json:"policy"` // no | on-failure | always
	Backoff      string `json:"backoff"`
	MaxBackoff   string `json:"max_backoff"`
	ResetAfter   string `json:"reset_after"`
	BudgetCount  int    `json:"budget_count"`
	BudgetWindow string `json:"budget_window"`
	StopGrace    string `json:"stop_grace"`
	DrainTimeout string `json:"drain_timeout"`
}
