package procfs

// Which process holds a socket, asked of a few processes only. HolderOf
// reads every process's fds; the lane asks about one connection's peer
// among the processes of one role (gateway/lane/peer.go), so it walks
// that role's tree through each task's children file and reads the fd
// links of those processes alone.

import (
	"bytes"
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Children appends pid's children to dst, read from the children file of
// each of its threads (/proc/PID/task/TID/children). ok is false when the
// kernel has no such files (built without CONFIG_PROC_CHILDREN): the
// caller then needs a Scan. A process that is gone has no children.
func Children(proc string, pid int, dst []int) (_ []int, ok bool) {
	if proc == "" {
		proc = "/proc"
	}
	task := proc + "/" + strconv.Itoa(pid) + "/task"
	d, err := os.Open(task)
	if err != nil {
		return dst, true // gone
	}
	defer d.Close()
	var buf [4096]byte
	for {
		tids, err := d.Readdirnames(64)
		for _, tid := range tids {
			fd, oerr := unix.Open(task+"/"+tid+"/children", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if oerr != nil {
				if errors.Is(oerr, unix.ENOENT) {
					if _, serr := os.Stat(task + "/" + tid); serr == nil {
						return dst, false // the thread is there, its children file is not
					}
				}
				continue // the thread ended meanwhile
			}
			carry := 0
			for {
				n, rerr := unix.Read(fd, buf[carry:])
				if n <= 0 || rerr != nil {
					break
				}
				b := buf[:carry+n]
				// Whole numbers only; a number cut by the buffer's end
				// moves to its front for the next read.
				last := bytes.LastIndexByte(b, ' ')
				for _, f := range bytes.Fields(b[:last+1]) {
					if c, ok := atoi(f); ok {
						dst = append(dst, c)
					}
				}
				carry = copy(buf[:], b[last+1:])
			}
			if carry > 0 {
				if c, ok := atoi(bytes.TrimSpace(buf[:carry])); ok {
					dst = append(dst, c)
				}
			}
			_ = unix.Close(fd)
		}
		if err != nil { // io.EOF: every thread read; else the process went away
			return dst, true
		}
	}
}

// HoldsSocket reports whether pid has the socket inode among its open
// fds. It reads at most *budget fd links (each one counted against it),
// in batches, into one fixed buffer.
func HoldsSocket(proc string, pid int, inode uint64, budget *int) bool {
	if proc == "" {
		proc = "/proc"
	}
	var want [32]byte
	w := append(append(append(want[:0], "socket:["...), strconv.FormatUint(inode, 10)...), ']')
	d, err := os.Open(proc + "/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return false
	}
	defer d.Close()
	dfd := int(d.Fd())
	var link [64]byte
	for *budget > 0 {
		names, err := d.Readdirnames(128)
		for _, n := range names {
			if *budget--; *budget < 0 {
				return false
			}
			k, lerr := unix.Readlinkat(dfd, n, link[:])
			if lerr == nil && bytes.Equal(link[:k], w) {
				return true
			}
		}
		if err != nil {
			return false // io.EOF: every fd read; or the process went away
		}
	}
	return false
}
