package tui

import (
	"context"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/tsd-project/tsd/snapshot"
)

// overviewPage: the gateway line, the roles table and the GPU panel.
type overviewPage struct {
	m        *Model
	w, h     int
	selected int    // the selected row's role (a group's first member)
	sel      string // the selected row's key (dispRow.key): it survives re-sorting
	offset   int    // first table row shown
	// open holds the summary rows opened with →/enter ("g:GROUP" for a
	// role's replicas, "r:NAME" for an instance's ranks), per role.
	open map[string]bool
	rows []dispRow // the last layout (reused)
	// Per row while a frame renders: what the ROLE cell says and the
	// gateway's accounting for the row (nil: none).
	curLabel   string
	curTraffic *snapshot.RoleTraffic
	curGPUMem  []gpuMem // a group's memory per GPU; nil: the row's own
	traffic    map[string]*snapshot.RoleTraffic
	painters   *[numPaints]painter
	// The widest name, state and GPU cells seen so far: columns only ever
	// widen, so a role changing state does not shift every column.
	nameW, stateW, gpuW int
	tableY, tableRows   int // where the last frame drew the table's rows
}

// rowAt maps a row of the page body to the table row drawn there.
func (p *overviewPage) rowAt(y int) (int, bool) {
	i := y - p.tableY
	if i < 0 || i >= p.tableRows {
		return 0, false
	}
	i += p.offset
	return i, i < len(p.layout())
}

// layout lays out the table rows for the current snapshot.
func (p *overviewPage) layout() []dispRow {
	p.rows = buildRows(&p.m.snap, p.open, p.rows)
	return p.rows
}

// cursor is the index of the selected row: by key, else the row of the
// selected role (or the closed group holding it), else the first.
func (p *overviewPage) cursor(rows []dispRow) int {
	s := &p.m.snap
	for i, d := range rows {
		if d.key(s) == p.sel {
			return i
		}
	}
	// The selected role went away (a smaller deployment): stay near it.
	sel := max(0, min(p.selected, len(s.Roles)-1))
	for i, d := range rows {
		if d.role == sel && d.kind != rowRank {
			return i
		}
	}
	if sel < len(s.Roles) {
		if g := s.Roles[sel].Group; g != "" {
			for i, d := range rows {
				if d.kind == rowGroup && d.group == g {
					return i
				}
			}
		}
	}
	return 0
}

// setCursor selects row i (clamped).
func (p *overviewPage) setCursor(rows []dispRow, i int) {
	if len(rows) == 0 {
		p.selected, p.sel = 0, ""
		return
	}
	i = max(0, min(i, len(rows)-1))
	p.sel = rows[i].key(&p.m.snap)
	p.selected = rows[i].role
}

// selectRole selects role instance i, opening its group if it is closed.
func (p *overviewPage) selectRole(i int) {
	s := &p.m.snap
	if i < 0 || i >= len(s.Roles) {
		return
	}
	p.selected, p.sel = i, "r:"+s.Roles[i].Name
	if g := s.Roles[i].Group; g != "" {
		if p.open == nil {
			p.open = map[string]bool{}
		}
		p.open["g:"+g] = true
	}
}

func (p *overviewPage) current() (dispRow, bool) {
	rows := p.layout()
	if len(rows) == 0 {
		return dispRow{}, false
	}
	return rows[p.cursor(rows)], true
}

// toggle opens or closes the summary row d; closing selects it.
func (p *overviewPage) toggle(d dispRow, open bool) {
	s := &p.m.snap
	if p.open == nil {
		p.open = map[string]bool{}
	}
	k := "g:" + d.group
	if d.kind != rowGroup {
		k = "r:" + s.Roles[d.role].Name
	}
	if open {
		p.open[k] = true
		return
	}
	delete(p.open, k)
	p.sel = k
}

func (p *overviewPage) SetSize(w, h int) { p.w, p.h = w, h }
func (p *overviewPage) Capturing() bool  { return false }

