package tui

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/snapshot/trend"
)

// rowCtx is one table row as its cells read it.
type rowCtx struct {
	r       *snapshot.RoleStatus
	traffic *snapshot.RoleTraffic // the gateway's accounting for the row (nil: none)
	gpuMem  []gpuMem              // a group's memory per GPU; nil: the row's own
	// rankCache is a rank row's prefix cache (nil: another row, or none).
	rankCache *snapshot.RankCache
	label     string // what the ROLE cell says
	kind      rowKind
	// idle: the row serves nothing now (a stopped, failed or backing-off
	// role; a group none of whose members serves), so its rates and
	// latencies are blank whatever the traffic window still holds.
	idle bool
	// members are the role instances the row stands for, as indices in
	// the snapshot (a group: its members; one: one), for the GPU figures
	// telemetry keeps per role.
	members []int
	one     [1]int
}

// column is one roles-table column: its heading, how its cells read a
// row, how it sorts, and what it is worth when the window is narrow.
// Every column sorts (o, :sort ID); the one sorted by carries ↑ or ↓.
type column struct {
	id    string // the sort name (:sort ID)
	title string
	right bool
	// priority 0: always shown; larger numbers give way first
	// (fitColumns), so the table keeps what matters at 80 columns: ROLE,
	// STATE, RANKS, then UPTIME, INFL, REQ/S and ERR.
	priority int
	shrinkAt []int // the priorities at which its shorter forms take over
	max      int   // widest the column grows (0: no bound)
	traffic  bool  // only while the gateway reports per-role traffic
	cache    bool  // only while some prefill has a prefix cache to show
	fill     bool  // takes the rest of the line
	// reserve is the room the column's text is known to need at times
	// (STATE: a drain countdown, a startup phase), kept when the columns
	// for a width are chosen, so a frame whose text is short does not
	// choose columns a longer one must then drop.
	reserve int
	cell    func(p *overviewPage, x *rowCtx, c *cell)
	// key orders roles by the column; num reports a number (sorted
	// largest first by default), else str is compared.
	key func(k *keyCtx) sortKey
	// desc is the column's first sort direction (numbers: largest first).
	desc bool
}

type sortKey struct {
	num float64
	str string
}

