package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/tsd-project/tsd/snapshot"
)

type pageID int

const (
	pageOverview pageID = iota
	pageInspector
	pageLogs
	pageHelp
	pageEvents
	pageDescribe
	pageApply
	pagePlanner
)

// pageNames are the title line's names of the pages, by pageID.
var pageNames = [...]string{"overview", "inspector", "logs", "help", "events", "describe", "apply", "planner"}

// page is the component contract: a page gets its size, handles the keys
// routed to it, renders exactly its height, and names its bindings for the
// help bar.
type page interface {
	SetSize(w, h int)
	Update(msg tea.Msg) tea.Cmd
	View() string
	ShortHelp() []key.Binding
	// Capturing is true while the page reads typed text (find, filter);
	// global keys are then off.
	Capturing() bool
}

// pages are the dashboard's pages, one of each; the root model routes to
// the focused one (nav).
type pages struct {
	overview  *overviewPage
	inspector *inspectorPage
	logs      *logsPage
	describe  *describePage
	events    *eventsPage
	help      *helpPage
	apply     *applyPage
	planner   *plannerPage // the SLO planner (planner.go)
}

func (ps *pages) get(id pageID) page {
	switch id {
	case pageInspector:
		return ps.inspector
	case pageLogs:
		return ps.logs
	case pageHelp:
		return ps.help
	case pageEvents:
		return ps.events
	case pageDescribe:
		return ps.describe
	case pageApply:
		return ps.apply
	case pagePlanner:
		return ps.planner
	}
	return ps.overview
}

func (ps *pages) all() []page {
	return []page{ps.overview, ps.inspector, ps.logs, ps.help, ps.events, ps.describe, ps.apply, ps.planner}
}

type (
	controlDoneMsg struct {
		what string
		err  error
		// ready names the role a successful restart or start call was
		// for: the message says "done" only once the role is ready.
		ready string
	}
	testDoneMsg struct {
		reply   string
		latency time.Duration
		err     error
	}
	stoppedMsg struct{} // the deployment was asked to stop: quit
	savedMsg   struct {
		role, path string
		err        error
	}
)

// Model is the dashboard's root. It folds messages into state and routes
// keys: to the open prompt, the `:` line (cmdLine), or the focused page
// (nav); the flash, the table's sort and the command line are models of
// their own. Everything that talks to the backend runs in a tea.Cmd.
type Model struct {
	c    Common
	b    Backend
	opts Options

	raw     snapshot.Snapshot // the newest snapshot as the backend sent it (the plan's order)
	snap    snapshot.Snapshot // raw in the table's order: what every page reads
	hasSnap bool
	trends  *trends // the past, folded from every snapshot
	feed    *snapFeed

	pages   // one of each page
	nav     // the focused page and the way back
	cmd     cmdLine
	flash   flash
	confirm *confirmPrompt // the open question, if any
	await   *awaitReady    // a restart or start accepted, not yet ready
	bar     footer
	testing bool
	// sized is set by the terminal's first size: until then the view is
	// blank, so no frame is drawn at New's stand-in 80×24 (a first frame
	// at the wrong width, and a capture of it, showed a third of the
	// trends at 200 columns).
	sized bool
	out   Outcome // how the run ends (stop chosen, daemon gone, deployment)
}

// New builds the dashboard model. Run uses it; tests drive it directly.
func New(b Backend, opts Options) *Model {
	opts = opts.withDefaults()
	m := &Model{
		c:    Common{Width: 80, Height: 24, Styles: DefaultStyles(), Keys: DefaultKeyMap(), Now: opts.Now},
		b:    b,
		opts: opts,
		feed: newSnapFeed(),
	}
	m.trends = newTrends()
	switch {
	case opts.ReadOnly:
		m.c.Keys.Quit.SetHelp("q", "quit (detach)")
		// An observer cannot act on the deployment: the keys are off, so
		// the help bar and the ? page say so, and pressing one says why.
		for _, b := range m.c.Keys.controlKeys() {
			b.SetEnabled(false)
		}
		m.c.Keys.Test.SetEnabled(false) // a test request is traffic
	case opts.Detach:
		m.c.Keys.Quit.SetHelp("q", "quit (detach, or stop every role)")
	}
	m.pages = newPages(m, tableSort{})
	m.bar = newFooter(m.c.Styles)
	m.setSize(m.c.Width, m.c.Height)
	return m
}

