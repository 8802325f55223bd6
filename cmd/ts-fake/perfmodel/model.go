package perfmodel

import (
	"fmt"
	"math"
	"time"
)

// Model is a preset on one engine's tensor-parallel width: the cost of
// one scheduler step of one attention-DP rank (docs/perf-model.md §2).
type Model struct {
	Preset Preset
	TP     int // GPUs one DP rank's step runs on (≥ 1)
}

// For is the preset on a TP-wide rank.
func (p Preset) For(tp int) Model { return Model{Preset: p, TP: max(tp, 1)} }

// Chunk is one prompt's share of a step's prefill: New tokens computed
// after Past tokens already in its KV (a cached prefix, earlier chunks).
type Chunk struct{ Past, New int }

// Batch is what one step computes: one token for each decode sequence
// (its context: the KV tokens it attends over) and the prefill chunks.
type Batch struct {
	Decode  []int
	Prefill []Chunk
}

// MatmulParams are the parameters every token is multiplied through: all
// but the input embedding table, which is only looked up.
func (m Model) MatmulParams() float64 {
	return m.Preset.Model.Params - m.Preset.Model.EmbeddingParams
}

// KVBytesPerToken is one token's K and V over every layer:
// 2 × layers × kv_heads × head_dim × bytes per element.
func (m Model) KVBytesPerToken() float64 {
	s := m.Preset.Model
	return 2 * float64(s.Layers) * float64(s.KVHeads) * float64(s.HeadDim) * s.KVBytes
}

// attnWidth is the query width every attention score is taken over
// (heads × head_dim).
func (m Model) attnWidth() float64 {
	s := m.Preset.Model
	return float64(s.AttentionHeads) * float64(s.HeadDim)
}

// FLOPs of a batch: 2 per matmul parameter per token (Kaplan et al.) plus
// attention's 4 × layers × width per token per context token it attends
// over (QKᵀ and AV, PaLM's appendix B). A chunk's i-th new token attends
// over Past + i + 1 tokens, so its n tokens over n × (Past + (n+1)/2).
func (m Model) FLOPs(b Batch) float64 {
	perToken, attn := 2*m.MatmulParams(), 4*float64(m.Preset.Model.Layers)*m.attnWidth()
	var f float64
	for _, c := range b.Decode {
		f += perToken + attn*float64(c)
	}
	for _, c := range b.Prefill {
		n := float64(c.New)
		f += perToken*n + attn*n*(float64(c.Past)+(n+1)/2)
	}
	return f
}

// Bytes a batch moves through HBM: the weights once per step, each decode
// sequence's KV, and each chunk's cached prefix read plus its new KV
// written.
func (m Model) Bytes(b Batch) float64 {
	var tokens float64
	for _, c := range b.Decode {
		tokens += float64(c)
	}
	for _, c := range b.Prefill {
		tokens += float64(c.Past + c.New)
	}
	return m.MatmulParams()*m.Preset.Model.WeightBytes + tokens*m.KVBytesPerToken()
}

// tpEfficiency is 1 on one GPU, the preset's measured fraction beyond.
func (m Model) tpEfficiency() float64 {
	if m.TP <= 1 {
		return 1
	}
	return m.Preset.Efficiency.TensorParallel
}

// StepTime is one step of a TP-wide rank (docs/perf-model.md §2):
//
//	compute = FLOPs / (TP × peak_flops × mfu)
//	memory  = Bytes / (TP × memory_bandwidth × mbu)
//	step    = max(compute, memory) / tp_efficiency + decode sequences × per_sequence_us
//
// A step is as slow as the resource it exhausts (the roofline); a decode
// step is memory-bound, a step with a long prefill chunk compute-bound,
// and a step carrying both pays for the chunk: the interference that
// disaggregation removes. An empty batch costs nothing.
func (m Model) StepTime(b Batch) time.Duration {
	if len(b.Decode) == 0 && len(b.Prefill) == 0 {
		return 0
	}
	g, e := m.Preset.GPU, m.Preset.Efficiency
	tp := float64(m.TP)
	compute := m.FLOPs(b) / (tp * g.PeakFLOPs * e.MFU)
	memory := m.Bytes(b) / (tp * g.MemoryBandwidth * e.MBU)
	s := math.Max(compute, memory)/m.tpEfficiency() + float64(len(b.Decode))*e.PerSequenceUS*1e-6
	return seconds(s)
}

// PrefillTime is a step computing one prompt's uncached tokens after its
// cached ones, alone.
func (m Model) PrefillTime(uncached, cached int) time.Duration {
	return m.StepTime(Batch{Prefill: []Chunk{{Past: cached, New: uncached}}})
}

// TransferTime is the prefill → decode KV transfer of a prompt: its KV
// bytes over the backend's bandwidth, each of the TP ranks moving its
// shard over its own link at once.
func (m Model) TransferTime(tokens int) time.Duration {
	return seconds(float64(tokens) * m.KVBytesPerToken() / float64(m.TP) / m.Preset.Transfer.Bandwidth)
}

// KVCapacity is the KV pool of one rank in tokens when the engine may use
// util of each GPU's memory for weights and KV:
// (memory_bytes × util − weights / TP) / (KV bytes per token / TP).
func (m Model) KVCapacity(util float64) (int, error) {
	tp := float64(m.TP)
	weights := m.Preset.Model.Params * m.Preset.Model.WeightBytes / tp
	free := m.Preset.GPU.MemoryBytes*util - weights
	if free <= 0 {
		return 0, fmt.Errorf("the weights (%.1f GB per GPU) do not fit %.0f%% of %.0f GB", weights/1e9, util*100, m.Preset.GPU.MemoryBytes/1e9)
	}
	return int(free / (m.KVBytesPerToken() / tp)), nil
}

// Describe names the preset, the width, and that the figures are
// simulated.
func (m Model) Describe() string {
	if m.TP > 1 {
		return fmt.Sprintf("%s, TP %d at %.2f efficiency", m.Preset.Describe(), m.TP, m.tpEfficiency())
	}
	return m.Preset.Describe()
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }
