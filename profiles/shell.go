package profiles

import "strings"

// ShellQuote quotes s for a POSIX shell: words made only of safe
// characters stay bare, anything else is single-quoted.
func ShellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("_@%+=:,./-", c) >= 0) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// CommandLine is the role's command as one line a user can paste into a
// shell on the machine that runs it: the env assignments, then the argv
// (behind its srun prefix under --launcher slurm).
func (r *RolePlan) CommandLine() string {
	var b strings.Builder
	for _, k := range EnvOrder(r.Env) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(ShellQuote(r.Env[k]))
		b.WriteByte(' ')
	}
	for i, a := range r.Command() {
		if i > 0 {
			b.WriteByte(' ')
		}
		q := ShellQuote(a)
		if i == 0 && q == a && strings.Contains(a, "=") {
			// A bare NAME=value first word would read as another assignment.
			q = "'" + a + "'"
		}
		b.WriteString(q)
	}
	return b.String()
}
