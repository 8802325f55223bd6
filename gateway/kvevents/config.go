package kvevents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Config is the JSON of `--kv-events-config` (TokenSpeed's
// KVEventsConfig, docs/protocol.md §16.1), with upstream's defaults.
type Config struct {
	Publisher           string  `json:"publisher,omitempty"` // "zmq" or "null"; "" means zmq when enabled
	Endpoint            string  `json:"endpoint"`
	ReplayEndpoint      *string `json:"replay_endpoint"`
	BufferSteps         int     `json:"buffer_steps"`
	HWM                 int     `json:"hwm"`
	MaxQueueSize        int     `json:"max_queue_size"`
	Topic               string  `json:"topic"`
	EnableKVCacheEvents bool    `json:"enable_kv_cache_events"`
}

// Upstream's defaults (KVEventsConfig, ZmqEventPublisher).
const (
	DefaultEndpoint     = "tcp://*:5557"
	DefaultBufferSteps  = 10_000
	DefaultHWM          = 100_000
	DefaultMaxQueueSize = 100_000
)

// ParseConfig reads the flag's JSON as pydantic's model_validate_json
// does for these fields: unknown keys are refused (so a typo is an error,
// not a silently disabled publisher), missing ones take the defaults.
func ParseConfig(s string) (Config, error) {
	c := Config{Endpoint: DefaultEndpoint, BufferSteps: DefaultBufferSteps, HWM: DefaultHWM, MaxQueueSize: DefaultMaxQueueSize}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("--kv-events-config: %w", err)
	}
	switch c.Publisher {
	case "", "zmq", "null":
	default:
		return Config{}, fmt.Errorf("--kv-events-config: unknown event publisher %q", c.Publisher)
	}
	if c.BufferSteps < 1 || c.HWM < 0 || c.MaxQueueSize < 1 {
		return Config{}, fmt.Errorf("--kv-events-config: buffer_steps and max_queue_size must be positive, hwm not negative")
	}
	return c, nil
}

// Enabled is whether the engine publishes at all: events enabled and a
// publisher other than "null".
func (c Config) Enabled() bool { return c.EnableKVCacheEvents && c.Publisher != "null" }

// OffsetEndpoint is upstream's offset_endpoint_port: DP rank r of an
// engine publishes on the configured port + r ("inproc://x" becomes
// "inproc://x_dp<r>"); rank 0 and "" are unchanged. Any other transport
// is an error for r > 0, as upstream raises.
func OffsetEndpoint(endpoint string, rank int) (string, error) {
	if endpoint == "" || rank == 0 {
		return endpoint, nil
	}
	if strings.Contains(endpoint, "inproc") {
		return endpoint + "_dp" + strconv.Itoa(rank), nil
	}
	if !strings.Contains(endpoint, "tcp") {
		return "", fmt.Errorf("invalid endpoint %q: must contain 'inproc' or 'tcp'", endpoint)
	}
	i := strings.LastIndexByte(endpoint, ':')
	if i < 0 {
		return endpoint, nil
	}
	port, err := strconv.Atoi(endpoint[i+1:])
	if err != nil {
		return "", fmt.Errorf("invalid endpoint %q: %w", endpoint, err)
	}
	return endpoint[:i+1] + strconv.Itoa(port+rank), nil
}

// Binds is upstream's rule for whether the PUB binds or connects: it binds
// a wildcard ("*", "::"), ipc:// and inproc:// endpoints, and connects to
// anything else.
func Binds(endpoint string) bool {
	return strings.Contains(endpoint, "*") || strings.Contains(endpoint, "::") ||
		strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://")
}
