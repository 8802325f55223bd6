package supervisor

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
)

// fullDisk is a log file layer whose writes fail while full is set.
type fullDisk struct {
	mu   sync.Mutex
	full bool
	data bytes.Buffer
}

func (d *fullDisk) setFull(v bool) { d.mu.Lock(); d.full = v; d.mu.Unlock() }

func (d *fullDisk) Open(string, bool) (logFile, int64, error) { return d, 0, nil }
func (d *fullDisk) Rename(string, string) error               { return nil }
func (d *fullDisk) Names(string, logFile) bool                { return true }
func (d *fullDisk) Close() error                              { return nil }
func (d *fullDisk) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.full {
		return 0, syscall.ENOSPC
	}
	return d.data.Write(p)
}

type chunkReader struct {
	disk   *fullDisk
	chunks []string
	full   []bool
	i      int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if r.i == len(r.chunks) {
		return 0, io.EOF
	}
	r.disk.setFull(r.full[r.i])
	n := copy(p, r.chunks[r.i])
	r.i++
	return n, nil
}

// Regression: with a full log disk nothing said so until the role stopped,
// and logging never resumed after space was freed. Now the first failed
// write reports the problem (Health, onHealth), the pipe keeps being
// drained into the ring, and the next batch that fits resumes the file
// with a "N lines lost" marker.
func TestLogFileSurvivesFullDisk(t *testing.T) {
	t.Parallel()
	disk := &fullDisk{}
	w, err := openRotatingFS(disk, "/logs/decode.log", 1<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	var health []string
	w.setOnHealth(func(m string) { health = append(health, m) })

	// Each chunk is one read of the engine's pipe, written to the file
	// before the next read: the disk's state is set per chunk.
	r := &chunkReader{disk: disk, chunks: []string{"one\n", "two\nthree\n", "four\n", "five\n"}, full: []bool{false, true, true, false}}
	ring := newLogRing("decode", 1000, 1<<20)
	if err := captureStream(r, ring, w, nil); err != nil {
		t.Fatalf("capture reported %v; a full disk must not end capture", err)
	}
	got := disk.data.String()
	want := "one\n[tsd] 3 lines lost: log file write failed (no space left on device)\nfive\n"
	if got != want {
		t.Fatalf("file:\n%q\nwant\n%q", got, want)
	}
	if len(ring.all()) != 5 {
		t.Fatalf("ring holds %d lines, want all 5", len(ring.all()))
	}
	if len(health) != 2 || !strings.Contains(health[0], "no space left") || !strings.Contains(health[1], "3 lines lost") {
		t.Fatalf("health reports %q", health)
	}
	if w.Health() != "" {
		t.Fatalf("still unhealthy: %q", w.Health())
	}
}

// The health reaches the snapshot (red note) while the disk is full.
func TestLogFileHealthInSnapshot(t *testing.T) {
	t.Parallel()
	disk := &fullDisk{full: true}
	w, err := openRotatingFS(disk, "/logs/decode.log", 1<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	plan := &profiles.Plan{Name: "t", Roles: []profiles.RolePlan{{Name: "decode", Kind: "decode", Local: true}}}
	s, err := New(Options{Plan: plan, NoLogFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	s.roster.current().members[0].a.file = w
	_, _ = w.Write([]byte("x\n"))
	snap := s.pub.build()
	if !strings.Contains(snap.Roles[0].LogError, "no space left") {
		t.Fatalf("LogError = %q", snap.Roles[0].LogError)
	}
}

// Regression: log files were 0644; engine logs carry prompts and paths.
func TestLogFilesAreOwnerOnly(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "logs", "decode.log")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("old\n"), 0o644); err != nil { // left by an older tsd
		t.Fatal(err)
	}
	w, err := openRotating(path, 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, _ = w.Write([]byte("aaaaaaaa\n")) // rotates
	}
	w.Close()
	for _, p := range []string{path, path + ".1"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", p, st.Mode().Perm())
		}
	}
}

// Regression: every engine inherited the gateway's API key variable.
func TestEngineEnvDropsGatewayKey(t *testing.T) {
	t.Parallel()
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{APIKeyEnv: "TSD_API_KEY"}}
	role := profiles.RolePlan{Name: "decode", Env: map[string]string{"A": "1"}}
	env := envList([]string{"TSD_API_KEY=s3cret", "PATH=/bin"}, role.Env, childEnvUnset(plan, role)...)
	for _, kv := range env {
		if strings.HasPrefix(kv, "TSD_API_KEY=") {
			t.Fatalf("engine env has the gateway key: %v", env)
		}
	}
	if strings.Join(env, " ") != "A=1 PATH=/bin" {
		t.Fatalf("env %v", env)
	}
	role.Env["TSD_API_KEY"] = "engine-own"
	if u := childEnvUnset(plan, role); u != nil {
		t.Fatalf("a role that sets the variable itself keeps it; unset %v", u)
	}
	if u := childEnvUnset(&profiles.Plan{}, role); u != nil {
		t.Fatalf("no api_key_env: unset %v", u)
	}
}

