package main

import (
	"fmt"
	"strings"
)

// Targets of the serving path, as the "Numbers" name them.
const (
	chatCPUTarget     = 2.0   // tsd CPU-µs per token ≤ 2× bare's, chat SSE
	chatRateTarget    = 0.6   // tsd tok/s ≥ 0.6 of bare's, chat SSE
	genCPUTarget      = 1.5   // tsd CPU-µs per token ≤ 1.5× bare's, /generate
	shareTarget       = 300.0 // µs: the gateway's share of TTFT at C=1, p50
	shareHitTarget    = 100.0 // µs: the same with a tokenizer-cache hit
	scaleTarget       = 0.8   // tok/s ≥ 0.8 × linear from the first core count
	decodePathBenchID = "DecodePath"
	// decodePathAllocsMax is "zero" allocations per token as the decode
	// path's benchmarks measure it (decodePathAllocs).
	decodePathAllocsMax = 0.005
)

// targetRow is one target and what this run measured of it.
type targetRow struct{ what, measured, goal, verdict string }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// pair finds the tsd and bare rows of one endpoint and concurrency.
func pair(rows []loadRow, backend string, c int) (tsd, bare *loadRow) {
	for i := range rows {
		r := &rows[i]
		if r.Backend != backend || r.C != c || r.Err != "" {
			continue
		}
		switch r.Target {
		case "tsd":
			tsd = r
		case "bare":
			bare = r
		}
	}
	return tsd, bare
}

// targets is every target's row: pure, from the measured rows. A target
// this run did not measure says why; an unpinned run's serving verdicts
// are marked indicative.
func targets(l layout, rows []loadRow, share []shareRow, scale []scaleRow, gob []goResult) []targetRow {
	var out []targetRow
	note := ""
	if !l.pinned {
		note = " (not pinned: indicative)"
	}
	ep := map[string]string{"chat": "chat SSE", "generate": "/generate"}
	cpu := func(backend string, c int, goal float64) {
		what := fmt.Sprintf("%s C=%d: tsd / bare CPU-µs per token", ep[backend], c)
		t, b := pair(rows, backend, c)
		if t == nil || b == nil || b.cpuPerToken() == 0 {
			out = append(out, targetRow{what, "–", fmt.Sprintf("≤ %.1f×", goal), fmt.Sprintf("not measured (no clean tsd and bare %s C=%d rows in this run)", backend, c)})
			return
		}
		x := t.cpuPerToken() / b.cpuPerToken()
		out = append(out, targetRow{what, fmt.Sprintf("%.2f× (%.2f / %.2f)", x, t.cpuPerToken(), b.cpuPerToken()), fmt.Sprintf("≤ %.1f×", goal), verdict(x <= goal) + note})
	}
	rate := func(backend string, c int, goal float64) {
		what := fmt.Sprintf("%s C=%d: tsd / bare tok/s", ep[backend], c)
		t, b := pair(rows, backend, c)
		if t == nil || b == nil || b.S.OutputThroughput == 0 {
			out = append(out, targetRow{what, "–", fmt.Sprintf("≥ %.1f", goal), fmt.Sprintf("not measured (no clean tsd and bare %s C=%d rows in this run)", backend, c)})
			return
		}
		x := t.S.OutputThroughput / b.S.OutputThroughput
		out = append(out, targetRow{what, fmt.Sprintf("%.2f (%s / %s)", x, num(t.S.OutputThroughput), num(b.S.OutputThroughput)), fmt.Sprintf("≥ %.1f", goal), verdict(x >= goal) + note})
	}
	for _, c := range []int{64, 512} {
		cpu("chat", c, chatCPUTarget)
		rate("chat", c, chatRateTarget)
	}
	cpu("generate", 512, genCPUTarget)

	for _, hit := range []bool{false, true} {
		what, goal := "gateway's share of TTFT, C=1, p50 of gw_us", shareTarget
		if hit {
			what, goal = "the same, one prompt repeated (tokenizer-cache hit)", shareHitTarget
		}
		var r *shareRow
		for i := range share {
			if share[i].Repeat == hit {
				r = &share[i]
			}
		}
		switch {
		case r == nil:
			out = append(out, targetRow{what, "–", fmt.Sprintf("≤ %.0f µs", goal), "not measured (-skip-share or -skip-serve)"})
		case r.Err != "" || r.Lines == 0:
			out = append(out, targetRow{what, "–", fmt.Sprintf("≤ %.0f µs", goal), "not measured: " + firstLine(r.Err)})
		default:
			out = append(out, targetRow{what, fmt.Sprintf("%.0f µs (tok %.0f, send %.0f, write %.0f)", r.P50, r.Tok, r.Send, r.Write),
				fmt.Sprintf("≤ %.0f µs", goal), verdict(r.P50 <= goal) + note})
		}
	}

	ratios := scaleRatios(scale)
	base := -1
	for i := range scale {
		if ratios[i] > 0 {
			base = i
			break
		}
	}
	for i, r := range scale {
		if i == base {
			continue
		}
		what := fmt.Sprintf("tsd on %d cores: tok/s over linear", r.Cores)
		if base >= 0 {
			what = fmt.Sprintf("tsd on %d → %d cores: tok/s over linear", scale[base].Cores, r.Cores)
		}
		goal := fmt.Sprintf("≥ %.1f", scaleTarget)
		switch {
		case r.Note != "" && !r.Pinned:
			out = append(out, targetRow{what, "–", goal, "not measured: " + r.Note})
		case r.Err != "":
			out = append(out, targetRow{what, "–", goal, "not measured: " + firstLine(r.Err)})
		case ratios[i] == 0:
			out = append(out, targetRow{what, "–", goal, "not measured: no pinned base row"})
		default:
			v := verdict(ratios[i] >= scaleTarget)
			if r.LoadShare > loadSaturated {
				v += fmt.Sprintf(" (load generator at %.0f%% of its cores: may be the limit)", 100*r.LoadShare)
			}
			out = append(out, targetRow{what, fmt.Sprintf("%.2f (%s tok/s vs %s)", ratios[i], num(r.TokS), num(scale[base].TokS)), goal, v})
		}
	}
	if len(scale) == 0 {
		out = append(out, targetRow{"2 → 4 → 8 tsd cores: tok/s over linear", "–", fmt.Sprintf("≥ %.1f", scaleTarget), "not measured (-scale \"\")"})
	}

	out = append(out, decodePathAllocs(gob))
	return out
}

