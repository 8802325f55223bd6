package bootstrap

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Client talks to one rendezvous (host:port).
type Client struct {
	base string
	hc   *http.Client
}

// NewClient returns a client for the rendezvous at hostport. timeout bounds
// each HTTP exchange (upstream registers with 5 s); 0 means 5 s.
func NewClient(hostport string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	// No proxy: the rendezvous is local or on the cluster network, and a
	// proxy from the environment would break it (docs/protocol.md §10.10, NO_PROXY=*).
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 8}
	return &Client{base: "http://" + hostport, hc: &http.Client{Timeout: timeout, Transport: tr}}
}

// Register PUTs one prefill rank's registration.
func (c *Client) Register(ctx context.Context, reg Registration) error {
	body, err := json.Marshal(reg)
	if err != nil {
		return fmt.Errorf("encode registration: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+"/route", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build registration request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("register with bootstrap server %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("register with bootstrap server %s: %s: %s", c.base, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// ParallelInfo fetches the prefill's world/DP sizes and cache layout.
// It returns an error wrapping ErrNotRegistered while no rank registered.
func (c *Client) ParallelInfo(ctx context.Context) (ParallelInfo, error) {
	var p ParallelInfo
	err := c.get(ctx, "/route?engine_rank=-1&target_dp_group=-1", &p)
	if err != nil {
		return p, fmt.Errorf("fetch prefill parallel info: %w", err)
	}
	return p, nil
}

// RankAddr fetches where prefill TP rank tpRank of DP group dpGroup serves
// its transfers. It returns an error wrapping ErrNotRegistered while that
// rank has not registered.
func (c *Client) RankAddr(ctx context.Context, tpRank, dpGroup int) (RankAddr, error) {
	var a RankAddr
	path := "/route?engine_rank=" + strconv.Itoa(tpRank) + "&target_dp_group=" + strconv.Itoa(dpGroup)
	if err := c.get(ctx, path, &a); err != nil {
		return a, fmt.Errorf("fetch prefill rank %d of dp group %d: %w", tpRank, dpGroup, err)
	}
	return a, nil
}

// Health checks /health; it wraps ErrNotAlive on a non-200 answer.
func (c *Client) Health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/health", nil)
	if err != nil {
		return fmt.Errorf("build health request: %w", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("bootstrap health %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bootstrap health %s: %s: %w", c.base, resp.Status, ErrNotAlive)
	}
	return nil
}

func (c *Client) get(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("query bootstrap server %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		_, _ = io.Copy(io.Discard, resp.Body)
		return ErrNotRegistered
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("query bootstrap server %s: %s: %s", c.base, resp.Status, bytes.TrimSpace(msg))
	}
	// Closures, not method values: a method value would copy *v now,
	// before the decode fills it.
	var check func() error
	switch v := into.(type) {
	case *ParallelInfo:
		check = func() error { return v.check() }
	case *RankAddr:
		check = func() error { return v.check() }
	}
	if err := decodeAnswer(resp.Body, maxSmallAnswer, into, check); err != nil {
		return fmt.Errorf("decode bootstrap answer from %s: %w", c.base, err)
	}
	return nil
}
