package main

// Secret masking for what tsd prints (plan, status): profiles often carry
// HF_TOKEN and API keys in a role's env, and terminals, CI logs and issue
// reports are where printed plans end up.

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The rules are profiles' (profiles/secrets.go), shared with the
// dashboard's describe view.
const masked = profiles.Masked

func secretName(name string) bool                     { return profiles.SecretName(name) }
func secretFlag(name string) bool                     { return profiles.SecretFlag(name) }
func maskEnv(env map[string]string) map[string]string { return profiles.MaskEnv(env) }
func maskArgv(argv []string) []string                 { return profiles.MaskArgv(argv) }

// maskedPlan is a copy of plan whose roles' env and argv are masked.
func maskedPlan(plan *profiles.Plan) *profiles.Plan {
	p := *plan
	p.Roles = append([]profiles.RolePlan(nil), plan.Roles...)
	for i := range p.Roles {
		p.Roles[i].Env = maskEnv(p.Roles[i].Env)
		p.Roles[i].Argv = maskArgv(p.Roles[i].Argv)
	}
	return &p
}

// maskText masks secret-looking NAME=value assignments and the values of
// secret-looking flags ("--api-key X", "--hf-token=X") in free text such
// as an event's "starting: ts serve ...". Words are separated by spaces.
func maskText(s string) string {
	words := strings.Split(s, " ")
	changed := false
	for i := 0; i < len(words); i++ {
		w := strings.Trim(words[i], `"'`)
		name, _, hasVal := strings.Cut(w, "=")
		flag := strings.HasPrefix(name, "-")
		if flag && !secretFlag(strings.TrimLeft(name, "-")) || !flag && !secretName(name) {
			continue
		}
		switch {
		case hasVal:
			k := strings.IndexByte(words[i], '=')
			if k+1 < len(words[i]) {
				words[i] = words[i][:k+1] + masked
				changed = true
			}
		case flag && i+1 < len(words) && words[i+1] != "" && !strings.HasPrefix(words[i+1], "-"):
			words[i+1] = masked
			changed = true
			i++
		}
	}
	if !changed {
		return s
	}
	return strings.Join(words, " ")
}

// maskJSON masks every string in a JSON document with maskText (and the
// values of secret-looking object keys), keeping every other byte of
// meaning: `tsd status --json` stays the snapshot tsd publishes, less the
// secrets.
func maskJSON(b []byte) ([]byte, error) {
	// Through the Snapshot type, not a generic map, so the fields keep the
	// order (and indentation) tsd publishes: scripts grep this output.
	var v snapshot.Snapshot
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("read status JSON: %w", err)
	}
	v = maskedSnapshot(v)
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("write status JSON: %w", err)
	}
	return append(out, '\n'), nil
}

// maskedSnapshot masks the free text of a snapshot that `tsd status`
// prints (reasons, notes, events).
func maskedSnapshot(s snapshot.Snapshot) snapshot.Snapshot {
	s.Roles = append([]snapshot.RoleStatus(nil), s.Roles...)
	for i := range s.Roles {
		s.Roles[i].Reason = maskText(s.Roles[i].Reason)
	}
	s.Events = append([]snapshot.Event(nil), s.Events...)
	for i := range s.Events {
		s.Events[i].Message = maskText(s.Events[i].Message)
	}
	s.Gateway.Note = maskText(s.Gateway.Note)
	return s
}
