package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tsd-project/tsd/internal/msgpack"
)

// Handshake statuses (docs/protocol.md §3.4).
const (
	StatusHello = "HELLO"
	StatusReady = "READY"
)

// HandshakeMsg is HELLO or READY (engine → gateway, handshake socket).
type HandshakeMsg struct {
	Status             string // StatusHello or StatusReady; the only field a gateway acts on
	Local              bool
	Headless           bool
	ParallelConfigHash *string
}

// Hello is the HELLO a TokenSpeed engine sends.
func Hello() HandshakeMsg { return HandshakeMsg{Status: StatusHello, Local: true, Headless: true} }

// Ready is the READY a TokenSpeed engine sends.
func Ready() HandshakeMsg { return HandshakeMsg{Status: StatusReady, Local: true, Headless: true} }

// EncodeHandshake writes the four keys in the engine's declaration order.
func EncodeHandshake(m HandshakeMsg) ([]byte, error) {
	b := make([]byte, 0, 64)
	b = msgpack.AppendMapHeader(b, 4)
	b = msgpack.AppendStr(b, "status")
	b = msgpack.AppendStr(b, m.Status)
	b = msgpack.AppendStr(b, "local")
	b = msgpack.AppendBool(b, m.Local)
	b = msgpack.AppendStr(b, "headless")
	b = msgpack.AppendBool(b, m.Headless)
	b = msgpack.AppendStr(b, "parallel_config_hash")
	b = msgpack.AppendOptStr(b, m.ParallelConfigHash)
	return b, nil
}

// DecodeHandshake reads HELLO/READY by key; unknown keys are ignored and
// only status is required.
func DecodeHandshake(b []byte) (HandshakeMsg, error) {
	var m HandshakeMsg
	r := newReader(b)
	seen := false
	err := r.ReadMap(func(k string) (bool, error) {
		var err error
		switch k {
		case "status":
			seen = true
			m.Status, err = r.ReadStr()
		case "local":
			m.Local, err = r.ReadBool()
		case "headless":
			m.Headless, err = r.ReadBool()
		case "parallel_config_hash":
			m.ParallelConfigHash, err = r.ReadOptStr()
		default:
			return false, nil
		}
		return true, err
	})
	if err == nil {
		err = r.End()
	}
	if err == nil && !seen {
		err = errors.New("missing key status")
	}
	if err != nil {
		return HandshakeMsg{}, msgpack.At("WireReadyMessage", err)
	}
	return m, nil
}

// Addresses is INIT's addresses map (§3.5).
type Addresses struct {
	Inputs                      []string // element 0: the input ROUTER endpoint the engine connects to
	Outputs                     []string // element 0: the output PULL endpoint
	CoordinatorInput            *string
	CoordinatorOutput           *string
	FrontendStatsPublishAddress *string
}

// InitMsg is INIT (gateway → engine, handshake socket).
type InitMsg struct {
	Addresses      Addresses
	ParallelConfig Raw // opaque map; nil is written as the empty map SMG sends
}

// NewInit is the INIT SMG sends: one input and one output endpoint.
func NewInit(input, output string) InitMsg {
	return InitMsg{Addresses: Addresses{Inputs: []string{input}, Outputs: []string{output}}}
}

// Input returns the endpoint the engine must connect its input DEALER to.
func (m InitMsg) Input() (string, error) {
	if len(m.Addresses.Inputs) == 0 || m.Addresses.Inputs[0] == "" {
		return "", errors.New("INIT has no input address")
	}
	return m.Addresses.Inputs[0], nil
}

// Output returns the endpoint the engine must connect its output PUSH to.
func (m InitMsg) Output() (string, error) {
	if len(m.Addresses.Outputs) == 0 || m.Addresses.Outputs[0] == "" {
		return "", errors.New("INIT has no output address")
	}
	return m.Addresses.Outputs[0], nil
}

