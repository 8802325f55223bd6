package lane

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/protocol.md §1.4: a missing directory is created 0700, a stale socket is
// unlinked, any other file at a socket path is refused, and so is a
// symlinked directory or an over-long path.
func TestPrepareIPC(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "run", "sub")
	sock := filepath.Join(dir, "w-in.sock")
	if err := prepareIPC(sock); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir %v %v", fi.Mode(), err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if err := prepareIPC(sock); err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Fatalf("stale socket not removed: %v", err)
	}
	if err := os.WriteFile(sock, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := prepareIPC(sock); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("regular file: %v", err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := prepareIPC(filepath.Join(link, "x-in.sock")); err == nil {
		t.Fatal("symlinked directory accepted")
	}
	if err := prepareIPC("/tmp/" + strings.Repeat("a", 120)); err == nil {
		t.Fatal("over-long path accepted")
	}
}
