package supervisor

import (
	"strconv"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/tsd-project/tsd/snapshot"
)

// StripANSI is s without its terminal escape sequences, by x/ansi's Strip
// (the one stripper; the dashboard's log view uses it too). TokenSpeed's
// colourful logger wraps every line in them (docs/protocol.md §10.3), so
// milestone matching runs on the stripped text. A line without ESC,
// nearly every one, comes back as it is: uncopied, and with every byte
// kept. In a line with escapes, bytes that are not UTF-8 go first: Strip
// drops them anyway, except that a stray lead byte swallows the ESC
// after it, which would then stay.
func StripANSI(s string) string {
	if strings.IndexByte(s, 0x1b) < 0 {
		return s
	}
	return ansi.Strip(strings.ToValidUTF8(s, ""))
}

// Milestone is one recognised startup step of an engine (docs/protocol.md §10.3).
type Milestone struct {
	Order int    // later steps have larger orders; the phase only moves forward within a run
	Phase string // shown as RoleStatus.Phase
}

// Startup phases, in launch order.
const (
	PhaseArgs        = "parsing args"
	PhaseSpawning    = "spawning ranks"
	PhaseDistributed = "init distributed"
	PhaseWeights     = "loading weights"
	PhaseWeightsDone = "weights loaded"
	PhaseKVCache     = "KV cache"
	PhaseGraph       = "graph capture"
	PhaseScheduler   = "scheduler ready"
	PhaseEmbedCache  = "embedding cache"
	PhaseDialing     = "dialing gateway"
	PhaseWaitInit    = "waiting for INIT"
	PhaseHandshake   = "handshake complete"
	PhaseReady       = "ready"
)

// milestoneRules match stable prefixes of TokenSpeed's messages anywhere in
// the stripped line, so both the colourful and the plain root format (and a
// "None" or "ATTN TP RANK n" prefix) are accepted.
var milestoneRules = []struct {
	substr string
	m      Milestone
}{
	{"Inferred world_size", Milestone{1, PhaseArgs}},
	{"Specified world_size", Milestone{1, PhaseArgs}},
	{"Parallelism configuration:", Milestone{1, PhaseArgs}},
	{"headless server_args=", Milestone{2, PhaseSpawning}},
	{"Init torch distributed begin", Milestone{3, PhaseDistributed}},
	{"Init comm buff end", Milestone{3, PhaseDistributed}},
	{"Load weight begin", Milestone{5, PhaseWeights}},
	{"Load weight end", Milestone{6, PhaseWeightsDone}},
	{"KV Cache is allocated", Milestone{7, PhaseKVCache}},
	{"Capturing batches", Milestone{8, PhaseGraph}},
	{"prefill breakable graph", Milestone{8, PhaseGraph}},
	{"GPU memory summary", Milestone{9, PhaseKVCache}},
	{"Scheduler config:", Milestone{10, PhaseScheduler}},
	{"EPD encode embedding cache", Milestone{10, PhaseEmbedCache}},
	{"msgpack handshake: connected to", Milestone{11, PhaseDialing}},
	{"msgpack handshake: waiting for SMG INIT", Milestone{12, PhaseWaitInit}},
	{"msgpack handshake: INIT", Milestone{13, PhaseHandshake}},
	{"msgpack handshake: complete", Milestone{13, PhaseHandshake}},
	{"headless scheduler(s) ready", Milestone{15, PhaseReady}},
}

// MatchMilestone recognises a startup milestone in one log line (raw or
// stripped). The waiting-for-INIT phase keeps the elapsed time the engine
// printed, e.g. "waiting for INIT (30s elapsed)".
func MatchMilestone(line string) (Milestone, bool) {
	// Every message we look for contains one of these bytes sequences; the
	// cheap pre-check keeps the per-line cost low under heavy output.
	if !strings.Contains(line, " ") {
		return Milestone{}, false
	}
	plain := StripANSI(line)
	for _, r := range milestoneRules {
		i := strings.Index(plain, r.substr)
		if i < 0 {
			continue
		}
		m := r.m
		if m.Phase == PhaseWaitInit {
			rest := plain[i+len(r.substr):]
			if a := strings.IndexByte(rest, '('); a >= 0 {
				if b := strings.IndexByte(rest[a:], ')'); b > 0 {
					m.Phase += " " + rest[a:a+b+1]
				}
			}
		}
		return m, true
	}
	return Milestone{}, false
}

