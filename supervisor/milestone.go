package supervisor

import "strings"

// StripANSI removes terminal escape sequences (CSI, OSC and two-byte
// escapes). TokenSpeed's colourful logger wraps every line in them
// (docs/protocol.md §10.3), so milestone matching runs on the stripped text.
func StripANSI(s string) string {
	i := strings.IndexByte(s, 0x1b)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	for i < len(s) {
		c := s[i]
		if c != 0x1b {
			b.WriteByte(c)
			i++
			continue
		}
		if i+1 >= len(s) {
			break
		}
		switch s[i+1] {
		case '[': // CSI: parameters and intermediates, then a final byte 0x40–0x7e
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j + 1
		case ']': // OSC: ends with BEL or ESC \
			j := i + 2
			for j < len(s) {
				if s[j] == 0x07 {
					j++
					break
				}
				if s[j] == 0x1b && j+1 < len(s) && s[j+1] == '\\' {
					j += 2
					break
				}
				j++
			}
			i = j
		case '(', ')', '*', '+', '#', '%': // charset designation: one more byte
			i += 3
		default:
			i += 2
		}
	}
	return b.String()
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
