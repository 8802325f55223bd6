package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/tsd-project/tsd/registry"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
)

type lsCmd struct {
	JSON  bool `name:"json" help:"Print the registry entries as JSON."`
	Names bool `name:"names" hidden:"" help:"Print only the names (shell completion)."`
}

// lsRow is one running deployment with its roles' readiness.
type lsRow struct {
	registry.Entry
	Ready int `json:"roles_ready"`
	Total int `json:"roles_total"`
	// Reachable is false when the daemon is alive but its socket did not
	// answer within a second.
	Reachable bool `json:"reachable"`
}

func (c lsCmd) Run() error {
	reg, err := registry.Open("")
	if err != nil {
		return err
	}
	live, err := reg.List()
	if err != nil {
		return err
	}
	if c.Names {
		for _, e := range live {
			fmt.Println(e.Name)
		}
		return nil
	}
	rows := make([]lsRow, len(live))
	for i, e := range live {
		rows[i] = lsRow{Entry: e}
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
		if rows == nil {
			rows = []lsRow{}
		}
		return enc.Encode(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "no tsd deployment is running")
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPROFILE\tPID\tUP\tROLES\tGATEWAY")
	now := time.Now()
	for _, r := range rows {
		roles := "?"
		if r.Reachable {
			roles = fmt.Sprintf("%d/%d", r.Ready, r.Total)
		}
		gw := r.GatewayURL
		if gw == "" {
			gw = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.Name, r.Profile, r.PID, supervisor.HumanDuration(now.Sub(r.StartedAt)), roles, gw)
	}
	return tw.Flush()
}
