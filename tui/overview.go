package tui

import (
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

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
	// This frame's table (cells, layout), reused between frames; the
	// layout itself remembers nothing (fitColumns).
	frame             frameTable
	fits              []colFit
	traffic           map[string]*snapshot.RoleTraffic
	painters          *[numPaints]painter
	tableY, tableRows int // where the last frame drew the table's rows

	// The / filter: filter is the one applied (enter), shownFilter what
	// the table shows now (lower case; it follows the typing).
	filtering   bool
	input       lineInput
	filter      string
	shownFilter string

	sort  tableSort // the table's order (o, O, :sort)
	cols  colMemo   // the columns shown at this width
	split splitView // x: the selected role's live log under the table
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
	var keep func(int) bool
	if q := p.shownFilter; q != "" {
		roles := p.m.snap.Roles
		keep = func(i int) bool { return roleMatches(&roles[i], q) }
	}
	p.rows = buildRows(&p.m.snap, p.open, p.rows, keep)
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
func (p *overviewPage) Capturing() bool  { return p.filtering }

func (p *overviewPage) ShortHelp() []key.Binding {
	k := p.m.c.Keys
	return []key.Binding{k.Up, k.Down, k.Inspect, k.Logs, k.Restart, k.StopStart, k.RestartAll, k.Sort, k.Events, k.Command}
}

func (p *overviewPage) clamp() {
	rows := p.layout()
	p.setCursor(rows, p.cursor(rows))
}

func (p *overviewPage) Update(msg tea.Msg) tea.Cmd {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok {
		return nil
	}
	if p.filtering {
		return p.filterKey(k)
	}
	keys := p.m.c.Keys
	rows := p.layout()
	cur := p.cursor(rows)
	switch {
	case key.Matches(k, keys.Up):
		p.setCursor(rows, cur-1)
		return p.splitLogCmd()
	case key.Matches(k, keys.Down):
		p.setCursor(rows, cur+1)
		return p.splitLogCmd()
	case key.Matches(k, keys.Top):
		p.setCursor(rows, 0)
		return p.splitLogCmd()
	case key.Matches(k, keys.Bottom):
		p.setCursor(rows, len(rows)-1)
		return p.splitLogCmd()
	case key.Matches(k, keys.MergedLogs):
		return p.m.navigate(pageLogs, "")
	case key.Matches(k, keys.Events):
		return p.m.navigate(pageEvents, "")
	case key.Matches(k, keys.Sort):
		p.m.setSort(p.sort.next())
		return nil
	case key.Matches(k, keys.SortReverse):
		if msg, ok := p.sort.reverse(); !ok {
			p.m.flash.set(msg)
		} else {
			p.m.setSort(msg)
		}
		return nil
	case key.Matches(k, keys.RoleFilter):
		p.filtering, p.input = true, lineInput{text: p.filter}
		return nil
	case key.Matches(k, keys.Back):
		if p.filter != "" {
			p.setFilter("")
		}
		return nil
	case key.Matches(k, keys.Split):
		return p.toggleSplit()
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
		return p.splitLogCmd()
	}
	if d.kind == rowGroup {
		// A summary acts on the whole role: enter opens it, R restarts
		// its replicas one at a time; the rest need one replica.
		switch {
		case key.Matches(k, keys.Inspect):
			p.toggle(d, !p.open["g:"+d.group])
		case key.Matches(k, keys.RestartAll):
			r := s.Roles[d.role]
			p.m.ask("rolling restart of "+r.Kind, p.m.prompts().rollingKind(r.Kind))
		case key.Matches(k, keys.Logs, keys.Restart, keys.StopStart, keys.Describe, keys.Signal):
			p.m.flash.set(d.group + " has " + itoa(len(d.members)) + " replicas: → opens them, then pick one")
		}
		return nil
	}
	return roleKey(p.m, k, s.Roles[d.role])
}

// filterKey edits the / filter: it applies as it is typed; enter keeps
// it, esc puts back the one before.
func (p *overviewPage) filterKey(k tea.KeyPressMsg) tea.Cmd {
	switch k.String() {
	case "esc":
		p.filtering = false
		p.setFilter(p.filter)
		return nil
	case "enter":
		p.filtering = false
		p.setFilter(strings.TrimSpace(p.input.text))
		return p.splitLogCmd()
	}
	p.input.edit(k)
	p.applyFilter(strings.TrimSpace(p.input.text))
	return nil
}

// setFilter keeps q as the overview's filter.
func (p *overviewPage) setFilter(q string) {
	p.filter = q
	p.applyFilter(q)
}

// applyFilter shows only the rows matching q (while it is typed, too).
func (p *overviewPage) applyFilter(q string) {
	p.shownFilter = strings.ToLower(q)
	p.clamp()
}

func (p *overviewPage) View() string {
	m := p.m
	st := m.c.Styles
	out := p.gatewayLines()
	rows := p.layout()
	cur := p.cursor(rows)
	detail := p.detailLines(rows, cur)
	if fl := p.filterLine(len(rows)); fl != "" {
		out = append(out, fl)
	}
	if p.split.on {
		return p.splitView(out, rows, cur, detail)
	}
	gpu := p.gpuLines()
	// The table gets its rows first, but never squeezes the GPU panel below
	// a summary; events only fill rows nobody else wants.
	fixed := len(out) + 1 + 1 + len(detail) // table header, blank line before the GPUs
	want := max(len(rows), 1)
	if short := min(want, 3) - (p.h - fixed - len(gpu)); short > 0 {
		gpu = gpu[:max(1, len(gpu)-short)]
	}
	tableRows := max(1, min(want, p.h-fixed-len(gpu)))
	out = p.appendTable(out, rows, cur, tableRows)
	out = append(out, detail...)
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
		if tl := m.trends.lines(st, p.paints(), strings.ToLower(deviceLabel(m.snap.GPUInfo)), p.w, room-keep); len(tl) > 0 {
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

// splitMinLog is the least the split view's log pane keeps.
const splitMinLog = 5

// splitView is the table over the selected role's live log (x): the
// log pane takes what the table leaves, at least about half the page.
func (p *overviewPage) splitView(out []string, rows []dispRow, cur int, detail []string) string {
	st := p.m.c.Styles
	fixed := len(out) + 1 + len(detail) // the table's header
	logH := max(splitMinLog, (p.h-fixed)/2)
	tableRows := max(1, min(max(len(rows), 1), p.h-fixed-logH))
	out = p.appendTable(out, rows, cur, tableRows)
	out = append(out, detail...)
	logH = p.h - len(out)
	if logH < 2 {
		return screen(out, p.w, p.h)
	}
	lp := p.split.log
	if lp.source == "" {
		d := rows[min(cur, max(len(rows)-1, 0))]
		msg := "  select a role for its log"
		if len(rows) > 0 && d.kind == rowGroup {
			msg = "  " + d.group + " has " + itoa(len(d.members)) + " replicas: → opens them, then select one for its log"
		}
		out = append(out, st.Title.Render("log"), st.Faint.Render(msg))
		return screen(out, p.w, p.h)
	}
	lp.SetSize(p.w, logH)
	out = append(out, lp.View())
	return screen(strings.Split(strings.Join(out, "\n"), "\n"), p.w, p.h)
}

// appendTable draws the table's header and tableRows rows from p.offset,
// scrolled so the selected row cur shows.
func (p *overviewPage) appendTable(out []string, rows []dispRow, cur, tableRows int) []string {
	st := p.m.c.Styles
	t := p.buildTable(rows)
	ps := p.paints()
	out = append(out, ps[pHeader].wrap(fit(p.renderRow(t, -1, false, false), p.w)))
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
		var line string
		if i == cur {
			line = ps[pSelected].wrap(fit(p.renderRow(t, i, false, true), p.w))
		} else {
			line = p.renderRow(t, i, true, false)
		}
		out = append(out, line)
		shown++
	}
	switch {
	case len(p.m.snap.Roles) == 0:
		out = append(out, st.Faint.Render("  no roles yet"))
		shown++
	case len(rows) == 0:
		out = append(out, st.Faint.Render("  no role matches the filter (esc clears it)"))
		shown++
	}
	for ; shown < tableRows; shown++ {
		out = append(out, "")
	}
	return out
}

// filterLine is the / filter as it stands: being typed, or applied ("" when
// there is none).
func (p *overviewPage) filterLine(n int) string {
	st := p.m.c.Styles
	if !p.filtering && p.filter == "" {
		return ""
	}
	roles := 0
	for _, d := range p.rows {
		switch d.kind {
		case rowRole:
			roles++
		case rowGroup:
			if !p.open["g:"+d.group] {
				roles += len(d.members)
			}
		}
	}
	count := fmt.Sprintf(" · %d of %d roles", roles, len(p.m.snap.Roles))
	if p.filtering {
		return fit(st.Prompt.Render("filter: ")+inputTail(p.input.text, max(p.w-8-len(count), 1))+count, p.w)
	}
	return fit(st.Prompt.Render("filter ")+fmt.Sprintf("%q", p.filter)+count+st.Faint.Render(" · / edits, esc clears"), p.w)
}

// roleMatches is the / filter: q (lower case) in the role's name, group,
// kind, state, phase, reason or GPUs.
func roleMatches(r *snapshot.RoleStatus, q string) bool {
	for _, f := range []string{r.Name, r.Group, r.Kind, r.State, r.Phase, r.Reason} {
		if strings.Contains(strings.ToLower(f), q) {
			return true
		}
	}
	return strings.Contains(strings.Join(r.GPUs, ","), q)
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
	// The gateway's own rates, over the same window as the rows' REQ/S
	// and TOK/S (gateway/traffic's ten seconds): one source on one screen.
	reqRate, tokRate := g.ReqPerSec, g.TokPerSec
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
	if a := admissionPart(g.Admission); a != "" {
		parts = append(parts, a)
	}
	if g.ClientErrors > 0 { // refused for what they asked: not the deployment's, never red
		parts = append(parts, fmt.Sprintf("%d client errors", g.ClientErrors))
	}
	if l := g.Layouts; l != nil {
		parts = append(parts, layoutSplit(l))
	}
	if g.Note != "" {
		parts = append(parts, st.Warn.Render(g.Note))
	}
	if g.Problem != "" {
		parts = append(parts, st.Bad.Render(g.Problem))
	}
	return wrapParts("", "  ", parts, " · ", p.w)
}

// layoutSplit is how requests split between the layouts: the
// disaggregation setting, then each layout's share of the requests
// routed so far.
func layoutSplit(l *snapshot.LayoutStatus) string {
	s := "layout " + l.Disaggregation
	if n := l.PD + l.Aggregated; n > 0 {
		pd := (200*l.PD + n) / (2 * n) // rounded; the two add up to 100
		s += fmt.Sprintf(" pd %d%% agg %d%%", pd, 100-pd)
	}
	return s
}

// detailLines spell out trouble in full under the table (the REASON
// cell is often too narrow for it), wrapped, never cut: the selected
// row's (why it failed, stalled or crashed, or waits in backoff), then
// every other failed role's, which the operator must act on whatever is
// selected. At most maxDetail lines; past them a line says how many more
// failed.
func (p *overviewPage) detailLines(rows []dispRow, cur int) []string {
	s := &p.m.snap
	st := p.m.c.Styles
	var out []string
	selected := ""
	if cur < len(rows) && rows[cur].kind != rowRank {
		d := rows[cur]
		r := &s.Roles[d.role]
		if d.kind == rowGroup {
			g := groupStatus(s, d)
			r = &g
		} else {
			selected = r.Name
		}
		var style lipgloss.Style
		ok := true
		switch r.State {
		case snapshot.StateFailed, snapshot.StateStalled, snapshot.StateCrashed:
			style = st.Bad
		case snapshot.StateBackoff:
			style = st.Warn
		default:
			ok = false
		}
		if ok && r.Reason != "" {
			name := ""
			if d.kind != rowGroup {
				name = r.Name + " " + r.State + ": " // a group's reason already names its member
			}
			for _, l := range wrapText("  ↳ ", "    ", name+liveReason(r), p.w) {
				out = append(out, style.Render(l))
			}
			if d.kind == rowGroup {
				selected = strings.SplitN(r.Reason, ":", 2)[0]
			}
		}
	}
	var blocks [][]string
	for i := range s.Roles {
		r := &s.Roles[i]
		if r.State == snapshot.StateFailed && r.Reason != "" && r.Name != selected {
			blocks = append(blocks, wrapText("  ↳ ", "    ", r.Name+" failed: "+r.Reason, p.w))
		}
	}
	if len(out) > maxDetail {
		out = append(out[:maxDetail-1], st.Bad.Render("    … (the events and the inspector have the rest)"))
	}
	more := 0
	for i, b := range blocks {
		room := maxDetail - len(out)
		if i < len(blocks)-1 {
			room-- // keep a line to say how many more there are
		}
		if more > 0 || len(b) > room {
			more++
			continue
		}
		for _, l := range b {
			out = append(out, st.Bad.Render(l))
		}
	}
	if more > 0 {
		out = append(out, st.Bad.Render(fmt.Sprintf("  ↳ %d more failed: select one for why", more)))
	}
	return out
}

// maxDetail bounds the detail lines under the table.
const maxDetail = 4

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
		// Coloured by load as nvitop does: green light, yellow moderate,
		// red heavy (utilThresholds, memThresholds).
		util := p.bar(float64(g.UtilPct), barW, loadPaint(float64(g.UtilPct), "util")) + " " + fitRight(itoa(g.UtilPct)+"%", 4)
		mem := p.bar(memPct, barW, loadPaint(memPct, "mem")) + " " + fitRight(gib(g.MemUsedB)+"/"+gib(g.MemTotalB)+" GiB", 15)
		power, temp := fitRight(ftoa(g.PowerW, 0)+" W", 5), fitRight(itoa(g.TempC)+"°C", 4)
		l := fmt.Sprintf("  %-2d %s util %s  mem %s  %s  %s  %s", g.Index, fit(g.Name, nameW), util, mem, power, temp, roles)
		if width(l) > p.w {
			// A narrow window: the roles on the card matter more than its
			// power and temperature.
			l = fmt.Sprintf("  %-2d %s util %s  mem %s  %s", g.Index, fit(g.Name, nameW), util, mem, roles)
		}
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
		lines = append(lines, cutLine("  "+e.Time.Format("15:04:05")+" "+fit(who, 12)+" "+e.Message, p.w))
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
