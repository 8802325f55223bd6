package profiles

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
)

type genRole struct {
	name, kind, host string
	dp, tp           int
	worker           string // "" = default ipc
	dist, boot       int    // 0 = planned
}

type interval struct {
	ns     string
	lo, hi int
	what   string
}

// genProfile builds a random valid-looking profile: 1-8 roles of every
// kind (aggregated ones beside the prefill and decode, conditional), dp
// 1-4, mixed ipc/tcp workers, some remote roles, some explicit ports.
func genProfile(rng *rand.Rand, n int) (string, []genRole, int) {
	roles := make([]genRole, 0, n)
	nextGPU := 0
	tcpPort := 31000 + rng.Intn(500)
	for i := 0; i < n; i++ {
		kind := []string{KindPrefill, KindDecode, KindEncode, KindAggregated}[rng.Intn(4)]
		if i == 0 {
			kind = KindPrefill
		}
		if i == 1 {
			kind = KindDecode
		}
		r := genRole{name: fmt.Sprintf("r%d-%s", i, kind), kind: kind, host: HostLocal, dp: 1 + rng.Intn(4), tp: 1 + rng.Intn(2)}
		if kind == KindEncode {
			r.dp = 1
		}
		switch x := rng.Intn(10); {
		case x < 5:
		case x < 7:
			r.worker = fmt.Sprintf("ipc:///run/prop/%d/%s", rng.Intn(1000), r.name)
		default:
			tcpPort += 1 + rng.Intn(3)
			r.worker = fmt.Sprintf("tcp://127.0.0.1:%d", tcpPort)
		}
		if rng.Intn(10) == 0 {
			r.host = fmt.Sprintf("box%d", rng.Intn(3))
			tcpPort++
			r.worker = fmt.Sprintf("tcp://10.0.0.5:%d", tcpPort)
		}
		switch rng.Intn(12) {
		case 0, 1, 2:
			r.dist = 1024 + rng.Intn(60000)
		case 3, 4:
			r.dist = 12000 + rng.Intn(400) // where the planner likes to go
		case 5:
			r.dist = 7995 // clashes with the default gateway port 8000
		}
		if kindOf(kind).Bootstrap {
			switch rng.Intn(6) {
			case 0:
				r.boot = 1024 + rng.Intn(60000)
			case 1:
				r.boot = 8998 + rng.Intn(3) // where planned bootstraps go
			}
		}
		roles = append(roles, r)
	}
	gwPort := 8000
	if rng.Intn(3) == 0 {
		gwPort = 1024 + rng.Intn(60000)
	}
	var b strings.Builder
	disagg := ""
	for _, r := range roles {
		if r.kind == KindAggregated {
			disagg = ", disaggregation: conditional" // a mixed profile must say
		}
	}
	fmt.Fprintf(&b, "model: m\ngateway: {port: %d, bootstrap_server: %s%s}\nroles:\n", gwPort, []string{"engine", "tsd"}[rng.Intn(2)], disagg)
	for _, r := range roles {
		var gpus []string
		for g := 0; g < r.tp*r.dp; g++ {
			gpus = append(gpus, fmt.Sprint(nextGPU))
			nextGPU++
		}
		fmt.Fprintf(&b, "  - name: %s\n    kind: %s\n    tp: %d\n    dp: %d\n    gpus: [%s]\n    host: %s\n", r.name, r.kind, r.tp, r.dp, strings.Join(gpus, ", "), r.host)
		if r.worker != "" {
			fmt.Fprintf(&b, "    worker: %q\n", r.worker)
		}
		if r.dist > 0 {
			fmt.Fprintf(&b, "    dist_init_port: %d\n", r.dist)
		}
		if r.boot > 0 {
			fmt.Fprintf(&b, "    bootstrap_port: %d\n", r.boot)
		}
	}
	return b.String(), roles, gwPort
}

func overlapping(ivs []interval) (interval, interval, bool) {
	for i := range ivs {
		for j := i + 1; j < len(ivs); j++ {
			a, b := ivs[i], ivs[j]
			if a.ns == b.ns && a.lo <= b.hi && b.lo <= a.hi {
				return a, b, true
			}
		}
	}
	return interval{}, interval{}, false
}

