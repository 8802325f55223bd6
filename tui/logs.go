package tui

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/tsd-project/tsd/snapshot"
)

type inputKind int

const (
	inputNone inputKind = iota
	inputFind
	inputFilter
)

// logsPage shows one role's log, or every role's merged and tagged. It
// renders only the visible window, so its cost does not grow with the
// buffer.
type logsPage struct {
	m    *Model
	w, h int

	source string // role; "" = merged
	buf    *logBuf
	feed   logFeed

	follow bool
	wrap   bool
	stamps bool // show each line's time
	hasErr bool // errAbs is the error line e/E last jumped to
	errAbs uint64
	errMsg string
	xoff   int    // first text cell shown when wrap is off (horizontal scroll)
	top    uint64 // absolute number of the first line shown when not following

	find finder

	filterText string
	filterErr  string

	input inputKind
	in    lineInput // the find or filter being typed
}

// logFeed is a log view's subscription: its generation (a message names
// the view it is for by it), the channel a command waits on and how to
// end both.
type logFeed struct {
	gen     int
	gens    *int // the last generation handed out, shared by both log views
	cancel  func()
	ch      <-chan []snapshot.LogLine
	done    chan struct{}
	dropped uint64 // lines the feed skipped under load
}

// finder is the logs page's find (/, n, N): the text, and the match the
// view stands on with its place among all of them.
type finder struct {
	text  string
	fold  bool // case-insensitive: the query has no capitals
	cur   uint64
	has   bool
	count int // matches in view when last searched
	idx   int // 1-based position of cur among them
	msg   string
}

func (f *finder) matches(text string) bool {
	if f.fold {
		return indexFold(text, f.text) >= 0
	}
	return strings.Contains(text, f.text)
}

func newLogsPage(m *Model, max int, gens *int) *logsPage {
	*gens++
	return &logsPage{m: m, buf: newLogBuf(max), follow: true, feed: logFeed{gen: *gens, gens: gens}}
}

func (p *logsPage) SetSize(w, h int) { p.w, p.h = w, h }
func (p *logsPage) Capturing() bool  { return p.input != inputNone }

func (p *logsPage) ShortHelp() []key.Binding {
	k := p.m.c.Keys
	if p.input != inputNone {
		return []key.Binding{
			key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "apply")),
			key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "cancel")),
		}
	}
	return []key.Binding{k.Back, k.Find, k.Next, k.Prev, k.Filter, k.Inverse, k.NextError, k.Follow, k.Wrap, k.Timestamps, k.Save, k.NextSource}
}

// open switches the page to a source and subscribes to it. The filter and
// find carry over; the buffer starts again from the source's backlog.
func (p *logsPage) open(role string) tea.Cmd {
	p.close()
	p.source = role
	p.buf.reset()
	p.buf.setFilter(p.buf.filter, p.buf.inverse)
	p.follow, p.top, p.find.has, p.feed.dropped, p.find.msg = true, 0, false, 0, ""
	p.hasErr, p.errMsg = false, ""
	return subscribeLogsCmd(p.m.b, role, p.feed.gen)
}

// close ends the current subscription. A feed still waiting on it returns
// nothing, and anything already in flight carries a stale gen.
func (p *logsPage) close() {
	if p.feed.cancel != nil {
		p.feed.cancel()
		p.feed.cancel = nil
	}
	if p.feed.done != nil {
		close(p.feed.done)
		p.feed.done = nil
	}
	p.feed.ch = nil
	// Generations are shared by both log views, so a message finds its
	// view by generation alone (Model.logPageOf).
	*p.feed.gens++
	p.feed.gen = *p.feed.gens
}

func (p *logsPage) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case logSubscribedMsg:
		if msg.err != nil {
			if msg.gen == p.feed.gen {
				p.m.flash.set(fmt.Sprintf("logs of %s: %v", sourceName(p.source), msg.err))
			}
			return nil
		}
		if msg.gen != p.feed.gen || p.m.feed.closed {
			msg.cancel()
			return nil
		}
		p.feed.cancel, p.feed.ch, p.feed.done = msg.cancel, msg.ch, make(chan struct{})
		p.ingest(msg.backlog)
		return p.rearm()
	case logBatchMsg:
		if msg.gen != p.feed.gen {
			return nil
		}
		p.feed.dropped += uint64(msg.dropped)
		for _, b := range msg.batches {
			p.ingest(b)
		}
		return p.rearm()
	case logClosedMsg:
		if msg.gen == p.feed.gen {
			p.feed.ch = nil
		}
		return nil
	case tea.KeyPressMsg:
		if p.input != inputNone {
			return p.inputKey(msg)
		}
		return p.key(msg)
	}
	return nil
}