// looksLikeError picks lines worth quoting in a crash reason.
func looksLikeError(plain string) bool {
	return strings.Contains(plain, " - ERROR - ") || strings.Contains(plain, " - CRITICAL - ") ||
		strings.Contains(plain, "Error:") || strings.Contains(plain, "Traceback (most recent call last)") ||
		strings.Contains(plain, "hit an exception") || strings.Contains(plain, "is dead") ||
		strings.Contains(plain, "exited with code")
}

// progressRules name the startup steps whose engines print their own
// progress: tqdm bars over weight shards and CUDA-graph batches (SGLang and
// TokenSpeed "Loading safetensors checkpoint shards:  45% Completed | 5/11",
// "Capturing batches (bs=8 avail_mem=12.40 GB):  50%|…| 3/6"; vLLM
// "Capturing CUDA graph shapes:  40%|…| 27/67"). Matched anywhere in the
// stripped line, like milestones.
var progressRules = []struct{ substr, phase string }{
	{"checkpoint shards", PhaseWeights},
	{"Multi-thread loading shards", PhaseWeights},
	{"Loading weights", PhaseWeights},
	{"Capturing batches", PhaseGraph},
	{"Capturing CUDA graph", PhaseGraph},
	{"Capturing cudagraph", PhaseGraph},
}

// parseProgress is progress with the engine's own count kept for display
// ("5/11", or "45%" when the line has no count).
func parseProgress(line string) (snapshot.Progress, bool) {
	if !strings.Contains(line, "ing ") {
		return snapshot.Progress{}, false // every rule's words end so; spares the strip
	}
	plain := StripANSI(line)
	for _, r := range progressRules {
		i := strings.Index(plain, r.substr)
		if i < 0 {
			continue
		}
		rest := plain[i+len(r.substr):]
		if n, m, text, ok := countOf(rest); ok {
			return snapshot.Progress{Phase: r.phase, Frac: float64(n) / float64(m), Text: text}, true
		}
		if pct, text, ok := percentOf(rest); ok {
			return snapshot.Progress{Phase: r.phase, Frac: pct / 100, Text: text}, true
		}
		return snapshot.Progress{}, false
	}
	return snapshot.Progress{}, false
}

// countOf finds the first "N/M" with 0 ≤ N ≤ M, M > 0, standing alone (not
// part of "it/s" or a path).
func countOf(s string) (n, m int, text string, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] != '/' || i == 0 || !isDigit(s[i-1]) || i+1 >= len(s) || !isDigit(s[i+1]) {
			continue
		}
		a := i
		for a > 0 && isDigit(s[a-1]) {
			a--
		}
		b := i + 1
		for b < len(s) && isDigit(s[b]) {
			b++
		}
		if a > 0 && (s[a-1] == '.' || s[a-1] == '/' || isLetter(s[a-1])) || b < len(s) && (s[b] == '.' || s[b] == '/' || isLetter(s[b])) {
			continue
		}
		n, err1 := strconv.Atoi(s[a:i])
		m, err2 := strconv.Atoi(s[i+1 : b])
		if err1 != nil || err2 != nil || m <= 0 || n > m {
			continue
		}
		return n, m, s[a:b], true
	}
	return 0, 0, "", false
}

// percentOf finds the first "45%" or "45.5%" (at most 100).
func percentOf(s string) (pct float64, text string, ok bool) {
	for i := 1; i < len(s); i++ {
		if s[i] != '%' || !isDigit(s[i-1]) {
			continue
		}
		a := i
		for a > 0 && (isDigit(s[a-1]) || s[a-1] == '.') {
			a--
		}
		v, err := strconv.ParseFloat(s[a:i], 64)
		if err != nil || v < 0 || v > 100 {
			continue
		}
		return v, s[a : i+1], true
	}
	return 0, "", false
}

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