// newPages builds every page afresh (New, and a :ctx switch).
func newPages(m *Model, sort tableSort) pages {
	gens := new(int) // log subscription generations, shared by both log views
	return pages{
		overview:  &overviewPage{m: m, sort: sort, split: splitView{log: newLogsPage(m, splitLogLines, gens)}},
		inspector: &inspectorPage{m: m},
		logs:      newLogsPage(m, m.opts.LogLines, gens),
		describe:  &describePage{m: m},
		events:    newEventsPage(m),
		help:      &helpPage{m: m},
		apply:     &applyPage{m: m},
		planner:   &plannerPage{m: m},
	}
}

// Init subscribes to the snapshot stream (unless Run already did) and
// starts the clock.
func (m *Model) Init() tea.Cmd {
	if m.feed.ch != nil {
		return tea.Batch(m.feed.next(), tick())
	}
	return tea.Batch(subscribeCmd(m.b, m.feed), tick())
}

// chrome: a title line on top, a message line and the help bar below.
const chromeLines = 3

func (m *Model) setSize(w, h int) {
	m.c.Width, m.c.Height = w, h
	bh := max(h-chromeLines, 1)
	for _, p := range m.pages.all() {
		p.SetSize(w, bh)
	}
}

// Update folds one message into the model.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.setSize(msg.Width, msg.Height)
		m.sized = true
		return m, nil
	case tea.KeyPressMsg:
		return m, m.key(msg)
	case tea.MouseClickMsg:
		return m, m.mouseClick(msg.Mouse())
	case tea.MouseWheelMsg:
		return m, m.mouseWheel(msg.Mouse())
	case snapSubscribedMsg:
		if !m.feed.owns(msg.from) || !m.feed.attach(msg.ch, msg.cancel) {
			msg.cancel()
			return m, nil
		}
		m.setSnapshot(msg.cur)
		return m, m.feed.next()
	case snapMsg:
		if !m.feed.owns(msg.from) {
			return m, nil
		}
		m.setSnapshot(msg.s)
		return m, m.feed.next()
	case snapClosedMsg:
		if !m.feed.owns(msg.from) {
			return m, nil
		}
		m.flash.set("status stream ended")
		if m.opts.Detach {
			// The daemon is gone (stopped by someone, or killed): nothing
			// is left to show.
			m.out.DaemonGone = true
			return m, tea.Quit
		}
		return m, nil
	case stoppedMsg:
		m.out.Stopped = true
		return m, tea.Quit
	case tickMsg:
		m.flash.tick(time.Time(msg))
		return m, tick()
	case controlDoneMsg:
		switch {
		case msg.err != nil:
			m.flash.set(fmt.Sprintf("%s failed: %v", msg.what, msg.err))
		case msg.ready != "":
			m.awaitReady(msg.what, msg.ready)
		default:
			m.flash.set(msg.what + ": done")
		}
		return m, nil
	case testDoneMsg:
		m.testing = false
		if msg.err != nil {
			m.flash.set(fmt.Sprintf("test request failed after %s: %v", fmtLatency(msg.latency), msg.err))
		} else {
			m.flash.set(fmt.Sprintf("test request ok in %s: %q", fmtLatency(msg.latency), oneLine(msg.reply)))
		}
		return m, nil
	case savedMsg:
		if msg.err != nil {
			m.flash.set(fmt.Sprintf("save %s log failed: %v", sourceName(msg.role), msg.err))
		} else {
			m.flash.set(fmt.Sprintf("saved the full %s log to %s", sourceName(msg.role), msg.path))
		}
		return m, nil
	case logSubscribedMsg:
		return m, m.logPageOf(msg.gen).Update(msg)
	case logBatchMsg:
		return m, m.logPageOf(msg.gen).Update(msg)
	case logClosedMsg:
		return m, m.logPageOf(msg.gen).Update(msg)
	case describedMsg:
		return m, m.describe.Update(msg)
	case applyPlannedMsg, applyProgressMsg:
		return m, m.apply.Update(msg)
	case deploymentsMsg:
		return m, m.deployments(msg)
	case connectedMsg:
		return m, m.switched(msg)
	}
	return m, nil
}