func (p *overviewPage) ShortHelp() []key.Binding {
	k := p.m.c.Keys
	return []key.Binding{k.Up, k.Down, k.Inspect, k.Logs, k.Restart, k.StopStart, k.RestartAll, k.Sort, k.Events, k.Command}
}

func (p *overviewPage) clamp() {
	rows := p.layout()
	p.setCursor(rows, p.cursor(rows))
}

func (p *overviewPage) role() (snapshot.RoleStatus, bool) {
	rs := p.m.snap.Roles
	if p.selected < 0 || p.selected >= len(rs) {
		return snapshot.RoleStatus{}, false
	}
	return rs[p.selected], true
}

func (p *overviewPage) Update(msg tea.Msg) tea.Cmd {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok {
		return nil
	}
	keys := p.m.c.Keys
	rows := p.layout()
	cur := p.cursor(rows)
	switch {
	case key.Matches(k, keys.Up):
		p.setCursor(rows, cur-1)
		return nil
	case key.Matches(k, keys.Down):
		p.setCursor(rows, cur+1)
		return nil
	case key.Matches(k, keys.Top):
		p.setCursor(rows, 0)
		return nil
	case key.Matches(k, keys.Bottom):
		p.setCursor(rows, len(rows)-1)
		return nil
	case key.Matches(k, keys.MergedLogs):
		return p.m.navigate(pageLogs, "")
	case key.Matches(k, keys.Events):
		return p.m.navigate(pageEvents, "")
	case key.Matches(k, keys.Sort):
		// o cycles: plan order, then each sort key.
		next := ""
		if p.m.sortBy == "" {
			next = sortKeys[0]
		} else {
			for i, k := range sortKeys {
				if k == p.m.sortBy && i+1 < len(sortKeys) {
					next = sortKeys[i+1]
				}
			}
		}
		p.m.setSort(next)
		return nil
	}
	if len(rows) == 0 {
		return nil
	}
	d := rows[cur]
	s := &p.m.snap
	switch {
	case key.Matches(k, keys.Expand) && d.expandable(s):
		p.toggle(d, true)
		return nil
	case key.Matches(k, keys.Collapse):
		switch {
		case d.kind == rowRank:
			p.toggle(dispRow{kind: rowRole, role: d.role}, false)
		case d.expandable(s) && p.open[d.key(s)]:
			p.toggle(d, false)
		case d.group != "":
			p.toggle(dispRow{kind: rowGroup, group: d.group}, false)
		}
		return nil
	}
	if d.kind == rowGroup {
		// A summary acts on the whole role: enter opens it, R restarts
		// its replicas one at a time; the rest need one replica.
		switch {
		case key.Matches(k, keys.Inspect):
			p.toggle(d, !p.open["g:"+d.group])
		case key.Matches(k, keys.RestartAll):
			rollingAsk(p.m, s.Roles[d.role])
		case key.Matches(k, keys.Logs, keys.Restart, keys.StopStart):
			p.m.flash = d.group + " has " + itoa(len(d.members)) + " replicas: → opens them, then pick one"
		}
		return nil
	}
	return roleKey(p.m, k, s.Roles[d.role])
}

// rollingAsk asks for a rolling restart of every role of r's kind: one
// at a time, each ready again before the next, so the others carry the
// traffic.
func rollingAsk(m *Model, r snapshot.RoleStatus) {
	var names []string
	inFlight := 0
	for _, o := range m.snap.Roles {
		if o.Kind == r.Kind && !o.Remote {
			names = append(names, o.Name)
			inFlight += o.InFlight
		}
	}
	if len(names) == 0 {
		m.flash = r.Name + " runs elsewhere; tsd cannot restart it"
		return
	}
	kind, b := r.Kind, m.b
	what := "rolling restart of " + strings.Join(names, ", ")
	m.ask(fmt.Sprintf("%s (one at a time, each drained)? %s [y/n]", what, inFlightText(inFlight)), what,
		control(what, func() error { return b.RollingRestart(context.Background(), kind, false, nil) }))
}

