package profiles

import (
	"reflect"
	"strings"
	"testing"
)

func TestScaled(t *testing.T) {
	base, errs := Parse("/srv/p/demo.yaml", []byte(applyBase))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, c := range []struct {
		name  string
		group string
		n     int
		gpus  [][]string
		err   string
		want  [][]string
	}{
		{"up by one", "decode", 2, [][]string{{"3"}}, "", [][]string{{"2"}, {"3"}}},
		{"up by two", "decode", 3, [][]string{{"3"}, {"4"}}, "", [][]string{{"2"}, {"3"}, {"4"}}},
		{"same", "decode", 1, nil, "", [][]string{{"2"}}},
		{"unknown entry", "dec", 2, nil, `no role entry "dec" (have prefill, decode)`, nil},
		{"too few sets", "decode", 3, [][]string{{"3"}}, "need 2 GPU set(s), got 1", nil},
		{"zero", "decode", 0, nil, "replicas must be 1-64", nil},
		{"a GPU in use", "decode", 2, [][]string{{"1"}}, "GPU 1", nil},
		{"wrong count", "decode", 2, [][]string{{"3", "4"}}, "tp × dp", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := base.Scaled(c.group, c.n, c.gpus)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := got.Roles[1]
			if r.Replicas != c.n || !reflect.DeepEqual(r.GPUs, c.want) {
				t.Fatalf("replicas %d gpus %v, want %d %v", r.Replicas, r.GPUs, c.n, c.want)
			}
			if base.Roles[1].Replicas != 1 || len(base.Roles[1].GPUs) != 1 {
				t.Fatal("Scaled changed the profile it was given")
			}
		})
	}
	// Down again: the surviving replica keeps its GPUs.
	three, err := base.Scaled("decode", 3, [][]string{{"3"}, {"4"}})
	if err != nil {
		t.Fatal(err)
	}
	one, err := three.Scaled("decode", 1, nil)
	if err != nil || !reflect.DeepEqual(one.Roles[1].GPUs, [][]string{{"2"}}) {
		t.Fatalf("down to one: %v %v", one.Roles[1].GPUs, err)
	}
}

func TestFreeGPUs(t *testing.T) {
	plan := planFrom(t, applyBase, nil) // uses 0, 1, 2
	host := []GPU{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}, {Index: 2, UUID: "GPU-c"}, {Index: 3, UUID: "GPU-d"}, {Index: 4, UUID: "GPU-e"}}
	for _, c := range []struct {
		n, per int
		want   [][]string
		err    string
	}{
		{1, 1, [][]string{{"3"}}, ""},
		{2, 1, [][]string{{"3"}, {"4"}}, ""},
		{1, 2, [][]string{{"3", "4"}}, ""},
		{3, 1, nil, "need 3 free GPU(s) (1 each); free now: 3, 4"},
		{0, 1, nil, ""},
	} {
		got, err := FreeGPUs(host, plan, c.n, c.per)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%d×%d: err %v, want %q", c.n, c.per, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%d×%d: %v %v, want %v", c.n, c.per, got, err, c.want)
		}
	}
	if _, err := FreeGPUs(nil, plan, 1, 1); err == nil || !strings.Contains(err.Error(), "--gpus") {
		t.Errorf("unknown host GPUs: %v", err)
	}
}

func TestRevision(t *testing.T) {
	a := Revision([]byte("x"), "")
	if len(a) != 12 || a == Revision([]byte("y"), "") || a == Revision([]byte("x"), "decode=2") || a != Revision([]byte("x"), "") {
		t.Fatalf("revisions do not name their input: %s", a)
	}
}

// Regression: tsd scale decode=1 then decode=3 brought replicas 2 and 3
// back on planned ports, outside the band the profile chose. Scaled from
// the running profile like the file's, the replicas added take the
// file's explicit per-replica settings for their slots, and plan there.
func TestScaledLikeTheFileKeepsExplicitPorts(t *testing.T) {
	src := `model: ./m
roles:
  - {name: prefill, kind: prefill, gpus: [0]}
  - name: decode
    kind: decode
    replicas: 3
    gpus: [[1], [2], [3]]
    dist_init_port: [13000, 13100, 13200]
`
	file, errs := Parse("/srv/p/demo.yaml", []byte(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	one, err := file.ScaledLike(file, "decode", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := one.Roles[1].DistInitPorts; !reflect.DeepEqual(got, []int{13000}) {
		t.Fatalf("down to one: %v", got)
	}
	three, err := one.ScaledLike(file, "decode", 3, [][]string{{"2"}, {"3"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := three.Roles[1].DistInitPorts; !reflect.DeepEqual(got, []int{13000, 13100, 13200}) {
		t.Fatalf("back to three: dist_init_port %v, want the file's", got)
	}
	plan, errs := MakePlan(three, HostFacts{})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for i, want := range []string{"127.0.0.1:13000", "127.0.0.1:13100", "127.0.0.1:13200"} {
		if got := plan.Roles[1+i].DistInitAddr; got != want {
			t.Errorf("decode-%d plans %s, want %s", i, got, want)
		}
	}
	// Without the file (or beyond what it writes), planned as before.
	planned, err := one.Scaled("decode", 3, [][]string{{"2"}, {"3"}})
	if err != nil || !reflect.DeepEqual(planned.Roles[1].DistInitPorts, []int{13000, 0, 0}) {
		t.Fatalf("Scaled without the file: %v %v", planned.Roles[1].DistInitPorts, err)
	}
}
