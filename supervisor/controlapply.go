package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tsd-project/tsd/profiles"
)

// The control socket's apply routes (docs/architecture.md §4.3):
//
//	POST /v1/apply   body: an ApplyRequest as JSON. A refusal is a 409
//	                 whose text lists every problem (file:line: key: why).
//	                 Otherwise newline-delimited JSON: {"plan": ApplyPlan}
//	                 first; with dry_run, {"done": true}; else {"started":
//	                 true} (where ?detach=1 ends the answer), one {"line":
//	                 "..."} per progress line, then {"done": true} or
//	                 {"error": "..."}. The apply goes on if the client leaves.
//	GET  /v1/plan    the plan that runs now, as tsd plan --json prints one

// applyMsg is one line of POST /v1/apply's answer.
type applyMsg struct {
	Plan    *ApplyPlan `json:"plan,omitempty"`
	Started bool       `json:"started,omitempty"`
	Line    string     `json:"line,omitempty"`
	Done    bool       `json:"done,omitempty"`
	Error   string     `json:"error,omitempty"`
}

// maxApplyBody bounds an apply request (a path, scale pairs, a key).
const maxApplyBody = 1 << 20

// serveApply answers POST /v1/apply: the refusal, or the plan, then (not
// detached) the apply's lines as it goes and how it ended.
func (c *controlServer) serveApply(w http.ResponseWriter, r *http.Request) {
	var req ApplyRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxApplyBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		http.Error(w, "decode apply request: "+err.Error(), http.StatusBadRequest)
		return
	}
	j, err := c.apply.begin(req)
	if err != nil {
		status := http.StatusConflict
		if errors.Is(err, ErrNotRunning) {
			status = http.StatusServiceUnavailable
		}
		http.Error(w, err.Error(), status)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	fl, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	send := func(m applyMsg) {
		_ = enc.Encode(m)
		if fl != nil {
			fl.Flush()
		}
	}
	send(applyMsg{Plan: &j.plan})
	if req.DryRun || !j.plan.Diff.Changes() {
		send(applyMsg{Done: true})
		return
	}
	send(applyMsg{Started: true})
	if r.URL.Query().Get("detach") == "1" {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-c.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	err = j.follow(ctx, func(l string) { send(applyMsg{Line: l}) })
	switch {
	case err == nil:
		send(applyMsg{Done: true})
	case ctx.Err() == nil:
		send(applyMsg{Error: err.Error()})
	}
}

// Plan returns the plan the daemon runs now (tsd plan --running).
func (c *ControlClient) Plan(ctx context.Context) (*profiles.Plan, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/plan")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var p profiles.Plan
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return nil, fmt.Errorf("decode the running plan: %w", err)
	}
	return &p, nil
}

// Apply sends req: onPlan hears the plan (the diff) first, progress each
// line as it comes. It returns when the apply is done (nil), failed (its
// error), or at once after the plan with detach (or dry_run).
func (c *ControlClient) Apply(ctx context.Context, req ApplyRequest, detach bool, onPlan func(ApplyPlan), progress func(string)) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode apply request: %w", err)
	}
	path := "/v1/apply"
	if detach {
		path += "?detach=1"
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://tsd"+path, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return fmt.Errorf("reach tsd at %s (is it running?): %w", c.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxApplyBody))
		return &ApplyRefusal{Msg: strings.TrimSpace(string(b))}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxApplyBody)
	started := false
	for sc.Scan() {
		var m applyMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return fmt.Errorf("decode apply progress: %w", err)
		}
		switch {
		case m.Plan != nil:
			if onPlan != nil {
				onPlan(*m.Plan)
			}
		case m.Started:
			started = true
			if detach {
				return nil
			}
		case m.Line != "":
			if progress != nil {
				progress(m.Line)
			}
		case m.Done:
			return nil
		case m.Error != "":
			return errors.New(m.Error)
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("read apply progress: %w", err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if started {
		return errors.New("tsd ended the answer before the apply did (it goes on: tsd status shows it)")
	}
	return errors.New("tsd ended the apply without an answer")
}

// ApplyRefusal is an apply the daemon refused before any step: nothing
// changed. Msg lists every problem, one per line.
type ApplyRefusal struct{ Msg string }

func (e *ApplyRefusal) Error() string { return e.Msg }
