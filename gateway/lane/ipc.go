package lane

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxSunPath is the longest Unix socket path the kernel accepts (sun_path
// holds 108 bytes including the terminating NUL).
const maxSunPath = 107

// prepareIPC applies docs/protocol.md §1.4 before an ipc data plane is bound:
// the parent directory must be ours (created 0700 when missing; an existing
// one must be a real directory owned by our effective uid, because the
// sockets are unauthenticated), and a leftover socket file at a data-plane
// path is stale and unlinked, while any other file type there is refused.
func prepareIPC(sockPaths ...string) error {
	for _, p := range sockPaths {
		if len(p) > maxSunPath {
			return fmt.Errorf("ipc path %q is %d bytes, over the %d-byte Unix socket limit", p, len(p), maxSunPath)
		}
		dir := filepath.Dir(p)
		if err := ensureOwnedDir(dir); err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("check ipc socket %s: %w", p, err)
		case fi.Mode()&fs.ModeSocket != 0:
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove stale ipc socket %s: %w", p, err)
			}
		default:
			return fmt.Errorf("ipc socket path %s exists and is not a socket (%s); refusing to replace it", p, fi.Mode().Type())
		}
	}
	return nil
}

func ensureOwnedDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create ipc directory %s: %w", dir, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("check ipc directory %s: %w", dir, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir() {
		return fmt.Errorf("ipc directory %s is not a real directory (%s)", dir, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("ipc directory %s is owned by uid %d, not us (uid %d): its sockets would be open to that user", dir, st.Uid, os.Geteuid())
	}
	return nil
}

// ipcPath returns the filesystem path of an ipc:// endpoint, or "".
func ipcPath(endpoint string) string {
	if p, ok := strings.CutPrefix(endpoint, "ipc://"); ok {
		return p
	}
	return ""
}
