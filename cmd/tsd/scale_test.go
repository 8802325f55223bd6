package main

import (
	"maps"
	"strings"
	"testing"
)

// tsd scale takes its NAME before or after the ENTRY=N words, as every
// other verb takes NAME after the rest; one NAME at most, and counts of
// 1 or more.
func TestParseScale(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		name  string
		scale map[string]int
		err   string
	}{
		{args: []string{"decode=3"}, scale: map[string]int{"decode": 3}},
		{args: []string{"demo", "decode=3"}, name: "demo", scale: map[string]int{"decode": 3}},
		{args: []string{"decode=3", "demo"}, name: "demo", scale: map[string]int{"decode": 3}},
		{args: []string{"decode=3", "demo", "prefill=2"}, name: "demo", scale: map[string]int{"decode": 3, "prefill": 2}},
		{args: []string{"demo", "other", "decode=3"}, err: `"demo" and "other": one deployment NAME`},
		{args: []string{"demo"}, err: "usage: tsd scale ENTRY=N"},
		{args: []string{"decode=0"}, err: "replica count of 1 or more"},
		{args: []string{"decode=3", "decode=2"}, err: "decode is given twice"},
	} {
		name, scale, err := parseScale(tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || name != tc.name || !maps.Equal(scale, tc.scale) {
			t.Errorf("%v: %q %v %v, want %q %v", tc.args, name, scale, err, tc.name, tc.scale)
		}
	}
}