// inodeFS is a small disk with Unix file semantics: a removed file's
// blocks stay used while it is open, as on a real filesystem.
type inodeFS struct {
	mu    sync.Mutex
	cap   int
	names map[string]*inode
	all   map[*inode]bool
}

type inode struct {
	data  bytes.Buffer
	opens int
}

type inodeHandle struct {
	fs     *inodeFS
	n      *inode
	closed bool
}

func newInodeFS(capacity int) *inodeFS {
	return &inodeFS{cap: capacity, names: map[string]*inode{}, all: map[*inode]bool{}}
}

func (fs *inodeFS) used() int {
	u := 0
	for n := range fs.all {
		u += n.data.Len()
	}
	return u
}

func (fs *inodeFS) Open(path string, trunc bool) (logFile, int64, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.names[path]
	if n == nil || trunc {
		n = &inode{}
		fs.names[path] = n
		fs.all[n] = true
	}
	n.opens++
	return &inodeHandle{fs: fs, n: n}, int64(n.data.Len()), nil
}

func (fs *inodeFS) Rename(from, to string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.names[to] = fs.names[from]
	delete(fs.names, from)
	fs.gcLocked()
	return nil
}

func (fs *inodeFS) Names(path string, f logFile) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	h, ok := f.(*inodeHandle)
	return !ok || fs.names[path] == h.n
}

// remove is the operator's rm.
func (fs *inodeFS) remove(path string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	delete(fs.names, path)
	fs.gcLocked()
}

func (fs *inodeFS) read(path string) string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if n := fs.names[path]; n != nil {
		return n.data.String()
	}
	return ""
}

// gcLocked frees the blocks of files with no name and no open handle.
func (fs *inodeFS) gcLocked() {
	named := map[*inode]bool{}
	for _, n := range fs.names {
		named[n] = true
	}
	for n := range fs.all {
		if !named[n] && n.opens == 0 {
			delete(fs.all, n)
		}
	}
}

func (h *inodeHandle) Write(p []byte) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	free := h.fs.cap - h.fs.used()
	if len(p) > free {
		h.n.data.Write(p[:free])
		return free, syscall.ENOSPC
	}
	return h.n.data.Write(p)
}

func (h *inodeHandle) Close() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if !h.closed {
		h.closed = true
		h.n.opens--
		h.fs.gcLocked()
	}
	return nil
}