// inFlightText says how many requests a restart or stop would drain.
func inFlightText(n int) string {
	switch n {
	case 0:
		return "no request in flight"
	case 1:
		return "1 request in flight drains first"
	}
	return fmt.Sprintf("%d requests in flight drain first", n)
}

// roleKey handles the keys that act on one role; the overview and the
// inspector share it.
func roleKey(m *Model, k tea.KeyPressMsg, r snapshot.RoleStatus) tea.Cmd {
	keys := m.c.Keys
	b := m.b
	name := r.Name
	switch {
	case key.Matches(k, keys.Inspect):
		return m.navigate(pageInspector, name)
	case key.Matches(k, keys.Logs):
		return m.navigate(pageLogs, name)
	case key.Matches(k, keys.Restart):
		m.ask(fmt.Sprintf("restart %s? %s [y/n]", name, inFlightText(r.InFlight)), "restart "+name, func() tea.Msg {
			err := b.Restart(name)
			msg := controlDoneMsg{what: "restart " + name, err: err}
			if err == nil {
				msg.restarted = name
			}
			return msg
		})
	case key.Matches(k, keys.StopStart):
		if running(r.State) {
			// Stopping a serving role loses its capacity (and, with real
			// weights, minutes to bring it back): ask first.
			m.ask(fmt.Sprintf("stop %s? %s [y/n]", name, inFlightText(r.InFlight)), "stop "+name,
				control("stop "+name, func() error { return b.Stop(name) }))
			return nil
		}
		return m.run("start "+name, func() error { return b.Start(name) })
	case key.Matches(k, keys.RestartAll):
		rollingAsk(m, r)
	}
	return nil
}

func (p *overviewPage) View() string {
	m := p.m
	st := m.c.Styles
	s := &m.snap
	out := p.gatewayLines()
	gpu := p.gpuLines()
	// The table gets its rows first, but never squeezes the GPU panel below
	// a summary; events only fill rows nobody else wants.
	fixed := len(out) + 1 + 1 // table header, blank line before the GPUs
	rows := p.layout()
	cur := p.cursor(rows)
	detail := p.detailLine(rows, cur)
	if detail != "" {
		fixed++
	}
	want := max(len(rows), 1)
	if short := min(want, 3) - (p.h - fixed - len(gpu)); short > 0 {
		gpu = gpu[:max(1, len(gpu)-short)]
	}
	tableRows := max(1, min(want, p.h-fixed-len(gpu)))
	p.indexTraffic()
	cols := p.columns()
	ps := p.paints()
	out = append(out, ps[pHeader].wrap(fit(p.row(cols, nil, false, false), p.w)))
	if cur < p.offset {
		p.offset = cur
	}
	if cur >= p.offset+tableRows {
		p.offset = cur - tableRows + 1
	}
	p.offset = max(0, min(p.offset, len(rows)-tableRows))
	p.tableY, p.tableRows = len(out), tableRows
	shown := 0
	for i := p.offset; i < len(rows) && shown < tableRows; i++ {
		d := rows[i]
		var r *snapshot.RoleStatus
		var tmp snapshot.RoleStatus
		switch d.kind {
		case rowGroup:
			tmp = groupStatus(s, d)
			r = &tmp
			p.curTraffic = groupTraffic(p.traffic, s, d.members)
			p.curGPUMem = groupGPUMem(s, d.members)
		case rowRank:
			tmp = rankStatus(&s.Roles[d.role], d.rank)
			r = &tmp
			p.curTraffic = nil
		default:
			r = &s.Roles[d.role]
			p.curTraffic = p.traffic[r.Name]
		}
		if d.kind != rowGroup {
			p.curGPUMem = nil
		}
		p.curLabel = rowLabel(s, d, p.open)
		var line string
		if i == cur {
			line = ps[pSelected].wrap(fit(p.row(cols, r, false, true), p.w))
		} else {
			line = p.row(cols, r, true, false)
		}
		out = append(out, line)
		shown++
	}
	if len(s.Roles) == 0 {
		out = append(out, st.Faint.Render("  no roles yet"))
		shown++
	}
	for ; shown < tableRows; shown++ {
		out = append(out, "")
	}
	if detail != "" {
		out = append(out, detail)
	}
	out = append(out, "")
	out = append(out, gpu...)
	events := p.eventLines()
	// Trends take the rows below the GPUs, leaving the events up to half
	// of them (and three lines) when there are any: one restart writes
	// about nine events (stop, GPU release, phases, ready), which must
	// stay in view together.
	if room := p.h - len(out) - 1; room >= 3 {
		keep := 0
		if len(events) > 0 {
			keep = min(len(events)+1, max(3, room/2))
		}
		if tl := m.trends.lines(st, "gpu", p.w, room-keep); len(tl) > 0 {
			out = append(out, "")
			out = append(out, tl...)
		}
	}
	if len(events) > 0 {
		if room := p.h - len(out) - 1; room >= 2 {
			if len(events) > room {
				events = append(events[:1], events[len(events)-room+1:]...)
			}
			out = append(out, "")
			out = append(out, events...)
		}
	}
	return screen(out, p.w, p.h)
}