// Pins: over 200 random profiles, planned ports never overlap each other,
// any cluster, a handshake port, the gateway port or a busy port; and the
// planner refuses a profile only when its fixed ports really collide.
func TestPlanPortsProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(20261129))
	planned, refused := 0, 0
	for iter := 0; iter < 200; iter++ {
		src, gen, gwPort := genProfile(rng, 1+rng.Intn(8))
		busy := map[int]bool{}
		for i := 0; i < 300; i++ {
			busy[8998+rng.Intn(12000)] = true
		}
		facts := fixedFacts()
		facts.PortFree = func(p int) bool { return !busy[p] }
		p, errs := Parse(fmt.Sprintf("prop%d.yaml", iter), []byte(src))
		if len(errs) > 0 {
			// Only single-role profiles may fail to load (no decode role).
			if len(gen) >= 2 {
				t.Fatalf("profile %d does not load: %v\n%s", iter, errs, src)
			}
			continue
		}
		plan, errs := MakePlan(p, facts)

		// The fixed ports, computed independently of the planner.
		var fixed []interval
		fixed = append(fixed, interval{localNS, gwPort, gwPort, "gateway"})
		for _, r := range gen {
			ns := localNS
			if r.host != HostLocal {
				ns = r.host
			}
			w := r.worker
			if w == "" {
				w = "ipc://" + filepath.Join(facts.RunDir, r.name)
			}
			pw, err := ParseWorker(w)
			if err != nil {
				t.Fatal(err)
			}
			fixed = append(fixed, interval{localNS, pw.DialPort(), pw.DialPort(), "handshake " + r.name})
			if r.dist > 0 {
				fixed = append(fixed, interval{ns, r.dist, r.dist + ClusterSpan(r.dp), "cluster " + r.name})
			}
			if r.boot > 0 {
				bns := ns
				if r.kind == KindPrefill && p.Gateway.BootstrapServer == BootstrapTSD {
					bns = localNS
				}
				fixed = append(fixed, interval{bns, r.boot, r.boot, "bootstrap " + r.name})
			}
		}
		_, _, collide := overlapping(fixed)
		if len(errs) > 0 {
			for _, e := range errs {
				if !strings.Contains(e.Msg, "collides with") {
					t.Fatalf("profile %d: unexpected error %v\n%s", iter, e, src)
				}
			}
			if !collide {
				t.Fatalf("profile %d refused without a real collision: %v\n%s", iter, errs, src)
			}
			refused++
			continue
		}
		if collide {
			a, b, _ := overlapping(fixed)
			t.Fatalf("profile %d: %s and %s overlap but the plan was accepted\n%s", iter, a.what, b.what, src)
		}
		planned++

		// Everything the plan occupies, per host.
		all := []interval{{localNS, gwPort, gwPort, "gateway"}}
		bases := map[string][]int{}
		for i, r := range plan.Roles {
			g := gen[i]
			ns := localNS
			if !r.Local {
				ns = r.Host
			}
			hp := addrPort(r.Handshake)
			all = append(all, interval{localNS, hp, hp, "handshake " + r.Name})
			d := r.PortCluster[0]
			all = append(all, interval{ns, d, d + ClusterSpan(r.DP), "cluster " + r.Name})
			bases[ns] = append(bases[ns], d)
			if r.BootstrapPort > 0 {
				bns := ns
				if r.Kind == KindPrefill && plan.Gateway.BootstrapServer == BootstrapTSD {
					bns = localNS
				}
				all = append(all, interval{bns, r.BootstrapPort, r.BootstrapPort, "bootstrap " + r.Name})
				if g.boot == 0 && bns == localNS && busy[r.BootstrapPort] {
					t.Fatalf("profile %d: planned bootstrap %d of %s is busy", iter, r.BootstrapPort, r.Name)
				}
				if g.boot == 0 && (inBand(r.BootstrapPort, r.BootstrapPort) || inEphemeral(r.BootstrapPort, r.BootstrapPort)) {
					t.Fatalf("profile %d: planned bootstrap %d in a reserved band", iter, r.BootstrapPort)
				}
			}
			if g.dist == 0 {
				if inBand(d, d+ClusterSpan(r.DP)) || inEphemeral(d, d+ClusterSpan(r.DP)) {
					t.Fatalf("profile %d: planned cluster %d of %s in a reserved band", iter, d, r.Name)
				}
				for _, port := range r.PortCluster {
					if ns == localNS && busy[port] {
						t.Fatalf("profile %d: planned cluster port %d of %s is busy", iter, port, r.Name)
					}
				}
			}
			if want := fmt.Sprintf("127.0.0.1:%d", d); r.DistInitAddr != want {
				t.Fatalf("dist-init addr %s vs cluster %v", r.DistInitAddr, r.PortCluster)
			}
		}
		if a, b, bad := overlapping(all); bad {
			t.Fatalf("profile %d: %s (%d-%d) overlaps %s (%d-%d)\n%s", iter, a.what, a.lo, a.hi, b.what, b.lo, b.hi, src)
		}
		// Planned bases keep 100 ports from every other base on their host.
		for i, r := range plan.Roles {
			if gen[i].dist != 0 {
				continue
			}
			ns := localNS
			if !r.Local {
				ns = r.Host
			}
			d := r.PortCluster[0]
			near := 0
			for _, o := range bases[ns] {
				if diff := d - o; diff > -100 && diff < 100 {
					near++
				}
			}
			if near != 1 { // itself
				t.Fatalf("profile %d: planned base %d of %s is within 100 of another base %v", iter, d, r.Name, bases[ns])
			}
		}
	}
	if planned < 100 {
		t.Errorf("only %d of 200 random profiles planned (%d refused): the generator is too collision-prone to prove much", planned, refused)
	}
	t.Logf("%d planned, %d refused for real collisions", planned, refused)
}
