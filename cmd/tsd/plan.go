package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/supervisor"
)

type planCmd struct {
	ctlTarget
	Profile string `arg:"" optional:"" help:"Profile YAML file (with --running: the deployment's name or profile, default this directory's)."`
	// Running prints the plan a daemon runs now: tsd up's, as tsd apply
	// and tsd scale changed it (docs/architecture.md §4.3).
	Running bool `name:"running" help:"Print what a running deployment runs now (after tsd apply and tsd scale), not what PROFILE would plan."`
	JSON    bool `name:"json" help:"Print the plan as JSON (stable snake_case keys, see docs/profiles.md)."`
	// ShowSecrets prints env values and flags that look secret (TOKEN,
	// KEY, SECRET, PASSWORD in the name) instead of ***.
	ShowSecrets bool `name:"show-secrets" help:"Print secret-looking env values and flags (names with TOKEN, KEY, SECRET or PASSWORD) instead of ***."`
	// Name plans the deployment as tsd up --name NAME would: its name and
	// its state folder (.tsd/NAME).
	Name string `name:"name" help:"Plan as tsd up --name NAME would: the deployment's name and its state folder .tsd/NAME (default: the profile's name)."`
	Port int    `help:"Plan as tsd up --port PORT would: the gateway on this port instead of gateway.port."`
	// Launcher slurm plans the job tsd runs in, or a stand-in job outside one.
	Launcher string `enum:"local,slurm" default:"local" help:"Plan for local (this host) or slurm (each role a step of the Slurm job; outside one, a stand-in job JOBID)."`
}

func (c planCmd) Run() error {
	if c.Running {
		return c.running(os.Stdout, os.Stderr)
	}
	if c.Profile == "" {
		return &exitError{code: 2, msg: "tsd: usage: tsd plan PROFILE, or tsd plan --running [NAME]"}
	}
	facts, err := hostFacts(c.Launcher, c.Profile, profiles.LocalHostFacts(), true)
	if err != nil {
		return err
	}
	live := liveEntries()
	facts = stateFacts(facts, resolvedPath(c.Profile), c.Name, live)
	facts.GatewayPort = c.Port
	if own := ownPorts(resolvedPath(c.Profile), c.Name, live); len(own) > 0 && facts.PortFree != nil {
		free := facts.PortFree
		facts.PortFree = func(p int) bool { return own[p] || free(p) }
	}
	return c.run(os.Stdout, os.Stderr, facts)
}

func (c planCmd) run(stdout, stderr io.Writer, facts profiles.HostFacts) error {
	_, plan, errs := profiles.LoadPlan(c.Profile, facts)
	if len(errs) > 0 {
		return profileErrors(errs)
	}
	if c.Name != "" {
		plan.Name = c.Name // as tsd up --name names the deployment
	}
	return c.print(stdout, stderr, plan)
}

// running prints the plan the daemon runs now.
func (c planCmd) running(stdout, stderr io.Writer) error {
	f, err := c.locate(readVerb("tsd plan --running"), c.Profile)
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	plan, err := supervisor.NewControlClient(f.socket).Plan(ctx)
	if err != nil {
		return unreachable(f, err)
	}
	if err := c.print(stdout, stderr, plan); err != nil || c.JSON {
		return err
	}
	// The SLO planner's proposal beside what runs (docs/architecture.md §4.5).
	if s, err := supervisor.NewControlClient(f.socket).Status(ctx); err == nil && s.Planner != nil {
		renderPlanner(stdout, s.Planner, time.Now())
	}
	return nil
}

func (c planCmd) print(stdout, stderr io.Writer, plan *profiles.Plan) error {
	if !c.ShowSecrets {
		plan = maskedPlan(plan)
	}
	if c.JSON {
		if err := plan.WriteJSON(stdout); err != nil {
			return fmt.Errorf("write plan: %w", err)
		}
		return nil
	}
	for _, w := range plan.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	return renderPlan(stdout, plan)
}

// profileErrors turns profile errors into exit status 1 with one line each.
func profileErrors(errs profiles.Errors) error {
	n := "errors"
	if len(errs) == 1 {
		n = "error"
	}
	return &exitError{code: 1, msg: errs.Error() + fmt.Sprintf("\n%d %s", len(errs), n)}
}

