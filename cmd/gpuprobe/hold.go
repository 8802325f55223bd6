package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>

// CUDA driver API, declared by hand so no CUDA headers are needed to build:
// all handles are ints or pointers, every call returns CUresult (0 = ok).
typedef int (*cuInit_t)(unsigned int);
typedef int (*cuDeviceGetCount_t)(int*);
typedef int (*cuDeviceGet_t)(int*, int);
typedef int (*cuDevicePrimaryCtxRetain_t)(void**, int);
typedef int (*cuCtxSetCurrent_t)(void*);
typedef int (*cuMemAlloc_t)(unsigned long long*, size_t);

// hold_gpus makes a context on every visible device and allocates bytes on
// each, so NVML lists this process on those GPUs. It returns the CUresult
// (or -1/-2 when libcuda or a symbol is missing) and names the failing step.
static int hold_gpus(size_t bytes, int* count, const char** step) {
	void* h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h) { *step = "dlopen libcuda.so.1"; return -1; }
	cuInit_t cuInit = (cuInit_t)dlsym(h, "cuInit");
	cuDeviceGetCount_t cuDeviceGetCount = (cuDeviceGetCount_t)dlsym(h, "cuDeviceGetCount");
	cuDeviceGet_t cuDeviceGet = (cuDeviceGet_t)dlsym(h, "cuDeviceGet");
	cuDevicePrimaryCtxRetain_t retain = (cuDevicePrimaryCtxRetain_t)dlsym(h, "cuDevicePrimaryCtxRetain");
	cuCtxSetCurrent_t setCurrent = (cuCtxSetCurrent_t)dlsym(h, "cuCtxSetCurrent");
	cuMemAlloc_t memAlloc = (cuMemAlloc_t)dlsym(h, "cuMemAlloc_v2");
	if (!cuInit || !cuDeviceGetCount || !cuDeviceGet || !retain || !setCurrent || !memAlloc) { *step = "dlsym"; return -2; }
	int rc = cuInit(0);
	if (rc) { *step = "cuInit"; return rc; }
	rc = cuDeviceGetCount(count);
	if (rc) { *step = "cuDeviceGetCount"; return rc; }
	for (int i = 0; i < *count; i++) {
		int dev; void* ctx; unsigned long long p;
		rc = cuDeviceGet(&dev, i);
		if (rc) { *step = "cuDeviceGet"; return rc; }
		rc = retain(&ctx, dev);
		if (rc) { *step = "cuDevicePrimaryCtxRetain"; return rc; }
		rc = setCurrent(ctx);
		if (rc) { *step = "cuCtxSetCurrent"; return rc; }
		rc = memAlloc(&p, bytes);
		if (rc) { *step = "cuMemAlloc"; return rc; }
	}
	return 0;
}
*/
import "C"

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

const holdArg = "-_hold"

// holdMain is the child: hold every visible GPU, say "ready N", then live
// until the parent closes stdin (its lifeline) or dies.
func holdMain() {
	var count C.int
	var step *C.char
	if rc := C.hold_gpus(C.size_t(1<<30), &count, &step); rc != 0 {
		fmt.Printf("error %s: CUresult %d\n", C.GoString(step), int(rc))
		os.Exit(1)
	}
	fmt.Printf("ready %d\n", int(count))
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// holder is a child process holding the GPUs CUDA_VISIBLE_DEVICES=cvd shows it.
type holder struct {
	cmd     *exec.Cmd
	stdin   io.Closer
	Devices int
}

func startHolder(cvd string) (*holder, error) {
	cmd := exec.Command(os.Args[0], holdArg)
	cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+cvd, "CUDA_DEVICE_ORDER=PCI_BUS_ID")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("pipe to holder: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("pipe from holder: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start holder: %w", err)
	}
	h := &holder{cmd: cmd, stdin: in}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case s := <-line:
		if n, ok := strings.CutPrefix(s, "ready "); ok {
			_, _ = fmt.Sscan(n, &h.Devices)
			return h, nil
		}
		h.stop()
		return nil, fmt.Errorf("holder: %q", s)
	case <-time.After(90 * time.Second):
		h.stop()
		return nil, fmt.Errorf("holder: no CUDA context after 90s")
	}
}

func (h *holder) PID() int { return h.cmd.Process.Pid }

func (h *holder) stop() {
	_ = h.stdin.Close()
	done := make(chan struct{})
	go func() { _ = h.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = h.cmd.Process.Kill()
		<-done
	}
}
