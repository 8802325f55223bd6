package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMilestones recognises docs/protocol.md §10.3's lines in both shapes: the
// colourful logger (ANSI wrapped, level, file:line) and the plain root format.
func TestMilestones(t *testing.T) {
	col := func(prefix, msg string) string {
		return "\x1b[38;20m[2026-08-22 10:00:00,123" + prefix + "] - INFO - " + msg + " (engine.py:120)\x1b[0m"
	}
	plain := func(prefix, msg string) string { return "[2026-08-22 10:00:00" + prefix + "] " + msg }
	rows := []struct {
		line  string
		phase string
		order int
	}{
		{col("", "Inferred world_size (2) from tp*dp"), PhaseArgs, 1},
		{col("", "Parallelism configuration:"), PhaseArgs, 1},
		{col("", "headless server_args=ServerArgs(model_path='/m', tp_size=2)"), PhaseSpawning, 2},
		{col(" ATTN TP RANK 0", "Init torch distributed begin. Avail mem=79.10 GB"), PhaseDistributed, 3},
		{col(" ATTN TP RANK 1", "Load weight begin. avail mem=78.00 GB"), PhaseWeights, 5},
		{col(" ATTN TP RANK 0", "Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=62.1 GB"), PhaseWeightsDone, 6},
		{col(" ATTN TP RANK 0", "KV Cache is allocated. K size: 20.00 GB, V size: 20.00 GB"), PhaseKVCache, 7},
		{col(" ATTN TP RANK 0", "Capturing batches: [1, 2, 4, 8]"), PhaseGraph, 8},
		{"Capturing batches (bs=8 avail_mem=20.1 GB): 100%|██████████| 4/4", PhaseGraph, 8},
		{col(" ATTN TP RANK 0", "prefill breakable graph: captured buckets [128, 256]"), PhaseGraph, 8},
		{col(" ATTN TP RANK 0", "Scheduler config: prefix_granularity=16 num_device_pages=1000 max_batch_size=64"), PhaseScheduler, 10},
		{plain(" ATTN TP RANK 0", "msgpack handshake: connected to tcp://127.0.0.1:24567"), PhaseDialing, 11},
		{plain(" ATTN TP RANK 0", "msgpack handshake: waiting for SMG INIT (30s elapsed)"), PhaseWaitInit + " (30s elapsed)", 12},
		{plain("None", "msgpack handshake: waiting for SMG INIT (60s elapsed)"), PhaseWaitInit + " (60s elapsed)", 12},
		{plain(" ATTN TP RANK 0", "msgpack handshake: INIT input=ipc:///r/decode.in output=ipc:///r/decode.out"), PhaseHandshake, 13},
		{plain(" ATTN TP RANK 0", "msgpack handshake: complete (engine_index=0)"), PhaseHandshake, 13},
		{col("", "EPD encode embedding cache: L1(VRAM)=512 MiB"), PhaseEmbedCache, 10},
		{col("", "headless scheduler(s) ready; SMG handshake endpoint=tcp://127.0.0.1:24567"), PhaseReady, 15},
		{plain("", "headless scheduler(s) ready; SMG handshake endpoint=tcp://127.0.0.1:24567"), PhaseReady, 15},
	}
	for _, r := range rows {
		m, ok := MatchMilestone(r.line)
		if !ok || m.Phase != r.phase || m.Order != r.order {
			t.Errorf("%q: got %+v %v, want %q/%d", r.line, m, ok, r.phase, r.order)
		}
	}
	for _, no := range []string{
		"",
		col(" ATTN TP RANK 0", "Req: abc Finish! e2e=1.2"),
		plain("", "Decode batch. #running-req: 3"),
		"\x1b[31m",
	} {
		if m, ok := MatchMilestone(no); ok {
			t.Errorf("%q matched %+v", no, m)
		}
	}
}