// Regression: on a full disk, deleting the log freed nothing (tsd held
// the deleted file open) and no line was ever written again. A failed
// write now closes the file, so the next batch reopens it by path: after
// the rm, the new file starts with the lines-lost marker and logging goes
// on.
func TestFullLogDeletedResumesInANewFile(t *testing.T) {
	t.Parallel()
	disk := newInodeFS(1 << 10)
	w, err := openRotatingFS(disk, "/logs/decode.log", 1<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(strings.Repeat("x", 99) + "\n")
	for range 20 { // 2,000 bytes of flood into 1 KiB
		_, _ = w.Write(line)
	}
	if !strings.Contains(w.Health(), "no space left") {
		t.Fatalf("health %q after the flood", w.Health())
	}
	_, _ = w.Write([]byte("still full\n")) // a retry while nothing was freed
	disk.remove("/logs/decode.log")
	_, _ = w.Write([]byte("after rm\n"))
	got := disk.read("/logs/decode.log")
	want := "[tsd] 11 lines lost: log file write failed (no space left on device)\nafter rm\n"
	if got != want {
		t.Fatalf("new file:\n%q\nwant\n%q", got, want)
	}
	if w.Health() != "" {
		t.Fatalf("still unhealthy: %q", w.Health())
	}
}

// The same on a real 2 MiB tmpfs, where the machine lets the test mount
// one (root with CAP_SYS_ADMIN); the fake disk above covers the rest.
func TestFullTmpfsLogDeletedResumes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=2m,mode=0700"); err != nil {
		t.Skipf("skipping: cannot mount a 2 MiB tmpfs here (%v); TestFullLogDeletedResumesInANewFile covers it", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	path := filepath.Join(dir, "decode.log")
	w, err := openRotating(path, 64<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	chunk := []byte(strings.Repeat(strings.Repeat("y", 1023)+"\n", 64)) // 64 KiB
	for i := 0; i < 64 && w.Health() == ""; i++ {
		_, _ = w.Write(chunk)
	}
	if !strings.Contains(w.Health(), "no space left") {
		t.Fatalf("health %q: the flood never filled the tmpfs", w.Health())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// Linux's tmpfs frees a removed, closed file at once; gVisor's (the
	// GPU host's sandbox) frees it a moment later, so the first writes
	// after the rm can still meet a full disk. Each failed one is counted
	// in the marker; write until a line lands, or give up at a deadline.
	var b []byte
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, _ = w.Write([]byte("after rm\n"))
		b, err = os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(b), "after rm\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line reached a new log file within 10 s of the rm: %q, %v (health %q)", b, err, w.Health())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.HasPrefix(string(b), "[tsd] ") || !strings.Contains(string(b), "lines lost") || !strings.HasSuffix(string(b), "after rm\n") {
		t.Fatalf("new file %q", b)
	}
}

// Regression: a log deleted while the disk was healthy (rm, an external
// logrotate) kept being written to the deleted inode until tsd's own
// rotation; 20 MB went to deleted files with no note. Now a write checks,
// at most once a reopenCheck, that the path still names the open file:
// the lines after the rm go to a new file at the path, the deleted one's
// blocks are freed, and onHealth hears a note (the role's event).
func TestDeletedLogReopenedByPath(t *testing.T) {
	t.Parallel()
	disk := newInodeFS(1 << 20)
	w, err := openRotatingFS(disk, "/logs/decode.log", 1<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(1000, 0)
	w.now = func() time.Time { return clock }
	var notes []string
	w.setOnHealth(func(m string) { notes = append(notes, m) })
	_, _ = w.Write([]byte("before\n"))
	disk.remove("/logs/decode.log") // the operator's rm
	_, _ = w.Write([]byte("within the check's second\n"))
	clock = clock.Add(reopenCheck)
	_, _ = w.Write([]byte("after\n"))
	if got := disk.read("/logs/decode.log"); got != "after\n" {
		t.Fatalf("the new file holds %q, want the lines after the check", got)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "removed or moved away") || w.Health() != "" {
		t.Fatalf("notes %q, health %q", notes, w.Health())
	}
	disk.mu.Lock()
	files := len(disk.all)
	disk.mu.Unlock()
	if files != 1 {
		t.Fatalf("%d files on disk: the deleted one was not let go", files)
	}
	// Moved away (logrotate's rename): the same.
	_ = disk.Rename("/logs/decode.log", "/logs/decode.log.1")
	clock = clock.Add(reopenCheck)
	_, _ = w.Write([]byte("rotated\n"))
	if got, old := disk.read("/logs/decode.log"), disk.read("/logs/decode.log.1"); got != "rotated\n" || old != "after\n" {
		t.Fatalf("after a rename: new %q, old %q", got, old)
	}
}

// The same on the real filesystem: an rm'd log is recreated by path.
func TestDeletedLogReopenedOnDisk(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "decode.log")
	w, err := openRotating(path, 1<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	clock := time.Unix(1000, 0)
	w.now = func() time.Time { return clock }
	_, _ = w.Write([]byte("before\n"))
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(reopenCheck)
	_, _ = w.Write([]byte("after\n"))
	if b, err := os.ReadFile(path); err != nil || string(b) != "after\n" {
		t.Fatalf("after rm: %q %v", b, err)
	}
}

// Regression: the disk-full note never appeared in tsd up --headless
// output, which prints the roles' lines (a role's events are the
// dashboard's): it is also a note among the role's lines now.
func TestLogFileHealthNoteInRoleLines(t *testing.T) {
	t.Parallel()
	disk := &fullDisk{full: true}
	w, err := openRotatingFS(disk, "/logs/decode.log", 1<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	plan := &profiles.Plan{Name: "t", Roles: []profiles.RolePlan{{Name: "decode", Kind: "decode", Local: true}}}
	s, err := New(Options{Plan: plan, NoLogFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	a := s.roster.current().members[0].a
	a.file = w
	a.watchFile()
	_, _ = w.Write([]byte("x\n"))
	lines, err := s.Logs("decode")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if l.Note && strings.Contains(l.Text, "[tsd] log file /logs/decode.log not written") && strings.Contains(l.Text, "no space left") {
			return
		}
	}
	t.Fatalf("no disk-full note among the role's lines: %+v", lines)
}