func (p *overviewPage) gatewayLines() []string {
	st := p.m.c.Styles
	g := p.m.snap.Gateway
	ready := st.Busy.Render("not ready")
	if g.Ready {
		ready = st.Good.Render("ready")
	}
	parts := []string{p.paints()[pTitle].wrap("gateway") + " " + orDash(g.URL)}
	if g.Mode != "" {
		parts = append(parts, "mode "+g.Mode)
	}
	// Rates as the trends smooth them (raw per-snapshot rates jitter).
	reqRate, tokRate := g.ReqPerSec, g.TokPerSec
	if p.m.trends.req.len() > 0 {
		reqRate, tokRate = p.m.trends.smoothed()
	}
	parts = append(parts, ready,
		ftoa(reqRate, 1)+" req/s",
		ftoa(tokRate, 0)+" tok/s",
		fmt.Sprintf("%d in flight", g.InFlight),
		fmt.Sprintf("%d req", g.Requests),
	)
	errs := fmt.Sprintf("%d errors", g.Errors)
	if g.Errors > 0 {
		errs = st.Bad.Render(errs)
	}
	parts = append(parts, errs)
	if g.Note != "" {
		parts = append(parts, st.Warn.Render(g.Note))
	}
	if g.Problem != "" {
		parts = append(parts, st.Bad.Render(g.Problem))
	}
	return wrapParts("", "  ", parts, " · ", p.w)
}

// column is one roles-table column. Optional columns are dropped, lowest
// priority first, when the window is narrow.
type column struct {
	title    string
	width    int
	right    bool
	priority int // 0: always shown
	cell     func(p *overviewPage, r *snapshot.RoleStatus) (string, paint)
}