// logPageOf is the log view a subscription generation belongs to.
func (m *Model) logPageOf(gen int) *logsPage {
	if sl := m.overview.split.log; gen == sl.feed.gen {
		return sl
	}
	return m.logs
}

func (m *Model) setSnapshot(s snapshot.Snapshot) {
	if s.History != nil {
		// The daemon's trend rings (the first snapshot of an attach): fold
		// them once, keep none of it in the snapshot.
		m.trends.fold(s)
		s.History = nil
	}
	m.raw = s
	// Snapshots are shared and immutable: the sort orders a copy.
	m.snap, m.hasSnap = m.overview.sort.apply(s, m.c.Now()), true
	m.trends.fold(s)
	// The selection is kept by row key (role name), across re-sorting.
	m.overview.clamp()
	m.checkReady()
}

// setSort orders the roles table (o, O, :sort) from the newest snapshot
// the backend sent, keeping the selected role selected.
func (m *Model) setSort(msg string) {
	m.snap = m.overview.sort.apply(m.raw, m.c.Now())
	m.overview.clamp()
	m.flash.set(msg)
}

// awaitReady is a restart or start the backend accepted whose role has
// not been seen ready since (a restart: with a higher restart count).
type awaitReady struct {
	what     string // "restart decode-0", "start decode-0"
	role     string
	restarts int // the count when accepted; a start waits for ready only
	since    time.Time
}

// awaitReady notes an accepted restart or start; checkReady says "done"
// when the role is ready, or why it is not.
func (m *Model) awaitReady(what, role string) {
	a := &awaitReady{what: what, role: role, restarts: -1, since: m.c.Now()}
	if strings.HasPrefix(what, "restart") {
		for _, r := range m.snap.Roles {
			if r.Name == role {
				a.restarts = r.Restarts
			}
		}
	}
	m.await = a
	m.flash.set(what + ": waiting for it to be ready…")
	m.checkReady()
}

func (m *Model) checkReady() {
	a := m.await
	if a == nil {
		return
	}
	for _, r := range m.snap.Roles {
		if r.Name != a.role {
			continue
		}
		switch {
		case r.State == snapshot.StateReady && r.Restarts > a.restarts:
			again := ""
			if a.restarts >= 0 {
				again = " again"
			}
			m.flash.set(fmt.Sprintf("%s: done, ready%s in %s", a.what, again, snapshot.FormatDuration(m.c.Now().Sub(a.since).Round(100*time.Millisecond))))
			m.await = nil
		case r.State == snapshot.StateFailed:
			m.flash.set(fmt.Sprintf("%s failed: %s", a.what, r.Reason))
			m.await = nil
		}
	}
}

// key routes a key: the open prompt, the `:` line, a page reading typed
// text, a refused control key, the global keys, else the focused page.
func (m *Model) key(k tea.KeyPressMsg) tea.Cmd {
	keys := &m.c.Keys
	if m.confirm != nil {
		return m.confirmKey(k)
	}
	if m.cmd.active {
		out := m.cmd.key(k, m.targets())
		if out.note != "" {
			m.flash.set(out.note)
		}
		if out.ran {
			return m.runCommand(out.run)
		}
		return nil
	}
	p := m.pages.get(m.focus)
	if p.Capturing() && k.String() != "ctrl+c" {
		return p.Update(k)
	}
	if m.refuseKey(k) {
		return nil
	}
	switch {
	case key.Matches(k, keys.Command):
		m.cmd.open("")
		return m.listDeployments()
	case key.Matches(k, keys.Quit):
		return m.askQuit()
	case key.Matches(k, keys.Help):
		if m.focus == pageHelp {
			m.goBack()
			return nil
		}
		return m.navigate(pageHelp, "")
	case key.Matches(k, keys.Back):
		if m.focus != pageOverview {
			m.goBack()
			return nil
		}
	case key.Matches(k, keys.Planner):
		if m.focus == pagePlanner {
			m.goBack()
			return nil
		}
		return m.navigate(pagePlanner, "")
	case key.Matches(k, keys.Test):
		if m.testing {
			m.flash.set("test request already running")
			return nil
		}
		m.testing = true
		m.flash.set("test request sent…")
		return testCmd(m.b, m.opts.TestTimeout)
	}
	return p.Update(k)
}

