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

	snap    snapshot.Snapshot
	hasSnap bool

	trends    *trends // the past, folded from every snapshot
	overview  *overviewPage
	inspector *inspectorPage
	logs      *logsPage
	events    *eventsPage
	help      *helpPage
	focus     pageID
	back      []pageID // where esc returns to

	confirmPrompt string
	confirmAction tea.Cmd
	confirmWhat   string
	confirmQuit   bool // q (or ctrl+c) again also confirms
	// confirmAlt is a second answer to the prompt (the quit prompt's
	// detach or stop), on confirmAltKeys.
	confirmAlt       tea.Cmd
	confirmAltWhat   string
	confirmAltKeys   []string
	confirmAltHelp   string
	confirmEnter     bool // enter also confirms (the prompt's default)
	stopChosen       bool // the user chose to stop the deployment on quit
	daemonGone       bool // the status stream ended (Detach)
	flash            string
	pending          *pendingRestart
	cmdline          bool      // the : command line is open
	cmdText          string    // what is typed on it
	sortBy           string    // the roles table's order ("" = the plan's)
	footKey, footVal string    // the footer as last drawn, and what it was drawn for
	flashSeen        string    // the flash as the last tick saw it
	flashAt          time.Time // when that tick first saw it
	testing          bool
	helpBar          help.Model

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
	if opts.Detach {
		m.c.Keys.Quit.SetHelp("q", "quit (detach, or stop every role)")
	}
	m.overview = &overviewPage{m: m}
	m.inspector = &inspectorPage{m: m}
	m.logs = newLogsPage(m, opts.LogLines)
	m.help = &helpPage{m: m}
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
	}
	return m.overview
}

// chrome: a title line on top, a message line and the help bar below.
const chromeLines = 3

func (m *Model) setSize(w, h int) {
	m.c.Width, m.c.Height = w, h
	bh := max(h-chromeLines, 1)
	for _, id := range []pageID{pageOverview, pageInspector, pageLogs, pageHelp, pageEvents} {
		m.page(id).SetSize(w, bh)
	}
	m.helpBar.SetWidth(w)
}

