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

// masked replaces a secret value.
const masked = "***"

// secretName reports whether a variable or flag name looks like it holds a
// secret: it contains TOKEN, KEY, SECRET or PASSWORD (any case).
func secretName(name string) bool {
	u := strings.ToUpper(name)
	for _, w := range []string{"TOKEN", "KEY", "SECRET", "PASSWORD"} {
		if strings.Contains(u, w) {
			return true
		}
	}
	return false
}

// secretFlag reports whether a command-line flag name (without dashes)
// names a secret: its last word is token, key, secret, password or
// passwd ("hf-token", "api-key"; not "fake-token-min", whose value is a
// count).
func secretFlag(name string) bool {
	words := strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return r == '-' || r == '_' || r == '.' })
	if len(words) == 0 {
		return false
	}
	switch words[len(words)-1] {
	case "token", "key", "apikey", "secret", "password", "passwd":
		return true
	}
	return false
}

// maskEnv returns env with secret-looking values masked.
func maskEnv(env map[string]string) map[string]string {
	if env == nil {
		return nil
	}
	out := make(map[string]string, len(env))
	for k, v := range env {
		if secretName(k) && v != "" {
			v = masked
		}
		out[k] = v
	}
	return out
}

// maskArgv masks the values of secret-looking flags: "--hf-token X" and
// "--api-key=X".
func maskArgv(argv []string) []string {
	if argv == nil {
		return nil
	}
	out := append([]string(nil), argv...)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !secretFlag(name) {
			continue
		}
		if hasVal {
			out[i] = a[:strings.IndexByte(a, '=')+1] + masked
		} else if i+1 < len(out) && !strings.HasPrefix(out[i+1], "-") {
			out[i+1] = masked
			i++
		}
	}
	return out
}

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
