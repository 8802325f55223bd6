package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/tsd-project/tsd/loadgen"
)

// loadSaturated is the share of its cores past which the load generator,
// not tsd, may be what limits a scaling row.
const loadSaturated = 0.85

// scaleRow is one run of the scaling rows: chat C=512 with tsd on Cores.
type scaleRow struct {
	Cores       int
	Layout      string
	Pinned      bool
	Ran         bool
	Requests    int
	Completed   int
	Tokens      int
	Wall        time.Duration
	TokS        float64
	TSDCPU      time.Duration // tsd's CPU over the run
	LoadProcs   int
	LoadShare   float64 // the busiest load generator's CPU over its cores' time
	LoadCPU     time.Duration
	Err, Note   string
	loadSliceNs []int
}

// busy is tsd's cores busy over the run.
func (r scaleRow) busy() float64 {
	if r.Wall <= 0 {
		return 0
	}
	return r.TSDCPU.Seconds() / r.Wall.Seconds()
}

// scaleRequests is how many requests each scaling run sends: -scale-requests,
// else -requests' figure for C=512 (or its one figure for all), else 20 × 512.
func scaleRequests(o options) int {
	if o.scaleN > 0 {
		return o.scaleN
	}
	if n := o.requests[512]; n > 0 {
		return n
	}
	if o.requestsAll > 0 {
		return o.requestsAll
	}
	return 20 * 512
}

// runScale runs the scaling rows: for each core count a deployment with
// tsd pinned to that many cores, driven by one or more load generator
// processes on cores of their own. A count the machine cannot lay out is
// a row that says why; when none can be pinned, the first runs unpinned
// (so the harness itself is exercised) and says so.
func runScale(o options, tsd, fake, work string, cores int, haveTaskset bool) []scaleRow {
	const c = 512
	n := scaleRequests(o)
	var rows []scaleRow
	ranUnpinned := false
	for _, k := range o.scale {
		l := planScale(o.pin, cores, k, o.loadCores, haveTaskset)
		row := scaleRow{Cores: k, Layout: l.describe(), Pinned: l.pinned, Requests: n, LoadProcs: max(1, len(l.loadSlices))}
		if !l.pinned {
			if ranUnpinned {
				row.Note = "not run: " + l.why
				rows = append(rows, row)
				continue
			}
			ranUnpinned = true
			row.Note = "not pinned (" + l.why + "): tsd is not held to " + plural(k, "core") + "; the harness ran, the figure is no scaling measurement"
		}
		fmt.Printf("scaling: tsd on %s (%s)\n", plural(k, "core"), l.describe())
		d, err := startDeployment(o, l, tsd, fake, work, fmt.Sprintf("scale%d", k), 1, 1)
		if err != nil {
			row.Err = "start tsd: " + firstLine(err.Error())
			rows = append(rows, row)
			continue
		}
		runLoad(o, l, tsd, work, d.base, "chat", 64, 200, d.srv.pid()) // warm-up, not recorded
		row = scaleLoad(o, l, tsd, work, d, c, n, row)
		d.srv.stop(30 * time.Second)
		rows = append(rows, row)
		fmt.Printf("  %d cores: %8.0f tok/s, tsd %.2f cores busy, load generator %.0f%% of its cores (%s) %s\n",
			k, row.TokS, row.busy(), 100*row.LoadShare, plural(row.LoadProcs, "process"), row.Err)
	}
	return rows
}

// scaleLoad drives d with the layout's load generator processes at once,
// c in flight and n requests over all of them, and measures tsd's CPU
// and each process's share of its cores.
func scaleLoad(o options, l layout, tsd, work string, d *deployment, c, n int, row scaleRow) scaleRow {
	slices, sliceN := l.loadSlices, l.loadSliceN
	if len(slices) == 0 {
		slices, sliceN = []string{l.load}, []int{max(1, l.loadN)}
		if !l.pinned {
			sliceN = []int{l.all}
		}
	}
	procs := len(slices)
	type result struct {
		s   loadgen.Summary
		cpu time.Duration
		err string
	}
	res := make([]result, procs)
	t0, err := cpuTicks(d.srv.pid())
	if err != nil {
		row.Err = err.Error()
		return row
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range procs {
		ci, ni := c/procs, n/procs
		if i == procs-1 {
			ci, ni = c-ci*(procs-1), n-ni*(procs-1)
		}
		argv := l.wrap(slices[i], loadArgv(o, tsd, work, d.base, "chat", ci, ni)...)
		out := argv[len(argv)-2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(argv[0], argv[1:]...)
			b, err := cmd.CombinedOutput()
			if ps := cmd.ProcessState; ps != nil {
				res[i].cpu = ps.UserTime() + ps.SystemTime()
			}
			if err != nil {
				res[i].err = fmt.Sprintf("tsd bench: %v: %s", err, firstLine(string(b)))
				return
			}
			raw, err := os.ReadFile(out)
			if err == nil {
				err = json.Unmarshal(raw, &res[i].s)
			}
			if err != nil {
				res[i].err = "read results: " + err.Error()
			}
		}()
	}
	wg.Wait()
	row.Wall = time.Since(start)
	t1, err := cpuTicks(d.srv.pid())
	if err != nil {
		row.Err = err.Error()
		return row
	}
	row.Ran = true
	row.TSDCPU = ticksToDur(t1 - t0)
	row.LoadProcs = procs
	row.loadSliceNs = sliceN
	for i, r := range res {
		if r.err != "" && row.Err == "" {
			row.Err = r.err
		}
		row.Completed += r.s.Completed
		row.Tokens += r.s.TotalOutputTokens
		row.LoadCPU += r.cpu
		if share := r.cpu.Seconds() / (row.Wall.Seconds() * float64(sliceN[i])); share > row.LoadShare {
			row.LoadShare = share
		}
	}
	row.TokS = float64(row.Tokens) / row.Wall.Seconds()
	if row.Err == "" && (row.Completed != n || row.Tokens != n*o.outLen) {
		row.Err = fmt.Sprintf("%d/%d completed, %d output tokens (want %d)", row.Completed, n, row.Tokens, n*o.outLen)
	}
	return row
}

// scaleRatios are each row's tok/s over the first measured pinned row's,
// over linear (k/k0): 1 is perfect scaling; 0 where there is no base.
func scaleRatios(rows []scaleRow) []float64 {
	out := make([]float64, len(rows))
	base := -1
	for i, r := range rows {
		if r.Ran && r.Pinned && r.Err == "" && r.TokS > 0 {
			base = i
			break
		}
	}
	if base < 0 {
		return out
	}
	b := rows[base]
	for i, r := range rows {
		if i >= base && r.Ran && r.Pinned && r.Err == "" && r.TokS > 0 {
			out[i] = (r.TokS / b.TokS) / (float64(r.Cores) / float64(b.Cores))
		}
	}
	return out
}