func (p *overviewPage) columns() []column {
	const plain = pPlain
	now := p.m.c.Now()
	p.nameW, p.stateW, p.gpuW = max(p.nameW, 4), max(p.stateW, 5), max(p.gpuW, 4)
	for i := range p.m.snap.Roles {
		r := &p.m.snap.Roles[i]
		name := len(r.Name)
		if r.Group != "" {
			// Listed under its group (indented), or the group's "+ NAME ×N".
			name = max(name+2, len(r.Group)+6)
		}
		p.nameW = max(p.nameW, name)
		p.stateW = max(p.stateW, width(stateText(r, now)+breakerMark(&p.m.snap, r.Name)))
		p.gpuW = max(p.gpuW, len(gpuText(&p.m.snap, r)))
	}
	for _, d := range p.rows {
		if d.kind == rowGroup {
			g := groupStatus(&p.m.snap, d)
			p.stateW = max(p.stateW, width(stateText(&g, now)))
		}
	}
	stateMax := 28
	if p.w >= 120 {
		stateMax = 36
	}
	nameW, stateW, gpuW := min(p.nameW, 24), min(p.stateW, stateMax), min(p.gpuW, 11)
	all := []column{
		{"ROLE", nameW, false, 0, func(p *overviewPage, r *snapshot.RoleStatus) (string, paint) {
			return p.curLabel, plain
		}},
		{"KIND", 7, false, 3, func(_ *overviewPage, r *snapshot.RoleStatus) (string, paint) {
			return r.Kind, plain
		}},
		// Which GPUs a role holds outranks its traffic figures, so the
		// gateway's per-role columns never push it off a 120-column screen.
		{deviceLabel(p.m.snap.GPUInfo) + "S", gpuW, false, 3, func(p *overviewPage, r *snapshot.RoleStatus) (string, paint) {
			return gpuText(&p.m.snap, r), plain
		}},
		{"STATE", stateW, false, 0, func(p *overviewPage, r *snapshot.RoleStatus) (string, paint) {
			if mark := breakerMark(&p.m.snap, r.Name); mark != "" {
				return stateText(r, now) + mark, pWarn
			}
			return stateText(r, now), statePaint(r.State)
		}},
		{"UPTIME", 6, true, 2, func(_ *overviewPage, r *snapshot.RoleStatus) (string, paint) {
			if r.StartedAt.IsZero() || !running(r.State) {
				return "-", plain
			}
			return humanDuration(now.Sub(r.StartedAt)), plain
		}},
		{"RST", 3, true, 1, func(_ *overviewPage, r *snapshot.RoleStatus) (string, paint) {
			if r.Restarts > 0 {
				return itoa(r.Restarts), pWarn
			}
			return "0", plain
		}},
		{"RANKS", 5, true, 0, func(_ *overviewPage, r *snapshot.RoleStatus) (string, paint) {
			if r.RanksExpected == 0 {
				return "-", plain
			}
			s := fmt.Sprintf("%d/%d", r.RanksRegistered, r.RanksExpected)
			if r.RanksRegistered == r.RanksExpected {
				return s, pGood
			}
			return s, pBusy
		}},
		{"INFL", 4, true, 2, func(p *overviewPage, r *snapshot.RoleStatus) (string, paint) {
			if t := p.curTraffic; t != nil {
				return itoa(t.InFlight), plain // the gateway's count, as /metrics has it
			}
			return itoa(r.InFlight), plain
		}},
		{"CPU", 5, true, 5, func(_ *overviewPage, r *snapshot.RoleStatus) (string, paint) {
			if r.Proc == nil {
				return "-", plain
			}
			return ftoa(r.Proc.CPUPercent, 0) + "%", plain
		}},
		{"RSS", 9, true, 6, func(_ *overviewPage, r *snapshot.RoleStatus) (string, paint) {
			if r.Proc == nil {
				return "-", plain
			}
			return humanBytes(r.Proc.RSSBytes), plain
		}},
		{"GPU MEM", 9, true, 5, func(p *overviewPage, r *snapshot.RoleStatus) (string, paint) {
			if t, ok := noTelemetryCell(r); ok {
				return t, pFaint
			}
			if p.curGPUMem != nil {
				return gpuMemCell(p.curGPUMem, 0), plain
			}
			if r.Name == "" {
				return "", plain // a rank row
			}
			return gpuMemCell(roleGPUMem(&p.m.snap, r.Name), r.GPUMemB), plain
		}},
	}
	if len(p.m.snap.Gateway.Roles) > 0 {
		// The gateway's own per-role accounting: what /metrics says.
		traffic := []column{
			{"REQ/S", 6, true, 2, func(p *overviewPage, _ *snapshot.RoleStatus) (string, paint) {
				if t := p.curTraffic; t != nil {
					return ftoa(t.ReqPerS, 1), plain
				}
				return "-", plain
			}},
			{"TOK/S", 7, true, 3, func(p *overviewPage, _ *snapshot.RoleStatus) (string, paint) {
				if t := p.curTraffic; t != nil {
					return ftoa(t.TokPerS, 0), plain
				}
				return "-", plain
			}},
			{"ERR", 4, true, 2, func(p *overviewPage, _ *snapshot.RoleStatus) (string, paint) {
				if t := p.curTraffic; t != nil {
					if t.Errors > 0 {
						return utoa(t.Errors), pBad
					}
					return "0", plain
				}
				return "-", plain
			}},
			{"TTFT p50/99", 11, true, 4, func(p *overviewPage, _ *snapshot.RoleStatus) (string, paint) {
				if t := p.curTraffic; t != nil && t.TTFTp99 > 0 {
					return fmtLatency(t.TTFTp50) + "/" + fmtLatency(t.TTFTp99), plain
				}
				return "-", plain
			}},
			{"ITL p50/99", 11, true, 5, func(p *overviewPage, _ *snapshot.RoleStatus) (string, paint) {
				if t := p.curTraffic; t != nil && t.ITLp99 > 0 {
					return fmtLatency(t.ITLp50) + "/" + fmtLatency(t.ITLp99), plain
				}
				return "-", plain
			}},
		}
		// After INFL: load first, then the process columns.
		for i, c := range all {
			if c.title == "INFL" {
				all = append(all[:i+1], append(traffic, all[i+1:]...)...)
				break
			}
		}
	}
	const gutter, minReason = 2, 12
	total := func(cs []column) int {
		t := gutter + minReason
		for _, c := range cs {
			t += c.width + 1
		}
		return t
	}
	for lvl := 6; lvl > 0 && total(all) > p.w; lvl-- {
		kept := all[:0:0]
		for _, c := range all {
			if c.priority < lvl {
				kept = append(kept, c)
			}
		}
		all = kept
	}
	used := gutter
	for _, c := range all {
		used += c.width + 1
	}
	all = append(all, column{"REASON", max(p.w-used, 0), false, 0, func(_ *overviewPage, r *snapshot.RoleStatus) (string, paint) {
		if r.LogError != "" {
			// Its log cannot be written (a full disk): the engine runs on,
			// but nothing it says is kept until writes work again.
			return strings.TrimSuffix(r.LogError+"; "+r.Reason, "; "), pBad
		}
		reason := liveReason(r)
		if r.State == snapshot.StateFailed || r.State == snapshot.StateStalled {
			return reason, pBad // what the operator must act on stands out
		}
		return reason, pFaint
	}})
	return all
}