// decodePathAllocs is the decode path's allocation target, one row: the
// worst allocs/token of the Benchmark…DecodePath cases (each prints its
// own line, e.g. BenchmarkDecodePathChat/C=64/tok=1), to three decimals,
// met below 0.005: zero to the precision that steady-state figure has.
// What it still counts is the lane's token arena and the chat text
// arena taking a new block now and then (gateway/lane/sink.go,
// gateway/openai/run.go), a few ten-thousandths a token, and the noise
// of a 64-token request's setup against a 16-token one's. Without those
// results it says why: the Go benchmarks were skipped, their binary
// failed or was not built, or it printed no such lines.
func decodePathAllocs(gob []goResult) targetRow {
	what, goal := "allocations per token on the decode path (lane read → HTTP write)", fmt.Sprintf("0 (< %.3f)", decodePathAllocsMax)
	var worst *goBench
	n := 0
	for _, g := range gob {
		for i, r := range g.results {
			a, ok := r.Metrics["allocs/token"]
			if !ok || !strings.Contains(r.Name, decodePathBenchID) {
				continue
			}
			n++
			if worst == nil || a > worst.Metrics["allocs/token"] {
				worst = &g.results[i]
			}
		}
	}
	if worst != nil {
		a := worst.Metrics["allocs/token"]
		return targetRow{what, fmt.Sprintf("%.3f (worst of %d: `%s`)", a, n, strings.TrimPrefix(worst.Name, "Benchmark")), goal, verdict(a < decodePathAllocsMax)}
	}
	if len(gob) == 0 {
		return targetRow{what, "–", goal, "not measured (-skip-go)"}
	}
	for _, g := range gob {
		if strings.Contains(g.spec.bench, decodePathBenchID) && g.err != "" {
			return targetRow{what, "–", goal, "not measured: " + firstLine(g.err)}
		}
	}
	return targetRow{what, "–", goal, "not measured: no Benchmark…" + decodePathBenchID + " with allocs/token in this run's Go benchmarks"}
}