func (p *logsPage) rearm() tea.Cmd {
	if p.feed.ch == nil {
		return nil
	}
	return waitLogs(p.feed.gen, p.feed.ch, p.feed.done, p.buf.max)
}

func (p *logsPage) ingest(lines []snapshot.LogLine) {
	for i := range lines {
		p.buf.add(lines[i])
	}
	if !p.follow && p.top < p.buf.first {
		p.top = p.buf.first
	}
}

func (p *logsPage) rows() int { return max(p.h-1, 1) } // the status line takes one

func (p *logsPage) key(k tea.KeyPressMsg) tea.Cmd {
	keys := p.m.c.Keys
	topIdx := p.topIndex()
	switch {
	case key.Matches(k, keys.Up):
		p.scrollTo(topIdx - 1)
	case key.Matches(k, keys.Down):
		p.scrollDown(topIdx + 1)
	case key.Matches(k, keys.PageUp):
		p.scrollTo(topIdx - p.rows())
	case key.Matches(k, keys.PageDown):
		p.scrollDown(topIdx + p.rows())
	case key.Matches(k, keys.Top):
		p.scrollTo(0)
	case key.Matches(k, keys.Bottom):
		p.follow = true
	case key.Matches(k, keys.Follow):
		if p.follow {
			p.follow = false
			p.top = p.viewAbs(topIdx)
		} else {
			p.follow = true
		}
	case key.Matches(k, keys.Wrap):
		p.wrap, p.xoff = !p.wrap, 0
	case key.Matches(k, keys.Timestamps):
		p.stamps = !p.stamps
	case key.Matches(k, keys.Left):
		p.xoff = max(0, p.xoff-max(8, p.textWidth()/2))
	case key.Matches(k, keys.Right):
		if !p.wrap {
			p.xoff += max(8, p.textWidth()/2)
		} else {
			p.m.flash.set("wrap is on: nothing to scroll (w turns it off)")
		}
	case key.Matches(k, keys.NextError):
		p.jumpError(topIdx, true)
	case key.Matches(k, keys.PrevError):
		p.jumpError(topIdx, false)
	case key.Matches(k, keys.Find):
		p.input, p.in = inputFind, lineInput{}
	case key.Matches(k, keys.Filter):
		p.input, p.in = inputFilter, lineInput{text: p.filterText}
	case key.Matches(k, keys.Inverse):
		if p.buf.filter != nil {
			p.buf.setFilter(p.buf.filter, !p.buf.inverse)
			p.afterFilter()
		} else {
			p.m.flash.set("no filter to invert: set one with &")
		}
	case key.Matches(k, keys.Next):
		p.search(true, false)
	case key.Matches(k, keys.Prev):
		p.search(false, false)
	case key.Matches(k, keys.Save):
		return p.save()
	case key.Matches(k, keys.MergedLogs):
		return p.open("")
	case key.Matches(k, keys.NextSource), key.Matches(k, keys.PrevSource):
		srcs := p.sources()
		i := 0
		for j, s := range srcs {
			if s == p.source {
				i = j
			}
		}
		if key.Matches(k, keys.NextSource) {
			i = (i + 1) % len(srcs)
		} else {
			i = (i + len(srcs) - 1) % len(srcs)
		}
		return p.open(srcs[i])
	}
	return nil
}

// save writes the source's whole retained log (not just this view)
// through the backend and says where it went.
func (p *logsPage) save() tea.Cmd {
	b, role := p.m.b, p.source
	path := filepath.Join(p.m.opts.SaveDir, sourceName(role)+"-"+p.m.c.Now().Format("20060102-150405")+".log")
	p.m.flash.set("saving the full " + sourceName(role) + " log…")
	return func() tea.Msg {
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		saved, err := b.SaveLog(role, path)
		if saved == "" {
			saved = path
		}
		return savedMsg{role: role, path: saved, err: err}
	}
}

// sources are what tab cycles through: merged, then every role, then
// the gateway's access log when there is a gateway.
func (p *logsPage) sources() []string {
	s := []string{""}
	for _, r := range p.m.snap.Roles {
		s = append(s, r.Name)
	}
	if g := p.m.snap.Gateway; g.URL != "" || g.Mode != "" {
		s = append(s, GatewaySource)
	}
	return s
}