// EncodeInit writes INIT with every key, in SMG's order.
func EncodeInit(m InitMsg) ([]byte, error) {
	if err := checkRaw("parallel_config", m.ParallelConfig); err != nil {
		return nil, fmt.Errorf("encode INIT: %w", err)
	}
	b := make([]byte, 0, 256)
	b = msgpack.AppendMapHeader(b, 2)
	b = msgpack.AppendStr(b, "addresses")
	b = msgpack.AppendMapHeader(b, 5)
	b = msgpack.AppendStr(b, "inputs")
	b = msgpack.AppendStrs(b, nonNil(m.Addresses.Inputs))
	b = msgpack.AppendStr(b, "outputs")
	b = msgpack.AppendStrs(b, nonNil(m.Addresses.Outputs))
	b = msgpack.AppendStr(b, "coordinator_input")
	b = msgpack.AppendOptStr(b, m.Addresses.CoordinatorInput)
	b = msgpack.AppendStr(b, "coordinator_output")
	b = msgpack.AppendOptStr(b, m.Addresses.CoordinatorOutput)
	b = msgpack.AppendStr(b, "frontend_stats_publish_address")
	b = msgpack.AppendOptStr(b, m.Addresses.FrontendStatsPublishAddress)
	b = msgpack.AppendStr(b, "parallel_config")
	if m.ParallelConfig == nil {
		b = msgpack.AppendMapHeader(b, 0)
	} else {
		b = append(b, m.ParallelConfig...)
	}
	return b, nil
}