// Update folds one message into the model.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.setSize(msg.Width, msg.Height)
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
	case logSubscribedMsg, logBatchMsg, logClosedMsg:
		return m, m.logs.Update(msg)
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
	if m.sortBy != "" {
		// Snapshots are shared and immutable: sort a copy.
		s.Roles = sortedRoles(s.Roles, m.sortBy)
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
	if m.confirmAction != nil {
		switch {
		case key.Matches(k, keys.Yes), m.confirmQuit && key.Matches(k, keys.Quit), m.confirmEnter && k.String() == "enter":
			act := m.confirmAction
			m.flash = m.confirmWhat + "…"
			m.clearConfirm()
			return act
		case m.confirmAlt != nil && oneOf(k.String(), m.confirmAltKeys):
			act := m.confirmAlt
			m.flash = m.confirmAltWhat + "…"
			m.clearConfirm()
			return act
		case key.Matches(k, keys.No):
			m.clearConfirm()
			m.flash = "cancelled"
		}
		return nil
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
		m.cmdline, m.cmdText = true, ""
		return nil
	case key.Matches(k, keys.Quit) && m.opts.Detach:
		m.askQuitDetach()
		return nil
	case key.Matches(k, keys.Quit):
		if n := m.runningRoles(); n > 0 {
			m.ask(fmt.Sprintf("quit tsd? this stops %d running role(s) [y/n]", n), "quitting", tea.Quit)
			m.confirmQuit = true
			return nil
		}
		return tea.Quit
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
		}
		return nil
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

// cmdKey edits the : command line; enter runs it, esc closes it.
func (m *Model) cmdKey(k tea.KeyPressMsg) tea.Cmd {
	switch k.Code {
	case tea.KeyEscape:
		m.cmdline = false
		return nil
	case tea.KeyEnter:
		m.cmdline = false
		return m.runCommand(m.cmdText)
	case tea.KeyBackspace:
		if r := []rune(m.cmdText); len(r) > 0 {
			m.cmdText = string(r[:len(r)-1])
		} else {
			m.cmdline = false
		}
		return nil
	}
	if k.Text != "" {
		m.cmdText += k.Text
	}
	return nil
}

// runCommand does what a : command says. A typed command is explicit, so
// it acts without a confirm prompt (quit still asks while roles run).
func (m *Model) runCommand(line string) tea.Cmd {
	names := make([]string, len(m.snap.Roles))
	for i, r := range m.snap.Roles {
		names[i] = r.Name
	}
	c, err := parseCommand(line, names)
	if err != nil {
		m.flash = err.Error()
		return nil
	}
	b := m.b
	switch c.verb {
	case "restart":
		m.flash = "restart " + c.arg + "…"
		return func() tea.Msg {
			err := b.Restart(c.arg)
			msg := controlDoneMsg{what: "restart " + c.arg, err: err}
			if err == nil {
				msg.restarted = c.arg
			}
			return msg
		}
	case "stop":
		return m.run("stop "+c.arg, func() error { return b.Stop(c.arg) })
	case "start":
		return m.run("start "+c.arg, func() error { return b.Start(c.arg) })
	case "logs":
		return m.navigate(pageLogs, c.arg)
	case "inspect":
		for i, r := range m.snap.Roles {
			if r.Name == c.arg {
				m.overview.selectRole(i)
			}
		}
		return m.navigate(pageInspector, c.arg)
	case "sort":
		m.setSort(c.arg)
	case "help":
		return m.navigate(pageHelp, "")
	case "events":
		return m.navigate(pageEvents, "")
	case "quit":
		return m.key(tea.KeyPressMsg{Code: 'q', Text: "q"})
	}
	return nil
}

// setSort orders the roles table by key ("" = the plan's order), keeping
// the selected role selected.
func (m *Model) setSort(by string) {
	m.sortBy = by
	m.setSnapshot(m.snap)
	if by == "" {
		m.flash = "roles in plan order"
	} else {
		m.flash = "roles sorted by " + by
	}
}

func (m *Model) runningRoles() int {
	n := 0
	for _, r := range m.snap.Roles {
		if running(r.State) {
			n++
		}
	}
	return n
}

// ask shows a y/n question; yes says what is happening and runs action.
func (m *Model) ask(prompt, what string, action tea.Cmd) {
	m.confirmPrompt, m.confirmWhat, m.confirmAction = prompt, what, action
}

func (m *Model) clearConfirm() {
	m.confirmPrompt, m.confirmAction, m.confirmQuit = "", nil, false
	m.confirmAlt, m.confirmAltWhat, m.confirmAltKeys, m.confirmAltHelp, m.confirmEnter = nil, "", nil, "", false
}

// askQuitDetach is the quit prompt of a dashboard attached to a daemon:
// leaving detaches (the deployment keeps running) unless the user picks
// stop; with StopOnQuit (make demo) stop is the default and d detaches.
func (m *Model) askQuitDetach() {
	n := m.runningRoles()
	stop := m.stopDeploymentCmd()
	if m.opts.StopOnQuit {
		m.ask(fmt.Sprintf("quit tsd? this stops %d running role(s) [y/n · d detach]", n), "stopping the deployment", stop)
		m.confirmAlt, m.confirmAltWhat, m.confirmAltKeys, m.confirmAltHelp = tea.Quit, "detaching", []string{"d", "D"}, "detach"
	} else {
		m.ask(fmt.Sprintf("detach? %d running role(s) keep running [y/n · s stop them all]", n), "detaching", tea.Quit)
		m.confirmAlt, m.confirmAltWhat, m.confirmAltKeys, m.confirmAltHelp = stop, "stopping the deployment", []string{"s", "S"}, "stop all"
	}
	m.confirmQuit, m.confirmEnter = true, true
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

func oneOf(s string, set []string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
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
}

// View renders the whole screen at the size last given.
func (m *Model) View() tea.View {
	v := tea.NewView(m.render())
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
	lines := make([]string, 0, h)
	lines = append(lines, m.titleLine())
	body := m.page(m.focus).View()
	lines = append(lines, strings.Split(body, "\n")...)
	if len(lines) > h-2 {
		lines = lines[:max(h-2, 0)]
	}
	for len(lines) < h-2 {
		lines = append(lines, "")
	}
	switch {
	case m.cmdline:
		lines = append(lines, st.Prompt.Render(":")+fit(m.cmdText+"█", max(w-1, 0)))
	case m.confirmAction != nil:
		lines = append(lines, st.Prompt.Render(fit(m.confirmPrompt, w)))
	default:
		lines = append(lines, fit(m.flash, w))
	}
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
	if m.snap.Profile != "" {
		parts = append(parts, m.snap.Profile)
	}
	if !m.hasSnap {
		parts = append(parts, "waiting for status…")
	} else {
		parts = append(parts, fmt.Sprintf("%d/%d roles ready", ready, total))
	}
	pageName := [...]string{"overview", "inspector", "logs", "help", "events"}[m.focus]
	left := strings.Join(parts, " · ")
	right := "[" + pageName + "]"
	gap := m.c.Width - ansi.StringWidth(left) - len(right)
	if gap < 1 {
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
	k := m.c.Keys
	if m.confirmAction != nil {
		bs := []key.Binding{k.Yes, k.No}
		if m.confirmAlt != nil && len(m.confirmAltKeys) > 0 {
			bs = append(bs, key.NewBinding(key.WithKeys(m.confirmAltKeys...), key.WithHelp(m.confirmAltKeys[0], m.confirmAltHelp)))
		}
		return m.helpBar.ShortHelpView(shortBindings(bs))
	}
	if m.cmdline {
		return m.c.Styles.HelpDesc.Render("enter run · esc cancel · verbs: " + strings.Join(verbNames(), " "))
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

// shortBindings keeps each binding's first words only: the bar has room
// for short words; the ? page has the rest.
func shortBindings(bs []key.Binding) []key.Binding {
	short := make([]key.Binding, len(bs))
	for i, b := range bs {
		h := b.Help()
		short[i] = key.NewBinding(key.WithKeys(b.Keys()...), key.WithHelp(h.Key, shortDesc(h.Desc)))
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
	if ev.Button != tea.MouseLeft || m.focus != pageOverview || m.cmdline || m.confirmAction != nil {
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
	if m.cmdline || m.confirmAction != nil || m.page(m.focus).Capturing() {
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