func (p *logsPage) inputKey(k tea.KeyPressMsg) tea.Cmd {
	switch k.Code {
	case tea.KeyEscape:
		p.input = inputNone
		return nil
	case tea.KeyEnter:
		kind, text := p.input, p.in.text
		p.input = inputNone
		if kind == inputFind {
			p.setFind(text)
		} else {
			p.setFilter(text)
		}
		return nil
	}
	p.in.edit(k)
	return nil
}

func (p *logsPage) setFind(q string) {
	p.find.text, p.find.has, p.find.msg = q, false, ""
	p.find.fold = strings.ToLower(q) == q
	if q == "" {
		return
	}
	// Following, the newest match is the interesting one; otherwise search
	// down from the top of the screen, as less does.
	p.search(!p.follow, true)
}

func (p *logsPage) setFilter(expr string) {
	p.filterErr = ""
	if expr == "" {
		p.filterText = ""
		p.buf.setFilter(nil, false)
		p.afterFilter()
		return
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		p.filterErr = err.Error()
		p.m.flash.set("bad filter: " + err.Error())
		return
	}
	p.filterText = expr
	p.buf.setFilter(re, p.buf.inverse)
	p.afterFilter()
}

func (p *logsPage) afterFilter() {
	if p.find.has && p.buf.filter != nil {
		i := p.buf.viewIndex(p.find.cur)
		if i >= p.buf.viewLen() || p.buf.viewAt(i) != p.find.cur {
			p.find.has = false
		}
	}
	if !p.follow {
		p.scrollTo(p.buf.viewIndex(p.top))
	}
}

// search moves to the next (or previous) viewed line holding the find
// text, wrapping around. fromEdge starts at the bottom (backwards) or the
// top of the screen (forwards) instead of the current match.
func (p *logsPage) search(forward, fromEdge bool) {
	if p.find.text == "" {
		p.m.flash.set("nothing to find: press / first")
		return
	}
	n := p.buf.viewLen()
	if n == 0 {
		p.find.msg = "no match"
		return
	}
	var start int
	switch {
	case fromEdge && forward:
		start = p.topIndex() - 1
	case fromEdge:
		start = n
	case p.find.has:
		start = p.buf.viewIndex(p.find.cur)
	case forward:
		start = p.topIndex() - 1
	default:
		start = n
	}
	found := -1
	for step := 1; step <= n; step++ {
		var i int
		if forward {
			i = ((start+step)%n + n) % n
		} else {
			i = ((start-step)%n + n) % n
		}
		if p.find.matches(p.buf.entry(p.buf.viewAt(i)).text) {
			found = i
			break
		}
	}
	if found < 0 {
		p.find.has, p.find.msg = false, "no match"
		return
	}
	p.find.cur, p.find.has, p.find.msg = p.buf.viewAt(found), true, ""
	// Count once per search, not per frame.
	count, idx := 0, 0
	for i := 0; i < n; i++ {
		if p.find.matches(p.buf.entry(p.buf.viewAt(i)).text) {
			count++
			if i == found {
				idx = count
			}
		}
	}
	p.find.count, p.find.idx = count, idx
	// Show the match a third of the way down, and stop following.
	p.follow = false
	p.scrollTo(found - p.rows()/3)
}

func (p *logsPage) viewAbs(i int) uint64 {
	n := p.buf.viewLen()
	if n == 0 {
		return p.buf.end()
	}
	return p.buf.viewAt(min(max(i, 0), n-1))
}

// scrollTo puts view position i at the top, and stops following unless
// that already shows the end.
func (p *logsPage) scrollTo(i int) {
	n := p.buf.viewLen()
	i = min(max(i, 0), max(n-1, 0))
	if !p.wrap {
		// No blank page past the end; following again is f or G.
		i = max(min(i, n-p.rows()), 0)
	}
	p.follow = false
	p.top = p.viewAbs(i)
}

// scrollDown is scrollTo for the down keys: reaching the end follows
// again, as scrolling back into the live tail means.
func (p *logsPage) scrollDown(i int) {
	p.scrollTo(i)
	if !p.wrap && p.topIndex() >= p.buf.viewLen()-p.rows() {
		p.follow = true
	}
}

