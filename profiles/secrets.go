package profiles

// Secret masking for what tsd shows of a plan (tsd plan, the dashboard's
// describe view): profiles often carry HF_TOKEN and API keys in a role's
// env, and terminals, CI logs and issue reports are where printed plans
// end up. One set of rules for every view.

import "strings"

// Masked replaces a secret value.
const Masked = "***"

// SecretName reports whether a variable or flag name looks like it holds
// a secret: it contains TOKEN, KEY, SECRET or PASSWORD (any case).
func SecretName(name string) bool {
	u := strings.ToUpper(name)
	for _, w := range []string{"TOKEN", "KEY", "SECRET", "PASSWORD"} {
		if strings.Contains(u, w) {
			return true
		}
	}
	return false
}

// SecretFlag reports whether a command-line flag name (without dashes)
// names a secret: its last word is token, key, secret, password or
// passwd ("hf-token", "api-key"; not "fake-token-min", whose value is a
// count).
func SecretFlag(name string) bool {
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

// MaskEnv returns env with secret-looking values masked.
func MaskEnv(env map[string]string) map[string]string {
	if env == nil {
		return nil
	}
	out := make(map[string]string, len(env))
	for k, v := range env {
		if SecretName(k) && v != "" {
			v = Masked
		}
		out[k] = v
	}
	return out
}

// MaskArgv masks the values of secret-looking flags: "--hf-token X" and
// "--api-key=X".
func MaskArgv(argv []string) []string {
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
		if !SecretFlag(name) {
			continue
		}
		if hasVal {
			out[i] = a[:strings.IndexByte(a, '=')+1] + Masked
		} else if i+1 < len(out) && !strings.HasPrefix(out[i+1], "-") {
			out[i+1] = Masked
			i++
		}
	}
	return out
}

// Masked is a copy of r whose env, argv and srun prefix are masked.
func (r *RolePlan) Masked() RolePlan {
	m := *r
	m.Env = MaskEnv(r.Env)
	m.Argv = MaskArgv(r.Argv)
	m.Srun = MaskArgv(r.Srun)
	return m
}