// renderPlan prints one block per role (with a command line that pastes
// into a shell) and one for the gateway.
func renderPlan(w io.Writer, plan *profiles.Plan) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s (%s)\n", plan.Name, plan.ProfilePath)
	for i := range plan.Roles {
		r := &plan.Roles[i]
		gpus := "GPU"
		if plan.Accelerator == profiles.AcceleratorAscend {
			gpus = "NPU"
		}
		if len(r.GPUs) != 1 {
			gpus += "s"
		}
		where := "started by tsd"
		if !r.Local {
			where = "run this on " + r.Host + ":"
		}
		if r.Launcher == profiles.LauncherSlurm {
			// Slurm picks the devices; the step's CUDA_VISIBLE_DEVICES is its.
			fmt.Fprintf(&b, "\nrole %s (%s, gres gpu:%d) a step of Slurm job %s on %s (%s)\n", r.Name, r.Kind, r.SlurmGPUs, plan.SlurmJob, slurmWhere(r), r.NodeAddr)
		} else {
			fmt.Fprintf(&b, "\nrole %s (%s, %s %s) %s\n", r.Name, r.Kind, gpus, strings.Join(r.GPUs, ","), where)
		}
		fmt.Fprintf(&b, "    %s\n", r.CommandLine())
		fmt.Fprintf(&b, "  worker:     %s\n", r.Worker)
		fmt.Fprintf(&b, "  handshake:  %s\n", r.Handshake)
		fmt.Fprintf(&b, "  dist-init:  %s (port cluster %s)\n", r.DistInitAddr, compactPorts(r.PortCluster))
		if r.Bootstrap != "" {
			fmt.Fprintf(&b, "  bootstrap:  %s\n", r.Bootstrap)
		}
		if k := r.KVEvents; k != nil {
			fmt.Fprintf(&b, "  kv events:  %s, replay %s\n", strings.Join(k.Publish, " "), strings.Join(k.Replay, " "))
		}
		if r.Local {
			fmt.Fprintf(&b, "  log:        %s\n", r.LogFile)
		}
		if r.PlannedAs != "" {
			fmt.Fprintf(&b, "  planned as: %s (renamed by tsd apply or scale: the same process keeps that name's socket, ports and log)\n", r.PlannedAs)
		}
	}
	g := &plan.Gateway
	fmt.Fprintf(&b, "\ngateway\n")
	fmt.Fprintf(&b, "  listen:     %s (%s)\n", g.Listen, g.URL)
	fmt.Fprintf(&b, "  mode:       %s\n", g.Mode)
	fmt.Fprintf(&b, "  policies:   %s\n", policiesText(g))
	fmt.Fprintf(&b, "  requests:   %s\n", disaggregationText(g))
	if g.APIKeyEnv != "" {
		fmt.Fprintf(&b, "  api key:    $%s\n", g.APIKeyEnv)
	}
	fmt.Fprintf(&b, "  bootstrap:  hosted by %s\n", g.BootstrapServer)
	if g.ImageURLs {
		fmt.Fprintf(&b, "  images:     http(s) image URLs fetched (gateway.image_urls)\n")
	}
	if t := g.Tracing; t != nil {
		fmt.Fprintf(&b, "  tracing:    %s\n", tracingText(t))
	}
	fmt.Fprintf(&b, "  log:        %s\n", g.LogFile)
	fmt.Fprintf(&b, "  control:    %s\n", plan.ControlSocket)
	fmt.Fprintf(&b, "  workers:\n")
	for _, wk := range g.Workers {
		fmt.Fprintf(&b, "    %-12s %-8s handshake %s  input %s  output %s", wk.Role, wk.Kind, wk.Handshake, wk.Input, wk.Output)
		if wk.DP > 1 {
			fmt.Fprintf(&b, "  ranks %d (identities %d-%d)", wk.DP, wk.EngineIndex, wk.EngineIndex+wk.DP-1)
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tracingText says where traces go and how many (the headers' variable
// by name: its value is a secret).
func tracingText(t *profiles.TracingPlan) string {
	s := fmt.Sprintf("OTLP/HTTP to %s, %g%% of requests sampled (a client's traceparent decides for its own)", t.Endpoint, 100*t.SampleRatio)
	if t.HeadersEnv != "" {
		s += ", headers from $" + t.HeadersEnv
	}
	return s
}

// policiesText is kind=policy for each kind the plan has workers of, in
// the kinds table's order.
func policiesText(g *profiles.GatewayPlan) string {
	var parts []string
	for _, k := range profiles.Kinds {
		if slices.ContainsFunc(g.Workers, func(w profiles.WorkerPlan) bool { return w.Kind == k.Kind }) {
			parts = append(parts, k.Kind+"="+k.PolicyOf(g.Policy))
		}
	}
	return strings.Join(parts, " ")
}

// disaggregationText says which way requests go (gateway.disaggregation)
// and, under conditional, by what rule.
func disaggregationText(g *profiles.GatewayPlan) string {
	switch g.Disaggregation {
	case profiles.DisaggNever:
		return "never disaggregated: every request on an aggregated engine"
	case profiles.DisaggConditional:
		c := g.Conditional
		s := fmt.Sprintf("conditional: aggregated when at most %d uncached prompt tokens and at most %g of the prompt", c.MaxUncachedTokens, c.MaxUncachedRatio)
		if c.PrefillBusy > 0 {
			s += fmt.Sprintf(", or when every prefill has more than %d prompt tokens queued", c.PrefillBusy)
		}
		return s + "; else prefill → decode"
	}
	return "always disaggregated: every request prefill → decode"
}

// compactPorts prints a sorted port list with runs collapsed: 12579,12580,12582-12585.
func compactPorts(ps []int) string {
	var parts []string
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, strconv.Itoa(ps[i])+"-"+strconv.Itoa(ps[j]))
		} else {
			parts = append(parts, strconv.Itoa(ps[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
