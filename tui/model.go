package tui

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
	pagePlanner
)

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

type (
	controlDoneMsg struct {
		what string
		err  error
		// restarted names the role a successful restart call was for: the
		// message says "done" only once the role is ready again.
		restarted string
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

// Model is the dashboard. It folds messages into view state; everything
// that talks to the backend runs in a tea.Cmd.
type Model struct {
	c    Common
	b    Backend
	opts Options

	snap     snapshot.Snapshot
	planSnap snapshot.Snapshot // snap as the backend sent it (the plan's order)
	hasSnap  bool

	trends    *trends // the past, folded from every snapshot
	overview  *overviewPage
	inspector *inspectorPage
	logs      *logsPage
	splitLog  *logsPage // the split view's live log of the selected role
	split     bool      // the overview shows the table with splitLog under it
	logGen    int       // the last log subscription generation handed out (both log views)
	describe  *describePage
	events    *eventsPage
	help      *helpPage
	planner   *plannerPage // the SLO planner (planner.go)
	focus     pageID
	back      []pageID // where esc returns to

	confirm          *confirmPrompt // the open question, if any
	stopChosen       bool           // the user chose to stop the deployment on quit
	daemonGone       bool           // the status stream ended (Detach)
	flash            string
	pending          *pendingRestart
	cmdline          bool      // the : command line is open
	cmd              lineInput // what is typed on it
	cmdHist          []string  // commands run, oldest first (up/down recall them)
	histAt           int       // the history entry shown (len(cmdHist): the line being typed)
	histDraft        string    // the line being typed while history is browsed
	tabCands         []string  // what Tab offered last (shown in the footer)
	tabAt            int       // the candidate Tab cycled to (-1: none yet)
	tabBase          string    // the line before Tab cycling began
	sortBy           string    // the roles table's order: a column id ("" = the plan's)
	sortDesc         bool      // largest (or last) first
	footKey, footVal string    // the footer as last drawn, and what it was drawn for
	flashSeen        string    // the flash as the last tick saw it
	flashAt          time.Time // when that tick first saw it
	testing          bool
	helpBar          help.Model
	// sized is set by the terminal's first size: until then the view is
	// blank, so no frame is drawn at New's stand-in 80×24 (a first frame
	// at the wrong width, and a capture of it, showed a third of the
	// trends at 200 columns).
	sized bool

	snapCancel func()
	snapCh     <-chan snapshot.Snapshot
	done       chan struct{}
	closed     bool
}

// New builds the dashboard model. Run uses it; tests drive it directly.
func New(b Backend, opts Options) *Model {
	opts = opts.withDefaults()
	m := &Model{
		c:    Common{Width: 80, Height: 24, Styles: DefaultStyles(), Keys: DefaultKeyMap(), Now: opts.Now},
		b:    b,
		opts: opts,
		done: make(chan struct{}),
	}
	m.trends = newTrends()
	m.events = newEventsPage(m)
	switch {
	case opts.ReadOnly:
		m.c.Keys.Quit.SetHelp("q", "quit (detach)")
		// An observer cannot act on the deployment: the keys are off, so
		// the help bar and the ? page say so, and the commands refuse.
		for _, b := range []*key.Binding{&m.c.Keys.Restart, &m.c.Keys.StopStart, &m.c.Keys.RestartAll} {
			b.SetEnabled(false)
		}
	case opts.Detach:
		m.c.Keys.Quit.SetHelp("q", "quit (detach, or stop every role)")
	}
	m.overview = &overviewPage{m: m}
	m.inspector = &inspectorPage{m: m}
	m.logs = newLogsPage(m, opts.LogLines)
	m.splitLog = newLogsPage(m, splitLogLines)
	m.describe = &describePage{m: m}
	m.help = &helpPage{m: m}
	m.planner = &plannerPage{m: m}
	m.helpBar = help.New()
	m.helpBar.Styles.ShortKey = m.c.Styles.HelpKey
	m.helpBar.Styles.ShortDesc = m.c.Styles.HelpDesc
	m.helpBar.ShortSeparator = " · "
	m.setSize(m.c.Width, m.c.Height)
	return m
}

// Init subscribes to the snapshot stream (unless Run already did) and
// starts the clock.
func (m *Model) Init() tea.Cmd {
	if m.snapCh != nil {
		return tea.Batch(m.rearmSnap(), tick())
	}
	return tea.Batch(subscribeCmd(m.b), tick())
}

func (m *Model) page(id pageID) page {
	switch id {
	case pageInspector:
		return m.inspector
	case pageLogs:
		return m.logs
	case pageHelp:
		return m.help
	case pageEvents:
		return m.events
	case pageDescribe:
		return m.describe
	case pagePlanner:
		return m.planner
	}
	return m.overview
}

// chrome: a title line on top, a message line and the help bar below.
const chromeLines = 3

func (m *Model) setSize(w, h int) {
	m.c.Width, m.c.Height = w, h
	bh := max(h-chromeLines, 1)
	for _, id := range []pageID{pageOverview, pageInspector, pageLogs, pageHelp, pageEvents, pageDescribe, pagePlanner} {
		m.page(id).SetSize(w, bh)
	}
	m.helpBar.SetWidth(w)
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
		if m.closed {
			msg.cancel()
			return m, nil
		}
		m.snapCancel, m.snapCh = msg.cancel, msg.ch
		m.setSnapshot(msg.cur)
		return m, m.rearmSnap()
	case snapMsg:
		m.setSnapshot(msg.s)
		return m, m.rearmSnap()
	case snapClosedMsg:
		m.flash = "status stream ended"
		if m.opts.Detach {
			// The daemon is gone (stopped by someone, or killed): nothing
			// is left to show.
			m.daemonGone = true
			return m, tea.Quit
		}
		return m, nil
	case stoppedMsg:
		m.stopChosen = true
		return m, tea.Quit
	case tickMsg:
		m.expireFlash(time.Time(msg))
		return m, tick()
	case controlDoneMsg:
		switch {
		case msg.err != nil:
			m.flash = fmt.Sprintf("%s failed: %v", msg.what, msg.err)
		case msg.restarted != "":
			m.awaitReady(msg.restarted)
		default:
			m.flash = msg.what + ": done"
		}
		return m, nil
	case testDoneMsg:
		m.testing = false
		if msg.err != nil {
			m.flash = fmt.Sprintf("test request failed after %s: %v", fmtLatency(msg.latency), msg.err)
		} else {
			m.flash = fmt.Sprintf("test request ok in %s: %q", fmtLatency(msg.latency), oneLine(msg.reply))
		}
		return m, nil
	case savedMsg:
		if msg.err != nil {
			m.flash = fmt.Sprintf("save %s log failed: %v", sourceName(msg.role), msg.err)
		} else {
			m.flash = fmt.Sprintf("saved the full %s log to %s", sourceName(msg.role), msg.path)
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
	}
	return m, nil
}

func (m *Model) rearmSnap() tea.Cmd {
	if m.snapCh == nil || m.closed {
		return nil
	}
	return waitSnap(m.snapCh, m.done)
}

func (m *Model) setSnapshot(s snapshot.Snapshot) {
	if s.History != nil {
		// The daemon's trend rings (the first snapshot of an attach): fold
		// them once, keep none of it in the snapshot.
		m.trends.fold(s)
		s.History = nil
	}
	m.planSnap = s
	if m.sortBy != "" {
		// Snapshots are shared and immutable: sort a copy.
		s.Roles = sortRoles(&s, m.c.Now(), m.sortBy, m.sortDesc)
	}
	m.snap, m.hasSnap = s, true
	m.trends.fold(s)
	// The selection is kept by row key (role name), across re-sorting.
	m.overview.clamp()
	m.checkRestarted()
}

// pendingRestart is a restart the backend accepted whose role has not yet
// been seen ready again with a higher restart count.
type pendingRestart struct {
	role     string
	restarts int
	since    time.Time
}

// awaitReady notes an accepted restart; checkRestarted says "done" when
// the role is back, or why it is not.
func (m *Model) awaitReady(role string) {
	n := 0
	for _, r := range m.snap.Roles {
		if r.Name == role {
			n = r.Restarts
		}
	}
	m.pending = &pendingRestart{role: role, restarts: n, since: m.c.Now()}
	m.flash = "restart " + role + ": waiting for it to be ready…"
	m.checkRestarted()
}

func (m *Model) checkRestarted() {
	p := m.pending
	if p == nil {
		return
	}
	for _, r := range m.snap.Roles {
		if r.Name != p.role {
			continue
		}
		switch {
		case r.State == snapshot.StateReady && r.Restarts > p.restarts:
			m.flash = fmt.Sprintf("restart %s: done, ready again in %s", p.role, snapshot.FormatDuration(m.c.Now().Sub(p.since).Round(100*time.Millisecond)))
			m.pending = nil
		case r.State == snapshot.StateFailed:
			m.flash = fmt.Sprintf("restart %s failed: %s", p.role, r.Reason)
			m.pending = nil
		}
	}
}

// key handles what is global and routes everything else to the focused page.
func (m *Model) key(k tea.KeyPressMsg) tea.Cmd {
	keys := &m.c.Keys
	if m.confirm != nil {
		return m.confirmKey(k)
	}
	if m.cmdline {
		return m.cmdKey(k)
	}
	p := m.page(m.focus)
	if p.Capturing() && k.String() != "ctrl+c" {
		return p.Update(k)
	}
	switch {
	case key.Matches(k, keys.Command):
		m.cmdline, m.cmd = true, lineInput{}
		m.histAt, m.histDraft = len(m.cmdHist), ""
		m.tabCands, m.tabAt = nil, -1
		return nil
	case key.Matches(k, keys.Quit):
		return m.askQuit()
	case key.Matches(k, keys.Help):
		if m.focus == pageHelp {
			m.goBack()
		} else {
			m.navigate(pageHelp, "")
		}
		return nil
	case key.Matches(k, keys.Back):
		if m.focus != pageOverview {
			m.goBack()
			return nil
		}
	case key.Matches(k, keys.Test):
		if m.testing {
			m.flash = "test request already running"
			return nil
		}
		m.testing = true
		m.flash = "test request sent…"
		return testCmd(m.b, m.opts.TestTimeout)
	}
	return p.Update(k)
}

// cmdHistMax bounds the : command history.
const cmdHistMax = 50

// cmdKey edits the : command line: enter runs it, esc closes it, up and
// down walk the history, tab completes the word being typed (again:
// the next candidate).
func (m *Model) cmdKey(k tea.KeyPressMsg) tea.Cmd {
	switch k.String() {
	case "esc":
		m.cmdline = false
		return nil
	case "enter":
		m.cmdline = false
		line := strings.TrimSpace(m.cmd.text)
		if line != "" && (len(m.cmdHist) == 0 || m.cmdHist[len(m.cmdHist)-1] != line) {
			m.cmdHist = append(m.cmdHist, line)
			if len(m.cmdHist) > cmdHistMax {
				m.cmdHist = m.cmdHist[len(m.cmdHist)-cmdHistMax:]
			}
		}
		return m.runCommand(line)
	case "up":
		if m.histAt > 0 {
			if m.histAt == len(m.cmdHist) {
				m.histDraft = m.cmd.text
			}
			m.histAt--
			m.cmd.text = m.cmdHist[m.histAt]
		}
		m.tabCands = nil
		return nil
	case "down":
		if m.histAt < len(m.cmdHist) {
			m.histAt++
			if m.histAt == len(m.cmdHist) {
				m.cmd.text = m.histDraft
			} else {
				m.cmd.text = m.cmdHist[m.histAt]
			}
		}
		m.tabCands = nil
		return nil
	case "tab", "shift+tab":
		m.tab(k.String() == "shift+tab")
		return nil
	case "backspace":
		if m.cmd.text == "" {
			m.cmdline = false // backspace on an empty line closes it, as vim's does
			return nil
		}
	}
	if m.cmd.edit(k) {
		m.tabCands, m.tabAt = nil, -1
	}
	return nil
}

// tab completes the command line: the first tab grows the word to what
// every candidate shares; with several left, each next tab puts the next
// one in its place (shift+tab the previous).
func (m *Model) tab(back bool) {
	tg := m.commandTargets()
	if len(m.tabCands) > 1 {
		n := len(m.tabCands)
		switch {
		case m.tabAt < 0 && back:
			m.tabAt = n - 1
		case m.tabAt < 0:
			m.tabAt = 0
		case back:
			m.tabAt = (m.tabAt + n - 1) % n
		default:
			m.tabAt = (m.tabAt + 1) % n
		}
		typing, _ := completions(m.tabBase, tg)
		m.cmd.text = strings.TrimSuffix(m.tabBase, typing) + m.tabCands[m.tabAt]
		return
	}
	out, cands := completeLine(m.cmd.text, tg)
	m.cmd.text = out
	m.tabCands, m.tabAt, m.tabBase = cands, -1, out
	if len(cands) == 0 {
		m.flash = "nothing to complete"
	}
}

// commandTargets are the names a command line may use now.
func (m *Model) commandTargets() commandTarget {
	var tg commandTarget
	size := map[string]int{}
	for _, r := range m.snap.Roles {
		tg.roles = append(tg.roles, r.Name)
		if r.Group != "" {
			size[r.Group]++
		}
	}
	for _, r := range m.snap.Roles {
		if size[r.Group] > 1 && !contains(tg.groups, r.Group) && !contains(tg.roles, r.Group) {
			tg.groups = append(tg.groups, r.Group)
		}
		if r.Group != "" && !r.Remote && !contains(tg.entries, r.Group) {
			tg.entries = append(tg.entries, r.Group)
		}
	}
	sort.Strings(tg.roles)
	sort.Strings(tg.groups)
	sort.Strings(tg.entries)
	return tg
}

// runCommand does what a : command says. Restart and stop ask as r and s
// do: a typed line is as easy to get wrong as a key.
func (m *Model) runCommand(line string) tea.Cmd {
	c, err := parseCommand(line, m.commandTargets())
	if err != nil {
		m.flash = err.Error()
		return nil
	}
	role := func() (snapshot.RoleStatus, bool) {
		for _, r := range m.snap.Roles {
			if r.Name == c.arg {
				return r, true
			}
		}
		return snapshot.RoleStatus{}, false
	}
	switch c.verb {
	case "restart":
		if c.group {
			m.rollingGroup(c.arg)
			return nil
		}
		if r, ok := role(); ok {
			m.askRestart(r)
			if c.now && m.confirm != nil {
				m.confirm = m.nowOnly(m.confirm)
			}
		}
	case "stop":
		if r, ok := role(); ok {
			m.askStop(r)
			if c.now && m.confirm != nil {
				m.confirm = m.nowOnly(m.confirm)
			}
		}
	case "start":
		if m.refuseReadOnly("start " + c.arg) {
			return nil
		}
		b, name := m.b, c.arg
		return m.run("start "+name, func() error { return b.Start(name) })
	case "scale":
		m.askScale(c)
	case "logs":
		return m.navigate(pageLogs, c.arg)
	case "inspect", "describe":
		for i, r := range m.snap.Roles {
			if r.Name == c.arg {
				m.overview.selectRole(i)
			}
		}
		if c.verb == "describe" {
			return m.navigate(pageDescribe, c.arg)
		}
		return m.navigate(pageInspector, c.arg)
	case "sort":
		m.setSort(c.arg, c.desc)
	case "split":
		m.toggleSplit()
		return m.splitLogCmd()
	case "help":
		return m.navigate(pageHelp, "")
	case "events":
		return m.navigate(pageEvents, "")
	case "planner":
		return m.navigate(pagePlanner, "")
	case "quit":
		return m.askQuit()
	}
	return nil
}

// nowOnly turns a restart or stop prompt into its --now form: y does
// what ! would (a typed --now was the answer to the drain question).
func (m *Model) nowOnly(c *confirmPrompt) *confirmPrompt {
	if len(c.answers) < 2 {
		return c
	}
	now := c.answers[1]
	now.b = m.c.Keys.Yes
	text := strings.Replace(c.text, "? ", " now? ", 1)
	text = strings.Replace(text, " [y/n · ! now, no drain]", " [y/n]", 1)
	text = strings.Replace(text, "drains first", "ends at once", 1)
	text = strings.Replace(text, "drain first", "end at once", 1)
	return &confirmPrompt{text: text, def: -1, answers: []answer{now}}
}

// cmdlineHelp is the footer while the : line is open: what Tab offered
// (the one it put in place marked), else the keys and the verbs.
func (m *Model) cmdlineHelp() string {
	st := m.c.Styles
	if len(m.tabCands) > 1 {
		parts := make([]string, len(m.tabCands))
		for i, c := range m.tabCands {
			if i == m.tabAt {
				c = st.HelpKey.Render("[" + c + "]")
			}
			parts[i] = c
		}
		return fit(st.HelpDesc.Render("tab: ")+strings.Join(parts, " "), m.c.Width)
	}
	return fit(st.HelpDesc.Render("enter run · esc cancel · tab complete · ↑/↓ history · ctrl+u/ctrl+w erase · verbs: "+strings.Join(verbNames(), " ")), m.c.Width)
}

// setSort orders the roles table by a column ("" = the plan's order),
// keeping the selected role selected. The plan's order is restored from
// the newest snapshot the backend sent, not the sorted copy.
func (m *Model) setSort(by string, desc bool) {
	m.sortBy, m.sortDesc = by, desc
	m.setSnapshot(m.planSnap)
	if by == "" {
		m.flash = "roles in plan order"
		return
	}
	dir := "ascending"
	if desc {
		dir = "descending"
	}
	m.flash = "roles sorted by " + by + " (" + dir + "; o next column, O reverses)"
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
	if to == m.focus && to != pageLogs {
		return nil
	}
	if to != m.focus {
		m.back = append(m.back, m.focus)
	}
	m.focus = to
	switch to {
	case pageInspector:
		m.inspector.open(role)
	case pageLogs:
		return m.logs.open(role)
	case pageDescribe:
		return m.describe.open(role)
	}
	return nil
}

func (m *Model) goBack() {
	from := m.focus
	if len(m.back) == 0 {
		m.focus = pageOverview
	} else {
		m.focus = m.back[len(m.back)-1]
		m.back = m.back[:len(m.back)-1]
	}
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

// run starts a control call now, saying so on the message line.
func (m *Model) run(what string, fn func() error) tea.Cmd {
	m.flash = what + "…"
	return control(what, fn)
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
	if m.closed {
		return
	}
	m.closed = true
	close(m.done)
	if m.snapCancel != nil {
		m.snapCancel()
	}
	m.logs.close()
	m.splitLog.close()
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
	case m.cmdline:
		msg = []string{st.Prompt.Render(":") + fitInput(m.cmd.text, max(w-1, 0))}
	case m.confirm != nil:
		ql := wrapText("", "  ", m.confirm.text, w)
		if len(ql) > 3 || h < 12 {
			ql = []string{fit(m.confirm.text, w)}
		}
		for _, l := range ql {
			msg = append(msg, st.Prompt.Render(fit(l, w)))
		}
	default:
		msg = []string{fit(m.flash, w)}
	}
	bodyH := h - 1 - len(msg)
	lines := make([]string, 0, h)
	lines = append(lines, m.titleLine())
	body := m.page(m.focus).View()
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
	pageName := [...]string{"overview", "inspector", "logs", "help", "events", "describe", "planner"}[m.focus]
	left := strings.Join(parts, " · ")
	right := "[" + pageName + "]"
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

// flashLife is how long a message stays in the message line. One that
// ends in "…" says something is under way and stays until its result
// replaces it.
const flashLife = 5 * time.Second

// expireFlash clears a message that has been shown for flashLife; it
// watches the flash on each tick, so no setter is needed.
func (m *Model) expireFlash(now time.Time) {
	if m.flash != m.flashSeen {
		m.flashSeen, m.flashAt = m.flash, now
		return
	}
	if m.flash != "" && !strings.HasSuffix(m.flash, "…") && now.Sub(m.flashAt) >= flashLife {
		m.flash, m.flashSeen = "", ""
	}
}

// helpLine is the footer: the focused page's keys, then t, ? and q, which
// are always shown; page keys that do not fit give way. A confirm prompt
// shows only the keys that work there.
func (m *Model) helpLine() string {
	if m.confirm != nil {
		return m.confirmHelp()
	}
	if m.cmdline {
		return m.cmdlineHelp()
	}
	page := shortBindings(m.page(m.focus).ShortHelp())
	// The footer only changes with the width and the page's keys; drawing
	// it was a fifth of a frame, so it is kept until those change.
	var kb strings.Builder
	kb.WriteString(itoa(m.c.Width))
	for _, b := range page {
		h := b.Help()
		kb.WriteString("|" + h.Key + " " + h.Desc)
		if !b.Enabled() {
			kb.WriteString(" off")
		}
	}
	if ck := kb.String(); ck == m.footKey {
		return m.footVal
	} else {
		m.footKey, m.footVal = ck, m.footer(page)
	}
	return m.footVal
}

// footer lays out the page's keys, then t, ? and q, which always show.
func (m *Model) footer(page []key.Binding) string {
	k := m.c.Keys
	tail := m.helpBar.ShortHelpView(shortBindings([]key.Binding{k.Test, k.Help, k.Quit}))
	sep := m.helpBar.ShortSeparator
	if m.opts.ReadOnly {
		// An observer's dashboard says so where the keys are: r, s and R
		// are not there.
		tail = m.c.Styles.Warn.Render("read-only") + sep + tail
	}
	room := m.c.Width - ansi.StringWidth(tail) - ansi.StringWidth(sep)
	var head string
	for n := len(page); n > 0; n-- {
		bar := m.helpBar
		bar.SetWidth(0) // no truncation: we choose what to drop
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
	if ev.Button != tea.MouseLeft || m.focus != pageOverview || m.cmdline || m.confirm != nil {
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
	if m.cmdline || m.confirm != nil || m.page(m.focus).Capturing() {
		return nil
	}
	steps := 1
	if m.focus == pageLogs {
		steps = 3
	}
	var cmds []tea.Cmd
	for range steps {
		cmds = append(cmds, m.page(m.focus).Update(msg))
	}
	return tea.Batch(cmds...)
}