// row renders one table line; r == nil renders the header.
func (p *overviewPage) row(cols []column, r *snapshot.RoleStatus, styled, selected bool) string {
	var b strings.Builder
	if r != nil && selected {
		b.WriteString("▸ ")
	} else {
		b.WriteString("  ")
	}
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(' ')
		}
		if r == nil {
			if c.right {
				b.WriteString(fitRight(c.title, c.width))
			} else {
				b.WriteString(fit(c.title, c.width))
			}
			continue
		}
		text, style := c.cell(p, r)
		var cell string
		if c.right {
			cell = fitRight(text, c.width)
		} else {
			cell = fit(text, c.width)
		}
		if i == len(cols)-1 {
			cell = strings.TrimRight(cell, " ")
		}
		if styled && style != pPlain {
			cell = p.paints()[style].wrap(cell)
		}
		b.WriteString(cell)
	}
	return strings.TrimRight(b.String(), " ")
}

// stateText is the state word, always printed, with the startup phase;
// a draining role says how much is left and for how long (a stalled
// one's why is in the REASON column).
func stateText(r *snapshot.RoleStatus, now time.Time) string {
	s := r.State
	if s == "" {
		s = "unknown"
	}
	switch {
	case r.State == snapshot.StateDraining && !r.DrainDeadline.IsZero():
		left := max(r.DrainDeadline.Sub(now), 0)
		return fmt.Sprintf("%s · %d in flight · %s left", s, r.DrainInFlight, humanDuration(left.Round(time.Second)))
	case r.State == snapshot.StateBackoff && !r.NextTryAt.IsZero():
		return s + " · next try in " + countdown(r.NextTryAt, now)
	case r.Progress != nil && (r.State == snapshot.StateStarting || r.State == snapshot.StateHandshaking):
		return s + " " + progressText(r.Progress)
	case r.Phase != "" && r.State != snapshot.StateReady:
		s += " · " + r.Phase
	}
	return s
}

