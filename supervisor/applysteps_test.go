package supervisor

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/profiles"
)

const stepsBase = `name: demo
model: /models/m
engine:
  command: [ts-fake, serve]
gateway:
  port: 8000
roles:
  - name: prefill
    kind: prefill
    gpus: [0]
  - name: decode
    kind: decode
    gpus: [1]
`

func planOf(t *testing.T, src string, running *profiles.Plan) *profiles.Plan {
	t.Helper()
	p, errs := profiles.Parse("/srv/p/demo.yaml", []byte(src))
	if len(errs) > 0 {
		t.Fatalf("parse: %v", errs)
	}
	plan, errs := profiles.MakePlan(p, profiles.HostFacts{RunDir: "/run/t/run", LogDir: "/run/t/logs", UID: 1, Running: running})
	if len(errs) > 0 {
		t.Fatalf("plan: %v", errs)
	}
	return plan
}

func swap(t *testing.T, src, old, new string) string {
	t.Helper()
	if !strings.Contains(src, old) {
		t.Fatalf("%q not in the profile", old)
	}
	return strings.Replace(src, old, new, 1)
}

const decode1 = "  - name: decode\n    kind: decode\n    gpus: [1]\n"

// Pins: the order of an apply's steps, batch by batch ("a+b" run
// together), for each kind of change.
func TestApplySteps(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		from, to func(t *testing.T) string
		want     []string
		err      string
	}{
		{"nothing", func(*testing.T) string { return stepsBase }, func(*testing.T) string { return stepsBase }, nil, ""},
		{"add a replica: rename, then start", func(*testing.T) string { return stepsBase },
			func(t *testing.T) string {
				return swap(t, stepsBase, decode1, "  - name: decode\n    kind: decode\n    replicas: 2\n    gpus: [[1], [2]]\n")
			},
			[]string{"rename decode → decode-0", "start decode-1"}, ""},
		{"add two replicas: they start together", func(*testing.T) string { return stepsBase },
			func(t *testing.T) string {
				return swap(t, stepsBase, decode1, "  - name: decode\n    kind: decode\n    replicas: 3\n    gpus: [[1], [2], [3]]\n")
			},
			[]string{"rename decode → decode-0", "start decode-1+start decode-2"}, ""},
		{"remove a replica: stop first, then rename", func(t *testing.T) string {
			return swap(t, stepsBase, decode1, "  - name: decode\n    kind: decode\n    replicas: 2\n    gpus: [[1], [2]]\n")
		}, func(*testing.T) string { return stepsBase },
			[]string{"stop decode-1", "rename decode-0 → decode"}, ""},
		{"args of two replicas: one at a time", func(t *testing.T) string {
			return swap(t, stepsBase, decode1, "  - name: decode\n    kind: decode\n    replicas: 2\n    gpus: [[1], [2]]\n")
		}, func(t *testing.T) string {
			return swap(t, stepsBase, decode1, "  - name: decode\n    kind: decode\n    replicas: 2\n    gpus: [[1], [2]]\n    args: [--x]\n")
		}, []string{"restart decode-0", "restart decode-1"}, ""},
		{"a policy: the gateway alone", func(*testing.T) string { return stepsBase },
			func(t *testing.T) string {
				return swap(t, stepsBase, "  port: 8000\n", "  port: 8000\n  policy: {prefill: random}\n")
			},
			[]string{"gateway"}, ""},
		{"restart policy: updates, no restart", func(*testing.T) string { return stepsBase },
			func(*testing.T) string { return stepsBase + "restart:\n  budget: 2 in 1m\n" },
			[]string{"update prefill+update decode"}, ""},
		{"a new role on the GPU a restarted one leaves waits for it", func(*testing.T) string { return stepsBase },
			func(t *testing.T) string {
				return swap(t, stepsBase, decode1, "  - name: decode\n    kind: decode\n    gpus: [2]\n  - name: decode2\n    kind: decode\n    gpus: [1]\n")
			},
			[]string{"restart decode", "start decode2"}, ""},
		{"a new role on a removed role's GPU starts after its stop", func(*testing.T) string { return stepsBase },
			func(t *testing.T) string {
				return swap(t, stepsBase, decode1, "  - name: dec\n    kind: decode\n    gpus: [1]\n")
			},
			[]string{"stop decode", "start dec"}, ""},
		{"two roles trading GPUs are refused", func(*testing.T) string { return stepsBase },
			func(t *testing.T) string {
				s := swap(t, stepsBase, decode1, "  - name: decode\n    kind: decode\n    gpus: [0]\n")
				return swap(t, s, "    kind: prefill\n    gpus: [0]\n", "    kind: prefill\n    gpus: [1]\n")
			},
			nil, "each need GPUs another of them holds"},
		{"a worker that moves is rebound", func(*testing.T) string { return stepsBase },
			func(t *testing.T) string {
				return swap(t, stepsBase, decode1, decode1+"    worker: tcp://127.0.0.1:23456\n")
			},
			[]string{"restart decode rebind"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			from := planOf(t, c.from(t), nil)
			to := planOf(t, c.to(t), from)
			batches, err := applySteps(from, to, profiles.Diff(from, to))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, b := range batches {
				var parts []string
				for _, st := range b {
					s := st.Kind.String()
					switch {
					case st.Kind == stepRename:
						s = "rename " + st.Was + " → " + st.Name
					case st.Kind != stepGateway:
						s += " " + st.Name
					}
					if st.Rebind {
						s += " rebind"
					}
					parts = append(parts, s)
				}
				got = append(got, strings.Join(parts, "+"))
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("steps\n got %q\nwant %q", got, c.want)
			}
		})
	}
}