// topIndex is the view position of the first line on screen.
func (p *logsPage) topIndex() int {
	n := p.buf.viewLen()
	if !p.follow {
		return min(p.buf.viewIndex(p.top), max(n-1, 0))
	}
	if !p.wrap {
		return max(n-p.rows(), 0)
	}
	// Walk back from the end until the screen is full.
	rows, i := 0, n
	for i > 0 && rows < p.rows() {
		i--
		rows += p.lineRows(p.buf.entry(p.buf.viewAt(i)))
	}
	return i
}

func (p *logsPage) tagWidth() int {
	if p.source != "" {
		return 0
	}
	w := 0
	for _, r := range p.m.snap.Roles {
		w = max(w, len(r.Name))
	}
	return min(max(w, 3), 16) + 1
}

func (p *logsPage) gutter() int {
	if p.find.text != "" || p.hasErr {
		return 2
	}
	return 0
}

func (p *logsPage) textWidth() int { return max(p.w-p.tagWidth()-p.gutter()-p.stampWidth(), 1) }

// stampLayout is the timestamps column (T): time of day to the millisecond.
const stampLayout = "15:04:05.000"

func (p *logsPage) stampWidth() int {
	if p.stamps {
		return len(stampLayout) + 1
	}
	return 0
}

// jumpError scrolls to the next (or previous) line that reads as an
// error, from the last one jumped to (or the view's top), and counts it
// among all of them in the status line; it says so when there is none.
func (p *logsPage) jumpError(topIdx int, forward bool) {
	n := p.buf.viewLen()
	from := topIdx
	if forward {
		from = topIdx - 1
	}
	if p.hasErr && p.errAbs >= p.buf.first {
		// The line jumped to last (or where it would be, if a filter
		// now hides it: the search goes on from there).
		from = p.buf.viewIndex(p.errAbs)
		if !forward && (from >= p.buf.viewLen() || p.buf.viewAt(from) != p.errAbs) {
			from++ // viewIndex named the next line after the hidden one
		}
	}
	step := 1
	if !forward {
		step = -1
	}
	for i := from + step; i >= 0 && i < n; i += step {
		abs := p.buf.viewAt(i)
		if p.buf.entry(abs).level != levelError {
			continue
		}
		p.follow, p.hasErr, p.errAbs = false, true, abs
		p.scrollTo(i)
		k, total := 0, 0
		for j := 0; j < n; j++ {
			if p.buf.entry(p.buf.viewAt(j)).level == levelError {
				total++
				if j <= i {
					k++
				}
			}
		}
		p.errMsg = fmt.Sprintf("error %d/%d", k, total)
		return
	}
	if forward {
		p.m.flash.set("no error below")
	} else {
		p.m.flash.set("no error above")
	}
}

// highlightFilter marks what the filter's regex matches in one visible
// line (find's highlight takes precedence when both are set).
func (p *logsPage) highlightFilter(s string) string {
	locs := p.buf.filter.FindAllStringIndex(s, -1)
	if len(locs) == 0 {
		return s
	}
	st := p.m.c.Styles
	var b strings.Builder
	at := 0
	for _, l := range locs {
		if l[1] <= l[0] {
			continue
		}
		b.WriteString(s[at:l[0]])
		b.WriteString(st.Match.Render(s[l[0]:l[1]]))
		at = l[1]
	}
	b.WriteString(s[at:])
	return b.String()
}

func (p *logsPage) lineRows(e *logEntry) int {
	if !p.wrap || e.width <= p.textWidth() {
		return 1
	}
	tw := p.textWidth()
	return (e.width + tw - 1) / tw
}