// detailLine spells out the selected row's trouble in full under the
// table (the REASON cell is often too narrow for it): why it failed,
// stalled or crashed, or waits in backoff. "" when there is none.
func (p *overviewPage) detailLine(rows []dispRow, cur int) string {
	if cur >= len(rows) || rows[cur].kind == rowRank {
		return ""
	}
	s := &p.m.snap
	d := rows[cur]
	r := &s.Roles[d.role]
	if d.kind == rowGroup {
		g := groupStatus(s, d)
		r = &g
	}
	st := p.m.c.Styles
	var style lipgloss.Style
	switch r.State {
	case snapshot.StateFailed, snapshot.StateStalled, snapshot.StateCrashed:
		style = st.Bad
	case snapshot.StateBackoff:
		style = st.Warn
	default:
		return ""
	}
	if r.Reason == "" {
		return ""
	}
	name := r.Name
	if d.kind == rowGroup {
		name = "" // a group's reason already names its member
	} else {
		name += " " + r.State + ": "
	}
	text := "  ↳ " + name + liveReason(r)
	if ansi.StringWidth(text) > p.w {
		text = ansi.Truncate(text, p.w, "…")
	}
	return style.Render(text)
}

// liveReason is the reason without the backoff delay as first set ("next
// try in 16s"): the STATE text counts down to NextTryAt instead.
func liveReason(r *snapshot.RoleStatus) string {
	if !r.NextTryAt.IsZero() {
		if i := strings.Index(r.Reason, "; next try in "); i >= 0 {
			return r.Reason[:i]
		}
	}
	return r.Reason
}

// countdown is the whole seconds left until t, rounded up (a second
// shows until it has fully passed), never below 0.
func countdown(t, now time.Time) string {
	left := t.Sub(now)
	if left <= 0 {
		return "0s"
	}
	return humanDuration((left + time.Second - 1).Truncate(time.Second))
}

// progressBarW is the width of a startup progress bar in the STATE cell.
const progressBarW = 8

// progressText is a startup step with the engine's own progress through
// it: "weights ██████░░ 5/11".
func progressText(p *snapshot.Progress) string {
	name := p.Phase
	switch name {
	case "loading weights":
		name = "weights"
	case "graph capture":
		name = "graphs"
	}
	n := int(p.Frac*progressBarW + 0.5)
	n = max(0, min(n, progressBarW))
	text := p.Text
	if text == "" {
		text = itoa(int(p.Frac*100+0.5)) + "%"
	}
	// The bar and the count first: a narrow STATE column cuts the name.
	return strings.Repeat("█", n) + strings.Repeat("░", progressBarW-n) + " " + text + " " + name
}

