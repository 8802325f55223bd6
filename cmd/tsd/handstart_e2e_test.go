package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// handEngine is one engine started from a printed `tsd plan` line, alone
// in its process group.
type handEngine struct {
	line string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func (e *handEngine) output() string {
	b, _ := os.ReadFile(e.log)
	return string(b)
}

// startHandEngine runs line with sh as a user would paste it, ts-fake on PATH.
func startHandEngine(t *testing.T, dir, line string, i int) *handEngine {
	t.Helper()
	e := &handEngine{line: line, log: filepath.Join(dir, fmt.Sprintf("engine-%d.log", i)), done: make(chan struct{})}
	f, err := os.Create(e.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e.cmd = exec.Command("sh", "-c", line)
	e.cmd.Dir = dir
	e.cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	e.cmd.Stdout, e.cmd.Stderr = f, f
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", line, err)
	}
	go func() {
		_ = e.cmd.Wait()
		close(e.done)
	}()
	pgid := e.cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-e.done
	})
	return e
}

// plannedCommands returns the command line printed under each `role` block
// of `tsd plan`'s human output, checking that each splits into VAR=value
// words followed by `ts-fake serve …`.
func plannedCommands(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(out, "\n")
	var cmds []string
	for i, l := range lines {
		if !strings.HasPrefix(l, "role ") || i+1 >= len(lines) {
			continue
		}
		if !strings.HasSuffix(l, "started by tsd") {
			t.Fatalf("role block is not local: %q", l)
		}
		line := strings.TrimSpace(lines[i+1])
		words := shellWords(t, line)
		j := 0
		for j < len(words) && !strings.HasPrefix(words[j], "-") && strings.Contains(words[j], "=") {
			j++
		}
		if j+1 >= len(words) || words[j] != "ts-fake" || words[j+1] != "serve" {
			t.Fatalf("printed line is not VAR=… ts-fake serve …: %q", line)
		}
		cmds = append(cmds, line)
	}
	return cmds
}

// waitReadiness polls GET /readiness until 200, re-checking whenever the
// gateway logs a line (ranks registering are logged) and at least every
// 100 ms, within a deadline.
func waitReadiness(t *testing.T, gw *deployment, base string, engines []*handEngine) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	fail := func(why string) {
		var b strings.Builder
		for _, e := range engines {
			fmt.Fprintf(&b, "\n--- %s\n%s", e.line, e.output())
		}
		t.Fatalf("%s; gateway output:\n%s%s", why, gw.output(), b.String())
	}
	for {
		gw.mu.Lock()
		grew := gw.grew
		gw.mu.Unlock()
		resp, err := c.Get(base + "/readiness")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		for _, e := range engines {
			select {
			case <-e.done:
				fail("engine exited: " + e.line)
			default:
			}
		}
		select {
		case <-grew:
		case <-tick.C:
		case <-gw.done:
			fail("tsd gateway exited")
		case <-deadline.C:
			fail("gateway never ready")
		}
	}
}

var ipcSockRe = regexp.MustCompile(`ipc://(\S+\.sock)`)

// TestE2EGatewayWithPlannedEngines: `tsd gateway PROFILE` serves
// ts-fake engines started by hand, with sh, from the command lines `tsd
// plan PROFILE` prints for the demo profile; SIGTERM to the gateway and to
// each engine's group leaves no process and no ipc socket file.
func TestE2EGatewayWithPlannedEngines(t *testing.T) {
	t.Parallel()
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	// Every port written out, so the plan `tsd gateway` makes is the one
	// `tsd plan` printed whatever else binds meanwhile.
	ports := spacedFreePorts(t, 4)
	prof := privateProfile(t, "demo.yaml",
		[2]string{"../../gateway/tokenizer/testdata/demo", absPath(t, "../../gateway/tokenizer/testdata/demo")},
		[2]string{"--fake-startup, 4s", "--fake-startup, 200ms"},
		[2]string{"port: 8000", fmt.Sprintf("port: %d", ports[0])},
		[2]string{"kind: prefill\n", fmt.Sprintf("kind: prefill\n    bootstrap_port: %d\n    dist_init_port: %d\n", ports[1], ports[2])},
		[2]string{"kind: decode\n", fmt.Sprintf("kind: decode\n    dist_init_port: %d\n", ports[3])},
		[2]string{"\nrestart:\n", "\nrun_dir: run\nlog_dir: logs\nrestart:\n"},
	)
	dir := filepath.Dir(prof)

	planCmd := exec.Command(tsdBin, "plan", prof)
	planCmd.Dir = dir
	var stderr strings.Builder
	planCmd.Stderr = &stderr
	out, err := planCmd.Output()
	if err != nil {
		t.Fatalf("tsd plan: %v\n%s", err, stderr.String())
	}
	cmds := plannedCommands(t, string(out))
	if len(cmds) != 2 {
		t.Fatalf("want 2 printed commands, got %d:\n%s", len(cmds), out)
	}
	var socks []string
	for _, m := range ipcSockRe.FindAllStringSubmatch(string(out), -1) {
		socks = append(socks, m[1])
	}
	if len(socks) != 4 {
		t.Fatalf("want 4 ipc socket paths in the plan, got %v:\n%s", socks, out)
	}

	gw := runTSD(t, dir, "gateway", prof)
	gw.waitLine(0, "gateway listening")
	var engines []*handEngine
	for i, line := range cmds {
		engines = append(engines, startHandEngine(t, dir, line, i))
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	waitReadiness(t, gw, base, engines)

	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var chat struct {
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &chat) != nil || chat.Object != "chat.completion" || chat.Model != "demo" ||
		len(chat.Choices) != 1 || chat.Choices[0].Message.Role != "assistant" || chat.Choices[0].Message.Content == "" ||
		(chat.Choices[0].FinishReason != "length" && chat.Choices[0].FinishReason != "stop") ||
		chat.Usage.CompletionTokens < 1 || chat.Usage.CompletionTokens > 4 {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}
	generate(t, base)

	for _, s := range socks {
		if _, err := os.Stat(s); err != nil {
			t.Fatalf("bound gateway lacks its socket: %v", err)
		}
	}
	if err := gw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := gw.wait(); err != nil {
		t.Fatalf("tsd gateway: %v\n%s", err, gw.output())
	}
	if !strings.Contains(gw.output(), "gateway stopped") {
		t.Fatalf("no clean stop:\n%s", gw.output())
	}
	for _, s := range socks {
		if _, err := os.Stat(s); !os.IsNotExist(err) {
			t.Errorf("socket file left behind: %s (%v)", s, err)
		}
	}
	for _, e := range engines {
		pgid := e.cmd.Process.Pid
		pids := groupProcs(pgid)
		if len(pids) < 2 {
			t.Fatalf("expected a launcher and its ranks in group %d, found %v", pgid, pids)
		}
		if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitExited(t, pids, 10*time.Second)
		<-e.done
		assertGone(t, pgid)
	}
}