func (p *logsPage) View() string {
	st := p.m.c.Styles
	rows := p.rows()
	out := make([]string, 0, p.h)
	out = append(out, p.statusLine())
	n := p.buf.viewLen()
	i := p.topIndex()
	tw, tagW := p.textWidth(), p.tagWidth()
	for i < n && len(out) <= rows {
		abs := p.buf.viewAt(i)
		e := p.buf.entry(abs)
		isCur := p.find.has && abs == p.find.cur
		prefix := ""
		if p.hasErr && abs == p.errAbs && p.find.text == "" {
			prefix = "» "
		} else if p.hasErr && p.find.text == "" {
			prefix = "  "
		}
		if p.find.text != "" {
			if isCur {
				prefix = "» "
			} else {
				prefix = "  "
			}
		}
		if tagW > 0 {
			prefix += roleStyle(e.role).Render(fit(e.role, tagW-1)) + " "
		}
		if p.stamps {
			prefix += st.Faint.Render(e.time.Format(stampLayout)) + " "
		}
		segs := []string{e.text}
		switch {
		case p.wrap && e.width > tw:
			segs = strings.Split(ansi.Hardwrap(e.text, tw, true), "\n")
		case p.xoff > 0:
			segs[0] = ansi.Cut(e.text, p.xoff, p.xoff+tw)
		case e.width > tw:
			segs[0] = ansi.Truncate(e.text, tw, "…")
		}
		for j, s := range segs {
			if len(out) > rows {
				break
			}
			switch {
			case p.find.text != "":
				s = p.highlight(s, isCur)
			case p.buf.filter != nil && !p.buf.inverse:
				s = p.highlightFilter(s)
			}
			switch {
			case e.level == levelError: // a crash note of tsd's too
				s = st.Bad.Render(s)
			case e.note:
				s = st.Warn.Render(s)
			case e.level == levelWarning:
				s = st.Warn.Render(s)
			}
			if j == 0 {
				out = append(out, prefix+s)
			} else {
				out = append(out, strings.Repeat(" ", p.gutter()+tagW)+s)
			}
		}
		i++
	}
	if n == 0 {
		msg := "no log lines yet"
		if p.buf.filter != nil && p.buf.n > 0 {
			msg = "no line passes the filter"
		}
		out = append(out, st.Faint.Render("  "+msg))
	}
	if p.input != inputNone {
		prompt := "find: "
		if p.input == inputFilter {
			prompt = "filter (regex): "
			if p.buf.inverse {
				prompt = "filter (regex, inverted): "
			}
		}
		for len(out) < p.h-1 {
			out = append(out, "")
		}
		out = append(out[:p.h-1], st.Prompt.Render(prompt)+fitInput(p.in.text, max(p.w-width(prompt), 1)))
	}
	return screen(out, p.w, p.h)
}

// highlight marks every occurrence of the find text in one visible line.
func (p *logsPage) highlight(s string, cur bool) string {
	st := p.m.c.Styles
	style := st.Match
	if cur {
		style = st.CurMatch
	}
	var b strings.Builder
	for {
		var i int
		if p.find.fold {
			i = indexFold(s, p.find.text)
		} else {
			i = strings.Index(s, p.find.text)
		}
		if i < 0 {
			break
		}
		b.WriteString(s[:i])
		b.WriteString(style.Render(s[i : i+len(p.find.text)]))
		s = s[i+len(p.find.text):]
	}
	b.WriteString(s)
	return b.String()
}

func (p *logsPage) statusLine() string {
	st := p.m.c.Styles
	src := "all roles (merged)"
	if p.source != "" {
		src = p.source
	}
	parts := []string{st.Title.Render("logs: " + src), "follow " + onOff(p.follow)}
	if p.buf.filter != nil {
		f := "filter /" + p.filterText + "/"
		if p.buf.inverse {
			f += " inverted"
		}
		parts = append(parts, f+fmt.Sprintf(" %d/%d", p.buf.viewLen(), p.buf.n))
	}
	if p.find.text != "" {
		f := fmt.Sprintf("find %q", p.find.text)
		switch {
		case p.find.msg != "":
			f += " " + p.find.msg
		case p.find.has:
			f += fmt.Sprintf(" %d/%d", p.find.idx, p.find.count)
		}
		parts = append(parts, f)
	}
	if p.errMsg != "" {
		parts = append(parts, p.errMsg)
	}
	parts = append(parts, "wrap "+onOff(p.wrap))
	if p.xoff > 0 {
		parts = append(parts, fmt.Sprintf("→%d", p.xoff))
	}
	total := fmt.Sprintf("%d lines", p.buf.n)
	if p.buf.first > 0 || p.feed.dropped > 0 {
		total += fmt.Sprintf(" (%d older not shown)", p.buf.first+p.feed.dropped)
	}
	parts = append(parts, total)
	return strings.Join(parts, " · ")
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// indexFold is strings.Index ignoring ASCII case; needle is lower case.
func indexFold(s, needle string) int {
	if needle == "" {
		return 0
	}
	n := len(needle)
	c0 := needle[0]
	for i := 0; i+n <= len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != c0 {
			continue
		}
		j := 1
		for ; j < n; j++ {
			d := s[i+j]
			if d >= 'A' && d <= 'Z' {
				d += 'a' - 'A'
			}
			if d != needle[j] {
				break
			}
		}
		if j == n {
			return i
		}
	}
	return -1
}