// indexTraffic maps role names to the gateway's per-role accounting for
// this frame.
func (p *overviewPage) indexTraffic() {
	if p.traffic == nil {
		p.traffic = map[string]*snapshot.RoleTraffic{}
	}
	clear(p.traffic)
	tr := p.m.snap.Gateway.Roles
	for i := range tr {
		p.traffic[tr[i].Role] = &tr[i]
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (p *overviewPage) gpuLines() []string {
	st := p.m.c.Styles
	s := &p.m.snap
	info := s.GPUInfo
	label := deviceLabel(info)
	head := p.paints()[pTitle].wrap(label + "s")
	if info.Provider != "" {
		head += " · " + info.Provider
	}
	if info.Simulated {
		head += " · " + st.Warn.Render("simulated")
	}
	if len(s.GPUs) == 0 {
		note := info.Note
		if note == "" {
			note = "no " + label + " readings"
		}
		return []string{head + " · " + note}
	}
	// The fake provider's note only repeats "simulated"; other notes
	// (mapping problems, a fallback to nvidia-smi) are worth the space.
	if info.Note != "" && !(info.Simulated && strings.HasPrefix(info.Note, "simulated")) {
		head += " · " + info.Note
	}
	lines := []string{head}
	nameW := 0
	for _, g := range s.GPUs {
		nameW = max(nameW, len(g.Name))
	}
	nameW = min(nameW, 22)
	barW := 10
	if p.w < 100 {
		barW = 5
		nameW = min(nameW, 12)
	}
	for _, g := range s.GPUs {
		memPct := 0.0
		if g.MemTotalB > 0 {
			memPct = float64(g.MemUsedB) / float64(g.MemTotalB) * 100
		}
		roles := strings.Join(g.Roles, ",")
		if roles == "" {
			roles = st.Faint.Render("unused")
		}
		l := fmt.Sprintf("  %-2d %s util %s %s  mem %s %s  %s  %s  %s",
			g.Index, fit(g.Name, nameW),
			p.bar(float64(g.UtilPct), barW), fitRight(itoa(g.UtilPct)+"%", 4),
			p.bar(memPct, barW), fitRight(gib(g.MemUsedB)+"/"+gib(g.MemTotalB)+" GiB", 15),
			fitRight(ftoa(g.PowerW, 0)+" W", 5), fitRight(itoa(g.TempC)+"°C", 4), roles)
		lines = append(lines, l)
	}
	return lines
}

// deviceLabel names the accelerators: "NPU" when telemetry reads Ascend
// NPUs (its npu-smi providers are named "npu…"), else "GPU".
func deviceLabel(info snapshot.GPUPanelStatus) string {
	if strings.HasPrefix(info.Provider, "npu") {
		return "NPU"
	}
	return "GPU"
}

func gib(b uint64) string { return ftoa(float64(b)/(1<<30), 1) }

func (p *overviewPage) eventLines() []string {
	ev := p.m.snap.Events
	if len(ev) == 0 {
		return nil
	}
	lines := []string{p.paints()[pTitle].wrap("events")}
	for _, e := range ev {
		who := e.Role
		if who == "" {
			who = "tsd"
		}
		lines = append(lines, "  "+e.Time.Format("15:04:05")+" "+fit(who, 12)+" "+e.Message)
	}
	return lines
}

// gpuText names a role's GPUs by their physical index once telemetry has
// resolved CUDA_VISIBLE_DEVICES to UUIDs: a profile that names GPUs by UUID
// would otherwise show the same truncated "GPU-fa4e00…" for every role.
// Until then it shows the profile's entries as written.
func gpuText(s *snapshot.Snapshot, r *snapshot.RoleStatus) string {
	if t, ok := slurmGPUText(r); ok {
		return t
	}
	if len(r.GPUUUIDs) == 0 || len(s.GPUs) == 0 {
		return orDash(strings.Join(r.GPUs, ","))
	}
	idx := make(map[string]int, len(s.GPUs))
	for _, g := range s.GPUs {
		idx[g.UUID] = g.Index
	}
	parts := make([]string, 0, len(r.GPUUUIDs))
	for _, u := range r.GPUUUIDs {
		i, ok := idx[u]
		if !ok {
			return orDash(strings.Join(r.GPUs, ","))
		}
		parts = append(parts, itoa(i))
	}
	return strings.Join(parts, ",")
}