func nonNil(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

// DecodeInit reads INIT as the engine does: addresses is required, every
// other key optional, unknown keys ignored. Empty inputs/outputs decode;
// check them with Input/Output (the engine sends READY before it checks).
func DecodeInit(b []byte) (InitMsg, error) {
	var m InitMsg
	r := newReader(b)
	seen := false
	err := r.ReadMap(func(k string) (bool, error) {
		switch k {
		case "addresses":
			seen = true
			return true, r.ReadMap(func(k string) (bool, error) {
				var err error
				a := &m.Addresses
				switch k {
				case "inputs":
					a.Inputs, err = r.ReadOptStrs()
				case "outputs":
					a.Outputs, err = r.ReadOptStrs()
				case "coordinator_input":
					a.CoordinatorInput, err = r.ReadOptStr()
				case "coordinator_output":
					a.CoordinatorOutput, err = r.ReadOptStr()
				case "frontend_stats_publish_address":
					a.FrontendStatsPublishAddress, err = r.ReadOptStr()
				default:
					return false, nil
				}
				return true, err
			})
		case "parallel_config":
			raw, err := r.ReadRaw()
			m.ParallelConfig = raw
			return true, err
		}
		return false, nil
	})
	if err == nil {
		err = r.End()
	}
	if err == nil && !seen {
		err = errors.New("missing key addresses")
	}
	if err != nil {
		return InitMsg{}, msgpack.At("WireHandshakeInitMessage", err)
	}
	return m, nil
}

// DefaultBootstrapPort is the Mooncake bootstrap port when none is configured (§3.7).
const DefaultBootstrapPort = 8998

// Registration is the engine's ready response, sent once on the input
// socket after READY (§3.6). Every key is optional on decode.
type Registration struct {
	MaxModelLen               int
	NumGPUBlocks              int
	PrefixGranularity         *int // TokenSpeed HEAD
	BlockSize                 *int // older engines / vLLM; see Granularity
	DPStatsAddress            *string
	Dtype                     string
	MultimodalEncoderDtype    *string
	VllmVersion               string // "tokenspeed-<version>"
	WorldSize                 int
	DataParallelSize          int // D: how many ranks of this worker to await
	TensorParallelSize        int
	PipelineParallelSize      int
	DecodeContextParallelSize int
	DataParallelRank          int
	MaxNumSeqs                int
	MaxNumBatchedTokens       int
	InstanceID                string
	KVCacheSizeTokens         *int
	KVCacheMaxConcurrency     *float64
	KVEventsConfig            Raw

	// Not sent by TokenSpeed HEAD; a fake engine may (§3.7). Written only when set.
	BootstrapHost      *string
	BootstrapPort      *int
	DisaggregationMode *string
}

// DefaultRegistration holds the defaults a decoder fills in for absent or
// nil keys (sizes of 1, everything else zero).
func DefaultRegistration() Registration {
	return Registration{WorldSize: 1, DataParallelSize: 1, TensorParallelSize: 1,
		PipelineParallelSize: 1, DecodeContextParallelSize: 1}
}

// Granularity is prefix_granularity, else block_size, else 0.
func (g Registration) Granularity() int {
	switch {
	case g.PrefixGranularity != nil:
		return *g.PrefixGranularity
	case g.BlockSize != nil:
		return *g.BlockSize
	}
	return 0
}

// EncodeRegistration writes TokenSpeed HEAD's 19 keys in engine order
// (prefix_granularity and block_size only when set) followed by the
// optional bootstrap keys when set.
func EncodeRegistration(g Registration) ([]byte, error) {
	if err := checkRaw("kv_events_config", g.KVEventsConfig); err != nil {
		return nil, fmt.Errorf("encode registration: %w", err)
	}
	n := 18 // keys always written
	for _, set := range []bool{g.PrefixGranularity != nil, g.BlockSize != nil,
		g.BootstrapHost != nil, g.BootstrapPort != nil, g.DisaggregationMode != nil} {
		if set {
			n++
		}
	}
	b := make([]byte, 0, 512)
	b = msgpack.AppendMapHeader(b, n)
	b = msgpack.AppendStr(b, "max_model_len")
	b = msgpack.AppendInt(b, int64(g.MaxModelLen))
	b = msgpack.AppendStr(b, "num_gpu_blocks")
	b = msgpack.AppendInt(b, int64(g.NumGPUBlocks))
	if g.BlockSize != nil {
		b = msgpack.AppendStr(b, "block_size")
		b = msgpack.AppendInt(b, int64(*g.BlockSize))
	}
	if g.PrefixGranularity != nil {
		b = msgpack.AppendStr(b, "prefix_granularity")
		b = msgpack.AppendInt(b, int64(*g.PrefixGranularity))
	}
	b = msgpack.AppendStr(b, "dp_stats_address")
	b = msgpack.AppendOptStr(b, g.DPStatsAddress)
	b = msgpack.AppendStr(b, "dtype")
	b = msgpack.AppendStr(b, g.Dtype)
	b = msgpack.AppendStr(b, "multimodal_encoder_dtype")
	b = msgpack.AppendOptStr(b, g.MultimodalEncoderDtype)
	b = msgpack.AppendStr(b, "vllm_version")
	b = msgpack.AppendStr(b, g.VllmVersion)
	for _, kv := range []struct {
		k string
		v int
	}{
		{"world_size", g.WorldSize},
		{"data_parallel_size", g.DataParallelSize},
		{"tensor_parallel_size", g.TensorParallelSize},
		{"pipeline_parallel_size", g.PipelineParallelSize},
		{"decode_context_parallel_size", g.DecodeContextParallelSize},
		{"data_parallel_rank", g.DataParallelRank},
		{"max_num_seqs", g.MaxNumSeqs},
		{"max_num_batched_tokens", g.MaxNumBatchedTokens},
	} {
		b = msgpack.AppendStr(b, kv.k)
		b = msgpack.AppendInt(b, int64(kv.v))
	}
	b = msgpack.AppendStr(b, "instance_id")
	b = msgpack.AppendStr(b, g.InstanceID)
	b = msgpack.AppendStr(b, "kv_cache_size_tokens")
	b = msgpack.AppendOptInt(b, g.KVCacheSizeTokens)
	b = msgpack.AppendStr(b, "kv_cache_max_concurrency")
	b = msgpack.AppendOptFloat(b, g.KVCacheMaxConcurrency)
	b = msgpack.AppendStr(b, "kv_events_config")
	b = msgpack.AppendRaw(b, g.KVEventsConfig)
	if g.BootstrapHost != nil {
		b = msgpack.AppendStr(b, "bootstrap_host")
		b = msgpack.AppendStr(b, *g.BootstrapHost)
	}
	if g.BootstrapPort != nil {
		b = msgpack.AppendStr(b, "bootstrap_port")
		b = msgpack.AppendInt(b, int64(*g.BootstrapPort))
	}
	if g.DisaggregationMode != nil {
		b = msgpack.AppendStr(b, "disaggregation_mode")
		b = msgpack.AppendStr(b, *g.DisaggregationMode)
	}
	return b, nil
}

// DecodeRegistration is key-tolerant (§3.6): unknown keys are ignored,
// absent keys and nil numbers take DefaultRegistration's values, nil strings
// become "".
func DecodeRegistration(b []byte) (Registration, error) {
	if len(b) == 0 {
		return Registration{}, errors.New("WireEngineCoreReadyResponse: empty payload")
	}
	g := DefaultRegistration()
	r := newReader(b)
	optInt := func(dst *int) error {
		if r.NextNil() {
			return nil
		}
		v, err := r.ReadIntN()
		if err == nil {
			*dst = v
		}
		return err
	}
	str := func(dst *string) error {
		if r.NextNil() {
			return nil
		}
		s, err := r.ReadStr()
		if err == nil {
			*dst = s
		}
		return err
	}
	ints := map[string]*int{
		"max_model_len":                &g.MaxModelLen,
		"num_gpu_blocks":               &g.NumGPUBlocks,
		"world_size":                   &g.WorldSize,
		"data_parallel_size":           &g.DataParallelSize,
		"tensor_parallel_size":         &g.TensorParallelSize,
		"pipeline_parallel_size":       &g.PipelineParallelSize,
		"decode_context_parallel_size": &g.DecodeContextParallelSize,
		"data_parallel_rank":           &g.DataParallelRank,
		"max_num_seqs":                 &g.MaxNumSeqs,
		"max_num_batched_tokens":       &g.MaxNumBatchedTokens,
	}
	err := r.ReadMap(func(k string) (bool, error) {
		if dst, ok := ints[k]; ok {
			return true, optInt(dst)
		}
		var err error
		switch k {
		case "prefix_granularity":
			g.PrefixGranularity, err = r.ReadOptInt()
		case "block_size":
			g.BlockSize, err = r.ReadOptInt()
		case "dp_stats_address":
			g.DPStatsAddress, err = r.ReadOptStr()
		case "dtype":
			err = str(&g.Dtype)
		case "multimodal_encoder_dtype":
			g.MultimodalEncoderDtype, err = r.ReadOptStr()
		case "vllm_version":
			err = str(&g.VllmVersion)
		case "instance_id":
			err = str(&g.InstanceID)
		case "kv_cache_size_tokens":
			g.KVCacheSizeTokens, err = r.ReadOptInt()
		case "kv_cache_max_concurrency":
			g.KVCacheMaxConcurrency, err = r.ReadOptFloat()
		case "kv_events_config":
			g.KVEventsConfig, err = r.ReadRaw()
		case "bootstrap_host":
			g.BootstrapHost, err = r.ReadOptStr()
		case "bootstrap_port":
			g.BootstrapPort, err = r.ReadOptInt()
		case "disaggregation_mode":
			g.DisaggregationMode, err = r.ReadOptStr()
		default:
			return false, nil
		}
		return true, err
	})
	if err == nil {
		err = r.End()
	}
	if err != nil {
		return Registration{}, msgpack.At("WireEngineCoreReadyResponse", err)
	}
	return g, nil
}

// EncodeIdentity is the routing identity of engine index idx: uint16 LE (§2).
func EncodeIdentity(idx uint16) []byte { return binary.LittleEndian.AppendUint16(nil, idx) }

// DecodeIdentity recovers the engine index from a 2-byte routing identity.
func DecodeIdentity(id []byte) (uint16, error) {
	if len(id) != 2 {
		return 0, fmt.Errorf("decode engine identity: want 2 bytes, got %d", len(id))
	}
	return binary.LittleEndian.Uint16(id), nil
}

// HandshakePort derives the handshake TCP port of an ipc:// worker from its
// path (the URL without "ipc://"): 64-bit FNV-1a, then 20000 + h mod 10000 (§1.2).
func HandshakePort(path string) int {
	h := uint64(0xCBF29CE484222325)
	for i := 0; i < len(path); i++ {
		h ^= uint64(path[i])
		h *= 0x00000100000001B3
	}
	return 20000 + int(h%10000)
}