// tableColumns is the roles table, left to right: one table for the
// cells, the layout and the sort orders.
var tableColumns = []column{
	{id: "role", title: "ROLE", priority: 0, max: 28,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) { c.set(x.label, pPlain) },
		key:  func(k *keyCtx) sortKey { return sortKey{str: k.r.Name} }},
	{id: "kind", title: "KIND", priority: 4,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) { c.set(x.r.Kind, pPlain) },
		key:  func(k *keyCtx) sortKey { return sortKey{str: k.r.Kind} }},
	// Which GPUs a role holds outranks its throughput figures.
	{id: "gpus", title: "GPUS", priority: 3, shrinkAt: []int{4}, max: 15,
		cell: func(p *overviewPage, x *rowCtx, c *cell) {
			t := gpuText(&p.m.snap, x.r)
			c.set(t, pPlain)
			c.add(compactList(t))
		},
		key: func(k *keyCtx) sortKey {
			return sortKey{str: gpuText(k.s, k.r)}
		}},
	{id: "state", title: "STATE", priority: 0, shrinkAt: []int{4, 3, 2}, reserve: stateReserve,
		cell: func(p *overviewPage, x *rowCtx, c *cell) {
			stateForms(x.r, p.m.c.Now(), c)
			// A breaker that is not closed (tui/breaker.go) follows the
			// state in every form: the role is up but the gateway holds
			// its traffic back.
			if mark := breakerMark(&p.m.snap, x.r.Name); mark != "" {
				short := strings.Replace(mark, "breaker", "brk", 1)
				for i := 0; i < c.n; i++ {
					if i < 2 {
						c.forms[i] += mark
					} else {
						c.forms[i] += short
					}
				}
				c.paint = pWarn
			}
		},
		key: func(k *keyCtx) sortKey {
			return sortKey{num: float64(stateRank(k.r.State)), str: k.r.State}
		}, desc: true},
	// UPTIME is the running process's age; in backoff there is none, and
	// the cell counts down to the next try instead (the dead process's
	// age read as if it still ran).
	{id: "uptime", title: "UPTIME", right: true, priority: 2,
		cell: func(p *overviewPage, x *rowCtx, c *cell) {
			r := x.r
			switch {
			case r.State == snapshot.StateBackoff && !r.NextTryAt.IsZero():
				c.set("in "+countdown(r.NextTryAt, p.m.c.Now()), pBusy)
			case r.StartedAt.IsZero() || !alive(r.State):
				c.set("-", pPlain)
			default:
				c.set(humanDuration(p.m.c.Now().Sub(r.StartedAt)), pPlain)
			}
		},
		key: func(k *keyCtx) sortKey {
			if k.r.StartedAt.IsZero() || !alive(k.r.State) {
				return sortKey{num: -1}
			}
			return sortKey{num: float64(k.now.Sub(k.r.StartedAt))}
		}, desc: true},
	{id: "restarts", title: "RST", right: true, priority: 1,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) {
			if x.r.Restarts > 0 {
				c.set(itoa(x.r.Restarts), pWarn)
				return
			}
			c.set("0", pPlain)
		},
		key: func(k *keyCtx) sortKey {
			return sortKey{num: float64(k.r.Restarts)}
		}, desc: true},
	{id: "ranks", title: "RANKS", right: true, priority: 0,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) {
			r := x.r
			if r.RanksExpected == 0 {
				c.set("-", pPlain)
				return
			}
			s := itoa(r.RanksRegistered) + "/" + itoa(r.RanksExpected)
			if r.RanksRegistered == r.RanksExpected {
				c.set(s, pGood)
				return
			}
			c.set(s, pBusy)
		},
		key: func(k *keyCtx) sortKey {
			return sortKey{num: float64(k.r.RanksRegistered)}
		}, desc: true},
	// INFL has one meaning everywhere (this table, the rank inspector,
	// `tsd status --json`, the r/s/R prompts): requests on the engine
	// now, as its lane counts them, which is what a drain waits for. The
	// gateway's own count of open requests is on the gateway line.
	{id: "inflight", title: "INFL", right: true, priority: 2,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) { c.set(itoa(x.r.InFlight), pPlain) },
		key: func(k *keyCtx) sortKey {
			return sortKey{num: float64(k.r.InFlight)}
		}, desc: true},
	// The gateway's per-role accounting: what /metrics says.
	// A role that does not serve now (stopped, failed, between tries)
	// shows no rate or latency: the window's figures are its past.
	{id: "reqs", title: "REQ/S", right: true, priority: 2, traffic: true,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) {
			if t := x.traffic; t != nil && !x.idle {
				c.set(ftoa(t.ReqPerS, 1), pPlain)
				return
			}
			c.set("-", pPlain)
		},
		key: trafficKey(func(t *snapshot.RoleTraffic) float64 { return t.ReqPerS }), desc: true},
	{id: "toks", title: "TOK/S", right: true, priority: 3, traffic: true,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) {
			if t := x.traffic; t != nil && !x.idle {
				c.set(ftoa(t.TokPerS, 0), pPlain)
				return
			}
			c.set("-", pPlain)
		},
		key: trafficKey(func(t *snapshot.RoleTraffic) float64 { return t.TokPerS }), desc: true},
	{id: "errors", title: "ERR", right: true, priority: 2, traffic: true,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) {
			t := x.traffic
			switch {
			case t == nil:
				c.set("-", pPlain)
			case t.Errors > 0:
				c.set(utoa(t.Errors), pBad)
			default:
				c.set("0", pPlain)
			}
		},
		key: trafficKey(func(t *snapshot.RoleTraffic) float64 { return float64(t.Errors) }), desc: true},
	{id: "ttft", title: "TTFT p50/99", right: true, priority: 4, traffic: true,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) {
			if t := x.traffic; t != nil && !x.idle && t.TTFTp99 > 0 {
				c.set(fmtLatency(t.TTFTp50)+"/"+fmtLatency(t.TTFTp99), pPlain)
				return
			}
			c.set("-", pPlain)
		},
		key: trafficKey(func(t *snapshot.RoleTraffic) float64 { return float64(t.TTFTp99) }), desc: true},
	{id: "itl", title: "ITL p50/99", right: true, priority: 5, traffic: true,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) {
			if t := x.traffic; t != nil && !x.idle && t.ITLp99 > 0 {
				c.set(fmtLatency(t.ITLp50)+"/"+fmtLatency(t.ITLp99), pPlain)
				return
			}
			c.set("-", pPlain)
		},
		key: trafficKey(func(t *snapshot.RoleTraffic) float64 { return float64(t.ITLp99) }), desc: true},
	// The prefills' prefix caches: the share of their prompt tokens the
	// engine found cached, per role and per rank, or why kv_aware cannot
	// see them ("kv absent").
	{id: "cache", title: "CACHE", right: true, priority: 4, traffic: true, cache: true,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) {
			if x.idle {
				c.set("-", pPlain)
				return
			}
			c.set(cacheCell(x))
		},
		key: trafficKey(func(t *snapshot.RoleTraffic) float64 { return t.CachedShare }), desc: true},
	// The engine's pid, its process group (K signals the group).
	{id: "pid", title: "PID", right: true, priority: 6,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) {
			switch {
			case x.kind == rowRank:
				c.set("", pPlain)
			case x.r.PID <= 0 || !alive(x.r.State):
				c.set("-", pPlain)
			default:
				c.set(itoa(x.r.PID), pPlain)
			}
		},
		key: func(k *keyCtx) sortKey {
			if k.r.PID <= 0 || !alive(k.r.State) {
				return sortKey{num: -1}
			}
			return sortKey{num: float64(k.r.PID)}
		}},
	{id: "cpu", title: "CPU", right: true, priority: 5,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) {
			if x.r.Proc == nil {
				c.set("-", pPlain)
				return
			}
			c.set(ftoa(x.r.Proc.CPUPercent, 0)+"%", pPlain)
		},
		key: func(k *keyCtx) sortKey {
			if k.r.Proc == nil {
				return sortKey{num: -1}
			}
			return sortKey{num: k.r.Proc.CPUPercent}
		}, desc: true},
	{id: "rss", title: "RSS", right: true, priority: 6,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) {
			if x.r.Proc == nil {
				c.set("-", pPlain)
				return
			}
			c.set(humanBytes(x.r.Proc.RSSBytes), pPlain)
		},
		key: func(k *keyCtx) sortKey {
			if k.r.Proc == nil {
				return sortKey{num: -1}
			}
			return sortKey{num: float64(k.r.Proc.RSSBytes)}
		}, desc: true},
	// The mean utilization of the GPUs the role runs on, as telemetry
	// maps GPUs to roles (nvitop's per-process view, per role).
	{id: "gpuutil", title: "GPU%", right: true, priority: 5,
		cell: func(p *overviewPage, x *rowCtx, c *cell) {
			if t, ok := noTelemetryCell(x.r); ok {
				c.set(t, pFaint)
				return
			}
			if x.kind == rowRank {
				c.set("", pPlain)
				return
			}
			if u, ok := gpuUtil(&p.m.snap, x.members); ok && !x.idle {
				c.set(pctText(u), loadPaint(float64(u), "util"))
				return
			}
			c.set("-", pPlain)
		},
		key: func(k *keyCtx) sortKey {
			for i := range k.s.Roles {
				if k.s.Roles[i].Name == k.r.Name {
					if u, ok := gpuUtil(k.s, []int{i}); ok {
						return sortKey{num: float64(u)}
					}
				}
			}
			return sortKey{num: -1}
		}, desc: true},
	{id: "gpumem", title: "GPU MEM", right: true, priority: 5,
		cell: func(p *overviewPage, x *rowCtx, c *cell) {
			r := x.r
			if t, ok := noTelemetryCell(r); ok {
				c.set(t, pFaint)
				return
			}
			switch {
			case x.gpuMem != nil:
				gpuMemCell(c, x.gpuMem, 0)
			case x.kind == rowRank:
				c.set("", pPlain)
			default:
				gpuMemCell(c, roleGPUMem(&p.m.snap, r.Name), r.GPUMemB)
			}
		},
		key: func(k *keyCtx) sortKey {
			return sortKey{num: float64(k.r.GPUMemB)}
		}, desc: true},
	{id: "reason", title: "REASON", fill: true,
		cell: func(_ *overviewPage, x *rowCtx, c *cell) {
			r := x.r
			if r.LogError != "" {
				// Its log cannot be written (a full disk): the engine runs on,
				// but nothing it says is kept until writes work again.
				c.set(strings.TrimSuffix(r.LogError+"; "+r.Reason, "; "), pBad)
				return
			}
			if r.State == snapshot.StateFailed || r.State == snapshot.StateStalled {
				c.set(liveReason(r), pBad) // what the operator must act on stands out
				return
			}
			c.set(liveReason(r), pFaint)
		},
		key: func(k *keyCtx) sortKey {
			return sortKey{str: k.r.Reason}
		}},
}