// refuseKey says so when a read-only dashboard gets a key that would act
// on the deployment (r, s, R, K on a page that has them; t anywhere): the
// keys are off, and silence would read as a key that does nothing.
func (m *Model) refuseKey(k tea.KeyPressMsg) bool {
	if !m.opts.ReadOnly {
		return false
	}
	keys := &m.c.Keys
	bs := []*key.Binding{&keys.Test}
	switch m.focus {
	case pageOverview, pageInspector, pageDescribe:
		bs = append(bs, keys.controlKeys()...)
	}
	for _, b := range bs {
		for _, s := range b.Keys() {
			if k.String() == s {
				m.refuseReadOnly(b.Help().Desc)
				return true
			}
		}
	}
	return false
}

// targets are what the `:` line may name now.
func (m *Model) targets() commandTarget {
	tg := targetsOf(&m.snap)
	tg.deployments = m.cmd.deployments
	return tg
}

// stopDeploymentCmd stops the whole deployment through the backend, then
// quits; if the backend cannot, it says why and stays.
func (m *Model) stopDeploymentCmd() tea.Cmd {
	b := m.b
	return func() tea.Msg {
		st, ok := b.(DeploymentStopper)
		if !ok {
			return controlDoneMsg{what: "stop the deployment", err: errors.New("this dashboard cannot stop the deployment")}
		}
		if err := st.StopDeployment(); err != nil {
			return controlDoneMsg{what: "stop the deployment", err: err}
		}
		return stoppedMsg{}
	}
}

// navigate switches pages; the logs page subscribes to its source.
func (m *Model) navigate(to pageID, role string) tea.Cmd {
	if !m.push(to) && to != pageLogs {
		return nil
	}
	m.flash.pageChanged()
	switch to {
	case pageInspector:
		m.inspector.open(role)
	case pageLogs:
		return m.logs.open(role)
	case pageDescribe:
		return m.describe.open(role)
	case pageHelp:
		m.help.open()
	}
	return nil
}

func (m *Model) goBack() {
	from := m.pop()
	m.flash.pageChanged()
	if from == pageLogs && m.focus != pageLogs {
		m.logs.close()
	}
	if from == pageDescribe {
		m.describe.role = "" // a late answer is dropped
	}
}

// control runs one backend call in a command and reports how it went.
func control(what string, fn func() error) tea.Cmd {
	return func() tea.Msg { return controlDoneMsg{what: what, err: fn()} }
}

// startCmd starts a role; once the backend accepted it the model waits
// for the role to be ready before it says "done".
func (m *Model) startCmd(name string) tea.Cmd {
	what, b := "start "+name, m.b
	m.flash.set("starting " + name + "…")
	return func() tea.Msg {
		if err := b.Start(name); err != nil {
			return controlDoneMsg{what: what, err: err}
		}
		return controlDoneMsg{what: what, ready: name}
	}
}

func testCmd(b Backend, timeout time.Duration) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		reply, lat, err := b.TestRequest(ctx)
		if lat == 0 {
			lat = time.Since(start)
		}
		return testDoneMsg{reply: reply, latency: lat, err: err}
	}
}

func (m *Model) closeSubscriptions() {
	m.feed.close()
	m.logs.close()
	m.overview.split.log.close()
}

