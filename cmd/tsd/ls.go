package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/tsd-project/tsd/daemons"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
)

type lsCmd struct {
	JSON  bool `name:"json" help:"Print the registry entries as JSON."`
	Names bool `name:"names" hidden:"" help:"Print only the names (shell completion)."`
}

// lsRow is one deployment with its roles' readiness, or a dead one with
// the processes it left.
type lsRow struct {
	daemons.Entry
	Ready int `json:"roles_ready"`
	Total int `json:"roles_total"`
	// Reachable is false when the daemon is alive but its socket did not
	// answer within a second.
	Reachable bool `json:"reachable"`
	// Dead: the daemon is gone (killed with its guardians) but Leftovers,
	// verified by pid and start time, still run; `tsd stop NAME` ends them.
	Dead      bool                  `json:"dead,omitempty"`
	Leftovers []supervisor.Leftover `json:"leftovers,omitempty"`
}

func (c lsCmd) Run() error {
	cands := deployments()
	if c.Names {
		for _, d := range cands {
			fmt.Println(d.Name)
		}
		return nil
	}
	rows := make([]lsRow, len(cands))
	for i, d := range cands {
		e := d.Entry
		rows[i] = lsRow{Entry: e, Dead: d.Dead, Leftovers: d.Leftovers}
		if d.Dead {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := supervisor.NewControlClient(e.Socket).Status(ctx)
		cancel()
		if err == nil {
			rows[i].Reachable = true
			rows[i].Total = len(s.Roles)
			for _, r := range s.Roles {
				if r.State == snapshot.StateReady {
					rows[i].Ready++
				}
			}
		}
	}
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "no tsd deployment is running")
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPROFILE\tPID\tUP\tROLES\tGATEWAY")
	now := time.Now()
	var dead []string
	for _, r := range rows {
		roles := "?"
		if r.Reachable {
			roles = fmt.Sprintf("%d/%d", r.Ready, r.Total)
		}
		gw := r.GatewayURL
		if gw == "" {
			gw = "-"
		}
		up := supervisor.HumanDuration(now.Sub(r.StartedAt))
		if r.Dead {
			// The daemon's pid is gone: what is left is what matters.
			roles, gw, up = "dead, "+processes(len(r.Leftovers))+" left", "-", "-"
			dead = append(dead, r.Name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.Name, r.Profile, r.PID, up, roles, gw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range dead {
		fmt.Printf("%s: its daemon was killed and left engines running (they may hold GPUs); `tsd stop %s` stops them\n", n, n)
	}
	return nil
}