func trafficKey(f func(t *snapshot.RoleTraffic) float64) func(*keyCtx) sortKey {
	return func(k *keyCtx) sortKey {
		if k.t == nil || !serving(k.r.State) {
			return sortKey{num: -1}
		}
		return sortKey{num: f(k.t)}
	}
}

// columnIDs are the sort names, in table order.
func columnIDs() []string {
	out := make([]string, len(tableColumns))
	for i, c := range tableColumns {
		out[i] = c.id
	}
	return out
}

// sortAliases are the older or shorter names :sort also takes.
var sortAliases = map[string]string{
	"name": "role", "rst": "restarts", "infl": "inflight", "req/s": "reqs", "tok/s": "toks",
	"err": "errors", "gpu": "gpus", "mem": "gpumem", "up": "uptime", "cached": "cache",
	"util": "gpuutil", "gpu%": "gpuutil",
}

// findColumn is the column a sort name (or alias) means.
func findColumn(id string) (int, bool) {
	id = strings.ToLower(id)
	if a, ok := sortAliases[id]; ok {
		id = a
	}
	for i, c := range tableColumns {
		if c.id == id {
			return i, true
		}
	}
	return 0, false
}

// compactList writes a comma list of numbers with runs as ranges
// ("0,1,2,3,5" → "0-3,5"); anything else is returned as it is.
func compactList(s string) string {
	parts := strings.Split(s, ",")
	if len(parts) < 3 {
		return s
	}
	nums := make([]int, len(parts))
	for i, p := range parts {
		n := 0
		if p == "" || len(p) > 6 {
			return s
		}
		for _, ch := range p {
			if ch < '0' || ch > '9' {
				return s
			}
			n = n*10 + int(ch-'0')
		}
		nums[i] = n
	}
	var b strings.Builder
	for i := 0; i < len(nums); {
		j := i
		for j+1 < len(nums) && nums[j+1] == nums[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(itoa(nums[i]))
		if j > i+1 {
			b.WriteString("-" + itoa(nums[j]))
		} else if j == i+1 {
			b.WriteString("," + itoa(nums[j]))
		}
		i = j + 1
	}
	return b.String()
}

// frameTable is one frame's table: the columns in play, every row's cells
// (all rows, not only the visible ones, so scrolling never moves a
// column), and the layout of both.
type frameTable struct {
	cols   []int       // indices into tableColumns of the columns in play
	cells  []cell      // row-major: len(rows) × len(cols)
	layout []colLayout // per column in play
}

// tableGutter is the selection marker's room at the start of each row.
const tableGutter = 2

// minReason is the least the REASON column keeps while anything else can
// give way (the detail line under the table spells a reason out).
const minReason = 8

// buildTable fills the frame's cells for rows and lays the columns out.
func (p *overviewPage) buildTable(rows []dispRow) *frameTable {
	t := &p.frame
	s := &p.m.snap
	hasTraffic := len(s.Gateway.Roles) > 0
	_, hasCache := trend.CachedShare(s.Gateway.Roles)
	t.cols = t.cols[:0]
	for i, c := range tableColumns {
		if c.traffic && !hasTraffic || c.cache && !hasCache {
			continue
		}
		t.cols = append(t.cols, i)
	}
	nc := len(t.cols)
	if need := len(rows) * nc; cap(t.cells) < need {
		t.cells = make([]cell, need)
	} else {
		t.cells = t.cells[:need]
	}
	p.indexTraffic()
	var x rowCtx
	var tmp snapshot.RoleStatus
	for i, d := range rows {
		p.rowContext(d, &x, &tmp)
		for j, ci := range t.cols {
			c := &t.cells[i*nc+j]
			c.n, c.paint = 0, pPlain
			tableColumns[ci].cell(p, &x, c)
		}
	}
	fits := p.fits[:0]
	for j, ci := range t.cols {
		col := &tableColumns[ci]
		forms := 1
		for i := range rows {
			forms = max(forms, t.cells[i*nc+j].n)
		}
		widths := make([]int, forms)
		title := width(p.heading(ci))
		for f := range widths {
			w := title
			for i := range rows {
				c := &t.cells[i*nc+j]
				k := min(f, max(c.n-1, 0))
				if c.n > 0 {
					w = max(w, width(c.forms[k]))
				}
			}
			if col.max > 0 {
				w = min(w, col.max)
			}
			widths[f] = w
		}
		cf := colFit{priority: col.priority, widths: widths, shrinkAt: col.shrinkAt, fill: col.fill}
		if col.fill {
			cf.minFill = min(widths[0], minReason)
		}
		fits = append(fits, cf)
	}
	p.fits = fits
	t.layout = fitColumns(fits, p.w, tableGutter, p.columnSet(t.cols, fits, len(rows) > 0))
	return t
}

// stateReserve is the STATE column's reserve: its longest short forms
// ("drain · 12 infl · 1m30s", "hshake · handshake done").
const stateReserve = 23

// colMemo is the column set chosen for one width and one set of columns
// in play (traffic and cache columns come and go with the gateway's
// figures): while neither changes, the table shows the same columns.
type colMemo struct {
	w    int
	cols []int // the columns in play (indices into tableColumns)
	set  []bool
}

// columnSet is the columns shown at this width: chosen once, from the
// widths the rows hold then (STATE at least its reserve), then kept, so
// a cell's text changing width takes a shorter form or cuts that cell,
// never the column set. Without rows nothing is chosen yet.
func (p *overviewPage) columnSet(cols []int, fits []colFit, rows bool) []bool {
	if p.cols.set != nil && p.cols.w == p.w && slices.Equal(p.cols.cols, cols) {
		return p.cols.set
	}
	if !rows {
		return nil
	}
	nominal := make([]colFit, len(fits))
	for j, f := range fits {
		nominal[j] = f
		if f.fill {
			nominal[j].minFill = minReason // the most it keeps once it has text
		}
		if r := tableColumns[cols[j]].reserve; r > 0 {
			nominal[j].widths = make([]int, len(f.widths))
			for k, w := range f.widths {
				nominal[j].widths[k] = max(w, r)
			}
		}
	}
	p.cols = colMemo{w: p.w, cols: slices.Clone(cols), set: chooseColumns(nominal, p.w, tableGutter)}
	return p.cols.set
}

// rowContext points x at what row d shows.
func (p *overviewPage) rowContext(d dispRow, x *rowCtx, tmp *snapshot.RoleStatus) {
	s := &p.m.snap
	*x = rowCtx{kind: d.kind, label: rowLabel(s, d, p.open)}
	switch d.kind {
	case rowGroup:
		*tmp = groupStatus(s, d)
		x.r = tmp
		x.traffic = groupTraffic(p.traffic, s, d.members)
		x.gpuMem = groupGPUMem(s, d.members)
		x.idle = true
		for _, i := range d.members {
			x.idle = x.idle && !serving(s.Roles[i].State)
		}
		x.members = d.members
	case rowRank:
		*tmp = rankStatus(&s.Roles[d.role], d.rank)
		x.r = tmp
		x.rankCache = rankCache(p.traffic[s.Roles[d.role].Name], s.Roles[d.role].Ranks[d.rank].DPRank)
	default:
		x.r = &s.Roles[d.role]
		x.traffic = p.traffic[x.r.Name]
		x.idle = !serving(x.r.State)
		x.one[0] = d.role
		x.members = x.one[:]
	}
}

// heading is a column's title, with the sort marker when the table is
// sorted by it.
func (p *overviewPage) heading(ci int) string {
	c := &tableColumns[ci]
	title := c.title
	if c.id == "gpus" {
		title = deviceLabel(p.m.snap.GPUInfo) + "S" // NPUS on Ascend
	}
	if p.sort.by != c.id {
		return title
	}
	if p.sort.desc {
		return title + "↓"
	}
	return title + "↑"
}

// renderRow draws row i of the frame (i < 0: the heading).
func (p *overviewPage) renderRow(t *frameTable, i int, styled, selected bool) string {
	var b strings.Builder
	b.Grow(p.w + p.w/2) // the row's cells and their colours, grown once
	if i >= 0 && selected {
		b.WriteString("▸ ")
	} else {
		b.WriteString("  ")
	}
	nc := len(t.cols)
	last := -1
	for j := range t.cols {
		if t.layout[j].shown {
			last = j
		}
	}
	first := true
	for j, ci := range t.cols {
		l := t.layout[j]
		if !l.shown {
			continue
		}
		if !first {
			b.WriteByte(' ')
		}
		first = false
		col := &tableColumns[ci]
		if i < 0 {
			h := p.heading(ci)
			if width(h) > l.width {
				h = "" // a fill column narrower than its heading
			}
			if col.right {
				b.WriteString(fitRight(h, l.width))
			} else {
				b.WriteString(fit(h, l.width))
			}
			continue
		}
		c := &t.cells[i*nc+j]
		text := c.form(l.width)
		var s string
		if col.right {
			s = fitRight(text, l.width)
		} else {
			s = fit(text, l.width)
		}
		if j == last {
			s = strings.TrimRight(s, " ")
		}
		if styled && c.paint != pPlain {
			s = p.paints()[c.paint].wrap(s)
		}
		b.WriteString(s)
	}
	return strings.TrimRight(b.String(), " ")
}

// sortRoles returns a sorted copy of the snapshot's roles by column id
// (the name breaking ties).
func sortRoles(s *snapshot.Snapshot, now time.Time, id string, desc bool) []snapshot.RoleStatus {
	out := append([]snapshot.RoleStatus(nil), s.Roles...)
	ci, ok := findColumn(id)
	if !ok {
		return out
	}
	col := &tableColumns[ci]
	tr := make(map[string]*snapshot.RoleTraffic, len(s.Gateway.Roles))
	for i := range s.Gateway.Roles {
		tr[s.Gateway.Roles[i].Role] = &s.Gateway.Roles[i]
	}
	keys := make(map[string]sortKey, len(out))
	for i := range out {
		keys[out[i].Name] = col.key(&keyCtx{now: now, s: s, r: &out[i], t: tr[out[i].Name]})
	}
	less := func(a, b *snapshot.RoleStatus) int {
		ka, kb := keys[a.Name], keys[b.Name]
		c := 0
		switch {
		case ka.num < kb.num:
			c = -1
		case ka.num > kb.num:
			c = 1
		case ka.str < kb.str:
			c = -1
		case ka.str > kb.str:
			c = 1
		}
		if desc {
			c = -c
		}
		return c
	}
	sort.SliceStable(out, func(i, j int) bool {
		if c := less(&out[i], &out[j]); c != 0 {
			return c < 0
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// keyCtx is what a column's sort key reads of one role.
type keyCtx struct {
	now time.Time
	s   *snapshot.Snapshot
	r   *snapshot.RoleStatus
	t   *snapshot.RoleTraffic // the gateway's accounting for it (nil: none)
}

// cacheCell is a prefill's cached-token share over the traffic window
// (a rank row: its rank's), or "kv absent" when kv_aware must route it by
// cache_aware.
func cacheCell(x *rowCtx) (string, paint) {
	if c := x.rankCache; c != nil {
		if c.PromptTokS <= 0 {
			return "-", pPlain
		}
		return ftoa(c.CachedShare*100, 0) + "%", pPlain
	}
	t := x.traffic
	switch {
	case t == nil || len(t.Cache) == 0 && t.KVEvents == "":
		return "-", pPlain
	case t.KVEvents == snapshot.KVEventsAbsent:
		return kvAbsentShort, pWarn
	case t.PromptTokS <= 0:
		return "-", pPlain
	}
	return ftoa(t.CachedShare*100, 0) + "%", pPlain
}

// kvAbsentShort is the overview's form of the gateway's "kv events
// absent: routing by cache_aware" (the inspector shows the whole note).
const kvAbsentShort = "kv absent"

// rankCache is DP rank dp's prefix cache in a role's traffic row.
func rankCache(t *snapshot.RoleTraffic, dp int) *snapshot.RankCache {
	if t == nil || dp < 0 || dp >= len(t.Cache) {
		return nil
	}
	return &t.Cache[dp]
}