// renderTargets is the targets table.
func renderTargets(l layout, o options, rows []loadRow, share []shareRow, scale []scaleRow, gob []goResult) string {
	var b strings.Builder
	b.WriteString("## Targets\n\nThe serving path's targets, each against this run's figure (the rows below give the detail). ")
	if !l.pinned {
		fmt.Fprintf(&b, "This run was not pinned (%s): tsd, its engines and the load generator shared the cores, so the verdicts are indicative only; the targets are meant for the pinned run on a 16-core host (bench/README.md). ", l.why)
	}
	b.WriteString("\n\n| target | measured | goal | verdict |\n|---|---:|---|---|\n")
	for _, t := range targets(l, rows, share, scale, gob) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.what, t.measured, t.goal, cell(t.verdict))
	}
	b.WriteString("\n")
	return b.String()
}

// renderShare is the gateway-share-of-TTFT table.
func renderShare(share []shareRow, o options) string {
	if len(share) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## The gateway's share of TTFT\n\nChat SSE at C=1 through tsd, %d requests each, %d prompt tokens. Each request's access line carries `gw_us`, the microseconds tsd itself added before the first byte "+
		"(accept → tokenized → legs sent, plus first token from the lane → first byte written; the engine's time between legs sent and first token is left out; gateway/reqtime, docs/protocol.md §11.10); the driver reads them from the run's gateway.log. "+
		"The repeated run sends the same chat messages every time: with a tokenizer cache, its `gw_tok_us` is the cache hit.\n\n", o.shareN, o.inLen)
	b.WriteString("| prompts | requests | TTFT p50 ms (client) | gw_us p50 | gw_us p90 | gw_tok_us p50 | gw_send_us p50 | gw_write_us p50 | access lines |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range share {
		if r.Err != "" && r.Lines == 0 {
			fmt.Fprintf(&b, "| %s | %d | – | – | – | – | – | – | %s |\n", r.Name, o.shareN, cell(firstLine(r.Err)))
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %.2f | %.0f | %.0f | %.0f | %.0f | %.0f | %d |\n", r.Name, r.Run.N, r.Run.S.MedianTTFTms, r.P50, r.P90, r.Tok, r.Send, r.Write, r.Lines)
	}
	b.WriteString("\n")
	return b.String()
}

// renderScale is the scaling table.
func renderScale(rows []scaleRow, o options) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Scaling with tsd's cores\n\nChat SSE C=512, %d requests of %d tokens, against a fresh 1P1D deployment per row with tsd pinned to the row's cores, the engines and the load generator on cores of their own (`-load-cores`, default every core left; split into `tsd bench` processes of about 4 cores, which share the requests and the concurrency). "+
		"Over linear is the row's tok/s over the first row's, divided by the ratio of their cores. The load generator's share is the busiest process's CPU over its cores' time: above %.0f%% it, not tsd, may be the limit.\n\n", scaleRequests(o), o.outLen, 100*loadSaturated)
	b.WriteString("| tsd cores | tok/s | over linear | tsd cores busy | load generator | its share of its cores | layout |\n|---:|---:|---:|---:|---|---:|---|\n")
	ratios := scaleRatios(rows)
	for i, r := range rows {
		if !r.Ran {
			msg := r.Note
			if r.Err != "" {
				msg = r.Err
			}
			fmt.Fprintf(&b, "| %d | – | – | – | – | – | %s |\n", r.Cores, cell(firstLine(msg)))
			continue
		}
		lin := "–"
		if ratios[i] > 0 {
			lin = fmt.Sprintf("%.2f", ratios[i])
		}
		share := fmt.Sprintf("%.0f%%", 100*r.LoadShare)
		if r.LoadShare > loadSaturated {
			share += " **saturated**"
		}
		layout := r.Layout
		if r.Note != "" {
			layout = r.Note
		}
		if r.Err != "" {
			layout += "; " + firstLine(r.Err)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %.2f | %s | %s | %s |\n", r.Cores, num(r.TokS), lin, r.busy(), plural(r.LoadProcs, "process"), share, cell(layout))
	}
	for _, r := range rows {
		if r.Ran && r.LoadShare > loadSaturated {
			fmt.Fprintf(&b, "\n**Warning**: at %d tsd cores the load generator used %.0f%% of its cores: give it more (`-load-cores`, a bigger host) before reading the ratio.\n", r.Cores, 100*r.LoadShare)
		}
	}
	b.WriteString("\n")
	return b.String()
}