func TestStripANSI(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                                     "plain",
		"\x1b[38;20mgrey\x1b[0m":                    "grey",
		"\x1b[1;31mbold red\x1b[0m tail":            "bold red tail",
		"a\x1b]0;title\x07b":                        "ab",
		"a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\": "alink",
		"cut\x1b":                                   "cut",
		"cut\x1b[12":                                "cut",
		"x\x1b(By":                                  "xy",
		"\xec\x1b[1mlead\x1b[0m":                    "lead",
		"bad \xff\xfe utf8":                         "bad \xff\xfe utf8",
		"\x1b[1m\xffb\x1b[0m":                       "b",
	} {
		if got := StripANSI(in); got != want {
			t.Errorf("StripANSI(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLineSplitter: \n, \r\n and a lone \r end lines, even across reads;
// lines over the limit are split, not dropped.
func TestLineSplitter(t *testing.T) {
	split := func(max int, chunks ...string) []string {
		s := lineSplitter{max: max}
		var out []string
		emit := func(l string) { out = append(out, l) }
		for _, c := range chunks {
			s.feed([]byte(c), emit)
		}
		s.flush(emit)
		return out
	}
	rows := []struct {
		max    int
		chunks []string
		want   []string
	}{
		{100, []string{"a\nb\n"}, []string{"a", "b"}},
		{100, []string{"a\r\nb\r\n"}, []string{"a", "b"}},
		{100, []string{"a\r", "\nb\n"}, []string{"a", "b"}},
		{100, []string{"10%\r20%\r30%\n"}, []string{"10%", "20%", "30%"}},
		{100, []string{"par", "tial", " line\nnext"}, []string{"partial line", "next"}},
		{100, []string{"\n\n"}, []string{"", ""}},
		{4, []string{"abcdefghij\n"}, []string{"abcd", "efgh", "ij"}},
		{4, []string{"ab", "cdefg", "hij\n"}, []string{"abcd", "efgh", "ij"}},
		{4, []string{"abcd\n"}, []string{"abcd"}},
	}
	for _, r := range rows {
		got := split(r.max, r.chunks...)
		if fmt.Sprint(got) != fmt.Sprint(r.want) {
			t.Errorf("split(%d, %q) = %q, want %q", r.max, r.chunks, got, r.want)
		}
	}
}

// TestRingBounds: the ring keeps the newest lines within both its line and
// byte limits, and since() reports what a late reader missed.
func TestRingBounds(t *testing.T) {
	r := newLogRing("decode", 5, 1000)
	for i := 1; i <= 12; i++ {
		r.append([]LogLine{{Text: fmt.Sprintf("line %d", i)}})
	}
	all := r.all()
	if len(all) != 5 || all[0].Text != "line 8" || all[4].Text != "line 12" || all[4].Seq != 12 || all[0].Role != "decode" {
		t.Fatalf("ring = %+v", all)
	}
	got, next, dropped := r.since(3, 2)
	if len(got) != 2 || got[0].Seq != 8 || next != 10 || dropped != 5 {
		t.Fatalf("since(3,2) = %v next=%d dropped=%d", got, next, dropped)
	}
	if got, next, _ := r.since(13, 0); len(got) != 0 || next != 13 {
		t.Fatalf("since(13) = %v %d", got, next)
	}

	// Byte bound: 10-byte lines, 35 bytes → 3 lines kept.
	b := newLogRing("x", 100, 35)
	for i := 0; i < 20; i++ {
		b.append([]LogLine{{Text: fmt.Sprintf("%010d", i)}})
	}
	n, bytes := b.sizes()
	if n != 3 || bytes != 30 {
		t.Fatalf("byte-bounded ring holds %d lines / %d bytes", n, bytes)
	}
	// Growing again after byte eviction keeps order.
	for i := 20; i < 23; i++ {
		b.append([]LogLine{{Text: "s"}})
	}
	l := b.all()
	for i := 1; i < len(l); i++ {
		if l[i].Seq != l[i-1].Seq+1 {
			t.Fatalf("out of order: %+v", l)
		}
	}
}

func TestRotatingFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "decode.log")
	w, err := openRotating(path, 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"aaaaaaaa\n", "bbbbbbbb\n", "cccccccc\n", "dddddddd\n"} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
	if read(path) != "dddddddd\n" || read(path+".1") != "cccccccc\n" || read(path+".2") != "bbbbbbbb\n" {
		t.Fatalf("rotation: %q %q %q", read(path), read(path+".1"), read(path+".2"))
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Fatalf("kept more than 2 old files")
	}
}

// TestCaptureStream: raw bytes reach the file unchanged, lines reach the
// ring and the hook.
func TestCaptureStream(t *testing.T) {
	ring := newLogRing("r", 100, 1<<20)
	var file bytes.Buffer
	var hooked []string
	in := "\x1b[38;20mone\x1b[0m\r\ntwo\nthree"
	if err := captureStream(strings.NewReader(in), ring, &file, func(s string) { hooked = append(hooked, s) }); err != nil {
		t.Fatal(err)
	}
	if file.String() != in {
		t.Fatalf("file = %q", file.String())
	}
	var texts []string
	for _, l := range ring.all() {
		texts = append(texts, l.Text)
	}
	want := []string{"\x1b[38;20mone\x1b[0m", "two", "three"}
	if fmt.Sprint(texts) != fmt.Sprint(want) || fmt.Sprint(hooked) != fmt.Sprint(want) {
		t.Fatalf("ring %q hook %q", texts, hooked)
	}
}

// sizes reports the ring's current line count and text bytes.
func (r *logRing) sizes() (lines, bytes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, r.bytes
}
