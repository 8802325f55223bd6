package supervisor

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/tsd-project/tsd/profiles"
)

// The steps of an apply (docs/architecture.md §4.3): what a plan diff asks,
// in the order that keeps the deployment serving and never puts two
// engines on one GPU at once. A pure function of the running plan, the
// target plan and their diff; the executor (apply.go) carries the steps
// out one batch at a time.

type stepKind int

const (
	stepStop    stepKind = iota // drain and stop an instance that goes, unbind its worker, drop its actor
	stepRename                  // give an instance its new name; its process stays
	stepUpdate                  // take new supervision settings (restart policy, stall action)
	stepGateway                 // the gateway's live settings
	stepStart                   // bind a new instance's worker, add its actor, start it, wait until ready
	stepRestart                 // restart an instance into its new plan and wait until it is ready again
)

func (k stepKind) String() string {
	return [...]string{"stop", "rename", "update", "gateway", "start", "restart"}[k]
}

// applyStep is one thing an apply does, with what it needs.
type applyStep struct {
	Kind stepKind
	Name string // the instance, by its name in the target plan (stop: its running name)
	Was  string // stepRename: its running name
	// Role and Worker: the instance in the target plan (start, restart,
	// update); Worker nil when it has none.
	Role   *profiles.RolePlan
	Worker *profiles.WorkerPlan
	// Rebind: a restart whose gateway-side worker changes; it is
	// stopped, its worker unbound and bound anew, then started.
	Rebind bool
	Why    string // what changes, as the diff says it
}

func (st applyStep) String() string {
	switch st.Kind {
	case stepRename:
		return "rename " + st.Was + " → " + st.Name
	case stepGateway:
		return "gateway settings: " + st.Why
	}
	s := st.Kind.String() + " " + st.Name
	if st.Why != "" {
		s += " (" + st.Why + ")"
	}
	return s
}

// applySteps orders the diff into batches: the steps of one batch run
// together, each batch after the one before is done. Stops come first
// (their GPUs and ports free up), then renames (each to a name already
// free), supervision updates, the gateway's live settings, then starts
// and restarts ordered by the GPUs they need: a start runs beside the
// other starts, a restart on its own (rolling: each ready before the
// next), and one whose GPUs an instance still holds waits until that one
// has moved. GPU moves that wait on each other are refused.
func applySteps(running, target *profiles.Plan, d profiles.PlanDiff) ([][]applyStep, error) {
	var out [][]applyStep
	var stops []applyStep
	renames := map[string]string{} // new name → running name
	var updates, starts, restarts []applyStep
	for _, rc := range d.Roles {
		switch rc.Action {
		case profiles.ActionStop:
			stops = append(stops, applyStep{Kind: stepStop, Name: rc.Name})
			continue
		case profiles.ActionUnchanged:
			continue
		}
		rp, ok := target.Role(rc.Name)
		if !ok {
			return nil, fmt.Errorf("the diff names %s, which the target plan lacks", rc.Name)
		}
		var wp *profiles.WorkerPlan
		if w, ok := target.Gateway.Worker(rc.Name); ok {
			wp = w
		}
		if rc.Was != "" {
			renames[rc.Name] = rc.Was
		}
		why := fieldsText(rc.Fields)
		switch rc.Action {
		case profiles.ActionStart:
			starts = append(starts, applyStep{Kind: stepStart, Name: rc.Name, Role: rp, Worker: wp})
		case profiles.ActionUpdate:
			updates = append(updates, applyStep{Kind: stepUpdate, Name: rc.Name, Role: rp, Why: why})
		case profiles.ActionRestart:
			if !rp.Local {
				// tsd cannot restart what it does not run: it takes the
				// plan, and the operator restarts the engine there.
				updates = append(updates, applyStep{Kind: stepUpdate, Name: rc.Name, Role: rp,
					Why: why + "; it runs on " + rp.Host + ": restart it there (tsd plan --running prints its command)"})
				continue
			}
			was := rc.Name
			if rc.Was != "" {
				was = rc.Was
			}
			rebind := false
			if old, ok := running.Gateway.Worker(was); ok && wp != nil {
				a, b := *old, *wp
				a.Role, b.Role = "", ""
				rebind = !reflect.DeepEqual(a, b)
			} else if ok != (wp != nil) {
				rebind = true
			}
			restarts = append(restarts, applyStep{Kind: stepRestart, Name: rc.Name, Role: rp, Worker: wp, Rebind: rebind, Why: why})
		}
	}
	if len(stops) > 0 {
		out = append(out, stops)
	}
	renamed, err := renameOrder(running, stops, renames)
	if err != nil {
		return nil, err
	}
	for _, st := range renamed {
		out = append(out, []applyStep{st})
	}
	if len(updates) > 0 {
		out = append(out, updates)
	}
	if len(d.Gateway) > 0 {
		out = append(out, []applyStep{{Kind: stepGateway, Why: fieldsText(d.Gateway)}})
	}
	moves, err := gpuOrder(running, stops, renames, starts, restarts)
	if err != nil {
		return nil, err
	}
	return append(out, moves...), nil
}

