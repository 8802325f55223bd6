package supervisor

import (
	"math"
	"testing"
)

// Progress lines as TokenSpeed, SGLang and vLLM print them (tqdm bars,
// ANSI-wrapped or plain), and look-alikes that carry no progress.
func TestProgress(t *testing.T) {
	for _, c := range []struct {
		line  string
		phase string
		frac  float64
		ok    bool
	}{
		{"Loading safetensors checkpoint shards:   0% Completed | 0/11 [00:00<?, ?it/s]", PhaseWeights, 0, true},
		{"Loading safetensors checkpoint shards:  45% Completed | 5/11 [00:03<00:04,  1.52it/s]", PhaseWeights, 5.0 / 11, true},
		{"\rLoading safetensors checkpoint shards: 100% Completed | 11/11 [00:07<00:00,  1.49it/s]", PhaseWeights, 1, true},
		{"Loading pt checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.90it/s]", PhaseWeights, 0.5, true},
		{"[2026-08-22 10:00:03 TP0] Multi-thread loading shards:  25% Completed | 16/64 [00:09<00:27,  1.71it/s]", PhaseWeights, 0.25, true},
		{"Capturing batches 3/6", PhaseGraph, 0.5, true},
		{"Capturing batches (bs=160 avail_mem=20.97 GB):  45%|████▌     | 10/22 [00:02<00:02,  4.93it/s]", PhaseGraph, 10.0 / 22, true},
		{"\x1b[38;20m\rCapturing batches (bs=8 avail_mem=12.40 GB):  50%|##########          | 3/6\x1b[0m", PhaseGraph, 0.5, true},
		{"(VllmWorker rank=0 pid=123) INFO 08-22 10:00:05 [gpu_model_runner.py:2000] Capturing CUDA graph shapes:  40%|████      | 27/67 [00:10<00:15,  2.63it/s]", PhaseGraph, 27.0 / 67, true},
		{"Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67 [00:25<00:00,  2.63it/s]", PhaseGraph, 1, true},
		{"Capturing cudagraph 62%", PhaseGraph, 0.62, true},
		// A bar with only a percentage.
		{"Loading safetensors checkpoint shards:  73% Completed", PhaseWeights, 0.73, true},
		// No progress in these.
		{"[2026-08-22 10:00:01 ATTN TP RANK 0] - INFO - Capturing batches: [1, 2, 4, 8, 16, 32] (cuda_graph_wrapper.py:215)", "", 0, false},
		{"INFO 08-22 10:00:04 [default_loader.py:262] Loading weights took 4.21 seconds", "", 0, false},
		{"[2026-08-22 10:00:00] - INFO - Load weight begin. avail mem=78.60 GB (weight_loader.py:63)", "", 0, false},
		{"Capturing batches 7/6", "", 0, false}, // more done than there are: not a count
		{"decode step 12/40 took 3ms", "", 0, false},
		{"", "", 0, false},
	} {
		phase, frac, ok := progress(c.line)
		if ok != c.ok || phase != c.phase || math.Abs(frac-c.frac) > 1e-9 {
			t.Errorf("progress(%q) = %q, %v, %v; want %q, %v, %v", c.line, phase, frac, ok, c.phase, c.frac, c.ok)
		}
	}
}

func TestProgressText(t *testing.T) {
	for line, want := range map[string]string{
		"Loading safetensors checkpoint shards:  45% Completed | 5/11 [00:03<00:04,  1.52it/s]": "5/11",
		"Capturing cudagraph 62%": "62%",
	} {
		if p, ok := parseProgress(line); !ok || p.Text != want {
			t.Errorf("parseProgress(%q) = %+v, %v; want text %q", line, p, ok, want)
		}
	}
}

// progress reads an engine's own progress from one log line (raw or
// stripped): the step it belongs to and how far it is, 0..1.
func progress(line string) (phase string, frac float64, ok bool) {
	p, ok := parseProgress(line)
	return p.Phase, p.Frac, ok
}