// View renders the whole screen at the size last given.
func (m *Model) View() tea.View {
	body := ""
	if m.sized {
		body = m.render()
	}
	v := tea.NewView(body)
	v.AltScreen = true
	// Click selects a role, the wheel scrolls (hold shift to select text,
	// as in other full-screen terminal programs).
	v.MouseMode = tea.MouseModeCellMotion
	v.WindowTitle = "tsd " + m.title()
	return v
}

func (m *Model) title() string {
	if m.opts.Title != "" {
		return m.opts.Title
	}
	return m.snap.Name
}

// render is View's text; golden tests compare it.
func (m *Model) render() string {
	w, h := m.c.Width, m.c.Height
	st := m.c.Styles
	// The message line: one line, but a confirm question wraps onto up to
	// three (taking the page's last lines), so what it warns of is read
	// whole before the answer.
	var msg []string
	switch {
	case m.cmd.active:
		msg = []string{m.cmd.view(st, w)}
	case m.confirm != nil:
		ql := wrapText("", "  ", m.confirm.text, w)
		if len(ql) > 3 || h < 12 {
			ql = []string{fit(m.confirm.text, w)}
		}
		for _, l := range ql {
			msg = append(msg, st.Prompt.Render(fit(l, w)))
		}
	default:
		msg = []string{fit(m.flash.text, w)}
	}
	bodyH := h - 1 - len(msg)
	lines := make([]string, 0, h)
	lines = append(lines, m.titleLine())
	body := m.pages.get(m.focus).View()
	lines = append(lines, strings.Split(body, "\n")...)
	if len(lines) > bodyH {
		lines = lines[:max(bodyH, 0)]
	}
	for len(lines) < bodyH {
		lines = append(lines, "")
	}
	lines = append(lines, msg...)
	lines = append(lines, m.helpLine())
	return screen(lines, w, h)
}

func (m *Model) titleLine() string {
	st := m.c.Styles
	ready, total := 0, len(m.snap.Roles)
	for _, r := range m.snap.Roles {
		if r.State == snapshot.StateReady {
			ready++
		}
	}
	name := m.title()
	if name == "" {
		name = "tsd"
	} else {
		name = "tsd · " + name
	}
	parts := []string{st.Title.Render(name)}
	if !m.hasSnap {
		parts = append(parts, "waiting for status…")
	} else {
		parts = append(parts, fmt.Sprintf("%d/%d roles ready", ready, total))
	}
	if m.opts.ReadOnly {
		parts = append(parts, st.Warn.Render("read-only"))
	}
	// The profile's path last: when the line is too long, it is what gets
	// cut.
	if m.snap.Profile != "" {
		parts = append(parts, m.snap.Profile)
	}
	left := strings.Join(parts, " · ")
	right := "[" + pageNames[m.focus] + "]"
	gap := m.c.Width - ansi.StringWidth(left) - len(right)
	if gap < 1 {
		// A long profile path gives way before the page's name does.
		if room := m.c.Width - len(right) - 1; room >= 20 {
			return ansi.Truncate(left, room, "…") + " " + right
		}
		return fit(left, m.c.Width)
	}
	return left + strings.Repeat(" ", gap) + right
}

// helpLine is the footer: the prompt's answers, the `:` line's keys, or
// the focused page's keys with t, ? and q.
func (m *Model) helpLine() string {
	switch {
	case m.confirm != nil:
		return m.confirmHelp()
	case m.cmd.active:
		return m.cmd.help(m.c.Styles, m.c.Width)
	}
	tail := []key.Binding{m.c.Keys.Test, m.c.Keys.Help, m.c.Keys.Quit}
	return m.bar.view(m.pages.get(m.focus).ShortHelp(), tail, m.opts.ReadOnly, m.c.Width)
}

// footer is the help bar: a page's keys, then t, ? and q, which always
// show; page keys that do not fit give way. It is kept until the width or
// the keys change (drawing it was a fifth of a frame).
type footer struct {
	bar      help.Model
	st       Styles
	key, val string // the footer as last drawn, and what it was drawn for
}

