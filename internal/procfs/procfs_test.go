package procfs

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// On the live /proc, a listening socket of this process is found in the
// table and mapped back to this process.
func TestLiveListenerMapsToUs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	want := ":" + hex4(port)
	inodes := map[string]bool{}
	for _, so := range TCPSockets("/proc") {
		if so.State == Listen && len(so.Local) > 5 && so.Local[len(so.Local)-5:] == want {
			inodes[so.Inode] = true
			if so.UID != os.Getuid() {
				t.Fatalf("uid %d, want %d", so.UID, os.Getuid())
			}
		}
	}
	if len(inodes) == 0 {
		t.Fatalf("no LISTEN row for port %d", port)
	}
	if pid := HolderOf("/proc", inodes); pid != os.Getpid() {
		t.Fatalf("holder %d, want us (%d)", pid, os.Getpid())
	}
	if Cmdline("/proc", os.Getpid()) == "" {
		t.Fatal("empty cmdline for ourselves")
	}
}

// A fake /proc: short and header rows skipped, tcp6 read too, missing
// files and unreadable fds ignored.
func TestFakeProc(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "net"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "net", "tcp6"), []byte("  sl local rem st ...\n"+
		"   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 0:0 0:0 0 1000 0 4242 1\n"+
		"short row\n"), 0o644))
	must(os.MkdirAll(filepath.Join(dir, "77", "fd"), 0o755))
	must(os.Symlink("socket:[4242]", filepath.Join(dir, "77", "fd", "3")))
	must(os.WriteFile(filepath.Join(dir, "77", "cmdline"), []byte("ts\x00serve\x00"), 0o644))
	must(os.MkdirAll(filepath.Join(dir, "self"), 0o755))
	ss := TCPSockets(dir)
	if len(ss) != 1 || ss[0].Inode != "4242" || ss[0].UID != 1000 || ss[0].State != Listen {
		t.Fatalf("sockets %+v", ss)
	}
	if pid := HolderOf(dir, map[string]bool{"4242": true}); pid != 77 {
		t.Fatalf("holder %d", pid)
	}
	if pid := HolderOf(dir, map[string]bool{"1": true}); pid != 0 {
		t.Fatalf("holder of an unknown inode %d", pid)
	}
	if c := Cmdline(dir, 77); c != "ts serve" {
		t.Fatalf("cmdline %q", c)
	}
}

func hex4(p int) string { return fmt.Sprintf("%04X", p) }