func fieldsText(fs []profiles.FieldChange) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.String()
	}
	return strings.Join(parts, "; ")
}

// renameOrder orders the renames so each goes to a name nothing holds
// by then (the stops have run).
func renameOrder(running *profiles.Plan, stops []applyStep, renames map[string]string) ([]applyStep, error) {
	held := map[string]bool{}
	for _, r := range running.Roles {
		held[r.Name] = true
	}
	for _, st := range stops {
		delete(held, st.Name)
	}
	var todo []string
	for _, r := range running.Roles { // running order: stable output
		for to, from := range renames {
			if from == r.Name {
				todo = append(todo, to)
			}
		}
	}
	var out []applyStep
	for len(todo) > 0 {
		moved := false
		for i, to := range todo {
			if held[to] {
				continue
			}
			from := renames[to]
			out = append(out, applyStep{Kind: stepRename, Name: to, Was: from})
			delete(held, from)
			held[to] = true
			todo = append(todo[:i], todo[i+1:]...)
			moved = true
			break
		}
		if !moved {
			var pairs []string
			for _, to := range todo {
				pairs = append(pairs, renames[to]+" → "+to)
			}
			return nil, fmt.Errorf("the renames %s wait on each other; apply them in two steps", strings.Join(pairs, ", "))
		}
	}
	return out, nil
}

// holder is one engine on a GPU: its instance and its memory fraction.
type holder struct {
	name string
	frac float64
}

// gpuOrder orders starts and restarts by the GPUs they take: starts first
// (together), restarts one at a time in plan order, and each one only
// once no other engine holds its GPUs (engines that all set
// gpu_memory_utilization may share one).
func gpuOrder(running *profiles.Plan, stops []applyStep, renames map[string]string, starts, restarts []applyStep) ([][]applyStep, error) {
	gone := map[string]bool{}
	for _, st := range stops {
		gone[st.Name] = true
	}
	newName := map[string]string{}
	for to, from := range renames {
		newName[from] = to
	}
	on := map[string][]holder{} // GPU as written → who holds it
	for _, r := range running.Roles {
		if !r.Local || gone[r.Name] {
			continue
		}
		name := r.Name
		if n, ok := newName[name]; ok {
			name = n
		}
		for _, g := range r.GPUs {
			on[g] = append(on[g], holder{name, r.GPUMemoryUtilization})
		}
	}
	fits := func(st applyStep) bool {
		for _, g := range st.Role.GPUs {
			for _, h := range on[g] {
				if h.name != st.Name && (h.frac == 0 || st.Role.GPUMemoryUtilization == 0) {
					return false
				}
			}
		}
		return true
	}
	take := func(st applyStep) {
		for g, hs := range on {
			kept := hs[:0:0]
			for _, h := range hs {
				if h.name != st.Name {
					kept = append(kept, h)
				}
			}
			on[g] = kept
		}
		if st.Role.Local {
			for _, g := range st.Role.GPUs {
				on[g] = append(on[g], holder{st.Name, st.Role.GPUMemoryUtilization})
			}
		}
	}
	pending := append(append([]applyStep(nil), starts...), restarts...)
	var out [][]applyStep
	for len(pending) > 0 {
		i := -1
		for j, st := range pending {
			if fits(st) {
				i = j
				break
			}
		}
		if i < 0 {
			var names []string
			for _, st := range pending {
				names = append(names, st.Name)
			}
			return nil, fmt.Errorf("%s each need GPUs another of them holds until it has moved; apply the moves in two steps", strings.Join(names, ", "))
		}
		st := pending[i]
		pending = append(pending[:i], pending[i+1:]...)
		take(st)
		if last := len(out) - 1; st.Kind == stepStart && last >= 0 && out[last][0].Kind == stepStart {
			out[last] = append(out[last], st)
			continue
		}
		out = append(out, []applyStep{st})
	}
	return out, nil
}