func newFooter(st Styles) footer {
	bar := help.New()
	bar.Styles.ShortKey = st.HelpKey
	bar.Styles.ShortDesc = st.HelpDesc
	bar.ShortSeparator = " · "
	return footer{bar: bar, st: st}
}

func (f *footer) view(pageKeys, tailKeys []key.Binding, readOnly bool, w int) string {
	page := shortBindings(pageKeys)
	// The key is the width and the page's keys: the tail and read-only
	// are the dashboard's for its whole run.
	var kb strings.Builder
	kb.WriteString(itoa(w))
	for _, b := range page {
		h := b.Help()
		kb.WriteByte('|')
		kb.WriteString(h.Key)
		kb.WriteByte(' ')
		kb.WriteString(h.Desc)
	}
	if ck := kb.String(); ck != f.key {
		f.key, f.val = ck, f.layout(page, shortBindings(tailKeys), readOnly, w)
	}
	return f.val
}

func (f *footer) layout(page, tailKeys []key.Binding, readOnly bool, w int) string {
	bar := f.bar
	bar.SetWidth(0) // no truncation: we choose what to drop
	tail := bar.ShortHelpView(tailKeys)
	sep := bar.ShortSeparator
	if readOnly {
		// An observer's dashboard says so where the keys are: r, s and R
		// are not there.
		tail = f.st.Warn.Render("read-only") + sep + tail
	}
	room := w - ansi.StringWidth(tail) - ansi.StringWidth(sep)
	var head string
	for n := len(page); n > 0; n-- {
		head = bar.ShortHelpView(page[:n])
		if n < len(page) {
			head += sep + "…"
		}
		if ansi.StringWidth(head) <= room {
			break
		}
		head = ""
	}
	if head == "" {
		return tail
	}
	return head + sep + tail
}

// shortBindings keeps each enabled binding's first words only: the bar
// has room for short words; the ? page has the rest.
func shortBindings(bs []key.Binding) []key.Binding {
	short := make([]key.Binding, 0, len(bs))
	for _, b := range bs {
		if !b.Enabled() {
			continue
		}
		h := b.Help()
		short = append(short, key.NewBinding(key.WithKeys(b.Keys()...), key.WithHelp(h.Key, shortDesc(h.Desc))))
	}
	return short
}

func shortDesc(d string) string {
	if i := strings.Index(d, " ("); i > 0 {
		return d[:i]
	}
	return d
}

func fmtLatency(d time.Duration) string {
	if d >= time.Millisecond {
		d = d.Round(time.Millisecond)
	}
	return snapshot.FormatDuration(d)
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(sanitize(strings.ReplaceAll(s, "\n", " "))), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func sourceName(role string) string {
	if role == "" {
		return "merged"
	}
	return role
}

// mouseClick selects the clicked role row on the overview.
func (m *Model) mouseClick(ev tea.Mouse) tea.Cmd {
	if ev.Button != tea.MouseLeft || m.focus != pageOverview || m.cmd.active || m.confirm != nil {
		return nil
	}
	// Screen row 0 is the title; the page body starts below it.
	if i, ok := m.overview.rowAt(ev.Y - 1); ok {
		m.overview.setCursor(m.overview.rows, i)
	}
	return nil
}

// mouseWheel moves the selection on the overview and scrolls the logs
// (three lines a notch), as the arrow keys do.
func (m *Model) mouseWheel(ev tea.Mouse) tea.Cmd {
	msg := tea.KeyPressMsg{Code: tea.KeyUp}
	switch ev.Button {
	case tea.MouseWheelUp:
	case tea.MouseWheelDown:
		msg.Code = tea.KeyDown
	default:
		return nil
	}
	p := m.pages.get(m.focus)
	if m.cmd.active || m.confirm != nil || p.Capturing() {
		return nil
	}
	steps := 1
	if m.focus == pageLogs {
		steps = 3
	}
	var cmds []tea.Cmd
	for range steps {
		cmds = append(cmds, p.Update(msg))
	}
	return tea.Batch(cmds...)
}
