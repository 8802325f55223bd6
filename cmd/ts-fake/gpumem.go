package main

import (
	"bufio"
	"fmt"
	"io"
	stdlog "log"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

func quietLogger() *stdlog.Logger { return stdlog.New(io.Discard, "", 0) }

// gpuHolder is a python3+torch child that keeps N MB allocated on one CUDA
// device so telemetry sees a rank's memory on a real GPU machine. It exits
// when its parent (the rank) goes away, as a real rank's memory is freed
// with the rank.
type gpuHolder struct{ cmd *exec.Cmd }

const gpuHolderScript = `
import os, sys, time
try:
    import torch
    if not torch.cuda.is_available():
        print("SKIP torch sees no CUDA device", flush=True); sys.exit(0)
    dev = int(sys.argv[2])
    if dev >= torch.cuda.device_count():
        dev = dev % torch.cuda.device_count()
    x = torch.empty(int(sys.argv[1]) * (1 << 20), dtype=torch.uint8, device="cuda:%d" % dev)
    x.fill_(1)
    torch.cuda.synchronize()
    print("OK cuda:%d %s" % (dev, torch.cuda.get_device_name(dev)), flush=True)
except Exception as e:
    print("SKIP %s" % (e,), flush=True); sys.exit(0)
ppid = os.getppid()
while os.getppid() == ppid:
    time.sleep(0.2)
`

// startGPUHolder waits (up to 2 minutes) for the holder to report and logs
// the outcome; without python3, torch or a GPU it logs a skip and returns nil.
func startGPUHolder(l *logger, mb, device int) *gpuHolder {
	py, err := exec.LookPath("python3")
	if err != nil {
		l.warn("ts-fake.py:1", "fake GPU memory: skipped (no python3: %v)", err)
		return nil
	}
	cmd := exec.Command(py, "-c", gpuHolderScript, fmt.Sprint(mb), fmt.Sprint(device))
	cmd.Stderr = os.Stderr
	cmd.Env = os.Environ()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		l.warn("ts-fake.py:1", "fake GPU memory: skipped (%v)", err)
		return nil
	}
	if err := cmd.Start(); err != nil {
		l.warn("ts-fake.py:1", "fake GPU memory: skipped (%v)", err)
		return nil
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	var got string
	select {
	case got = <-line:
	case <-time.After(2 * time.Minute):
		got = "SKIP holder did not report within 2m"
	}
	if !strings.HasPrefix(got, "OK") {
		l.warn("ts-fake.py:1", "fake GPU memory: skipped (%s)", strings.TrimPrefix(got, "SKIP "))
		_ = cmd.Process.Kill()
		go func() { _ = cmd.Wait() }()
		return nil
	}
	l.info("ts-fake.py:1", "fake GPU memory: holding %d MB on %s (pid %d)", mb, strings.TrimPrefix(got, "OK "), cmd.Process.Pid)
	go func() { _ = cmd.Wait() }()
	return &gpuHolder{cmd: cmd}
}

func (h *gpuHolder) stop() {
	if h != nil && h.cmd.Process != nil {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
	}
}
