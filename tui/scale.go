package tui

import (
	"context"
	"fmt"
	"strings"
)

// Scaler is a backend that can add and remove replicas of a running
// deployment's profile entry (tsd scale; docs/architecture.md §4.3). The
// dashboard's :scale needs it; the daemon's events show the change as it
// runs.
type Scaler interface {
	// Scale sets entry's replicas, the new ones on gpus (in order, tp × dp
	// each) or free GPUs when gpus is empty, and returns once the new
	// state is ready or with what stopped it.
	Scale(ctx context.Context, entry string, replicas int, gpus []string) error
}

// scale is :scale ENTRY=N: asked first, since removing replicas drains
// and stops them, and adding ones loads weights for minutes.
func (p prompts) scale(c command) asked {
	sc, ok := p.b.(Scaler)
	if !ok {
		return asked{note: "this dashboard's backend cannot scale; use tsd scale " + c.arg + "=" + fmt.Sprint(c.replicas)}
	}
	var names []string
	for _, r := range p.s.Roles {
		if r.Group == c.arg {
			names = append(names, r.Name)
		}
	}
	have := len(names)
	var how string
	switch {
	case c.replicas == have:
		return asked{note: fmt.Sprintf("%s has %d replica(s) already", c.arg, have)}
	case c.replicas > have:
		on := "free GPUs"
		if len(c.gpus) > 0 {
			on = "GPU(s) " + strings.Join(c.gpus, ",")
		}
		how = fmt.Sprintf("%d → %d: %d new replica(s) start on %s; the rest are not touched", have, c.replicas, c.replicas-have, on)
	default:
		how = fmt.Sprintf("%d → %d: the last %d drain and stop", have, c.replicas, have-c.replicas)
	}
	what := fmt.Sprintf("scale %s=%d", c.arg, c.replicas)
	entry, n, gpus := c.arg, c.replicas, c.gpus
	return asked{c: p.yesNo(fmt.Sprintf("%s (%s)? [y/n]", what, how), what,
		control(what, func() error { return sc.Scale(context.Background(), entry, n, gpus) }))}
}
