package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// routedDeployment is `tsd up --headless` on ts-fake with two prefill
// replicas of dp 2 and two decode replicas, the given policies and extra
// gateway keys: every level a policy decides at has two candidates.
type routedDeployment struct {
	*deployment
	base string
}

func upRouted(t *testing.T, prefill, decode, gatewayExtra string) *routedDeployment {
	t.Helper()
	dir := fakeProfileDir(t, "e2e-route")
	port := freePort(t)
	prof := fmt.Sprintf(`name: routed
model: ./model
engine:
  command: [%s, serve]
  env: {TS_FAKE_TOKENS_PER_S: "2000", TS_FAKE_STARTUP: 100ms}
gateway:
  port: %d
  policy: {prefill: %s, decode: %s}
%s
roles:
  - name: prefill
    kind: prefill
    replicas: 2
    dp: 2
    gpus: [[0, 1], [2, 3]]
    bootstrap_port: [%d, %d]
    dist_init_port: [%d, %d]
  - name: decode
    kind: decode
    replicas: 2
    gpus: [[4], [5]]
    dist_init_port: [%d, %d]
`, fakeBin, port, prefill, decode, gatewayExtra, freePort(t), freePort(t), freeCluster8(t), freeCluster8(t), freeCluster8(t), freeCluster8(t))
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runTSD(t, dir, "up", "--headless", "p.yaml")
	for _, r := range []string{"prefill-0", "prefill-1", "decode-0", "decode-1"} {
		d.waitLine(0, r, "→ ready")
	}
	t.Cleanup(func() {
		if out, err := d.ctl("stop", "--now"); err != nil {
			t.Logf("tsd stop: %v\n%s", err, out)
		}
		_ = d.wait()
	})
	return &routedDeployment{deployment: d, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
}

// landing is where one request's legs went, from its access line.
type landing struct {
	prefill, decode string // role instances
	prank, drank    int
	route, reason   string
	match           string
}

func (l landing) prefillRank() string { return fmt.Sprintf("%s#%d", l.prefill, l.prank) }

// generate sends one /generate request with prompt (token ids), an
// x-request-id and, when key is set, SMG's routing key; it returns the
// answer's cached_tokens.
func (r *routedDeployment) generate(t *testing.T, id, key string, prompt []int32) int {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"input_ids": prompt, "sampling_params": map[string]any{"max_new_tokens": 2, "ignore_eos": true}})
	req, _ := http.NewRequest("POST", r.base+"/generate", strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	if key != "" {
		req.Header.Set("X-SMG-Routing-Key", key)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		MetaInfo struct {
			FinishReason *struct{ Type string } `json:"finish_reason"`
			CachedTokens *int                   `json:"cached_tokens"`
		} `json:"meta_info"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &out) != nil || out.MetaInfo.FinishReason == nil || out.MetaInfo.CachedTokens == nil {
		t.Fatalf("request %s: %d %s", id, resp.StatusCode, body)
	}
	return *out.MetaInfo.CachedTokens
}

var accessKV = regexp.MustCompile(`(\w+)=("[^"]*"|\S+)`)

// landings waits (up to 30 s) for the access lines of ids in the
// gateway's log and returns where each request went.
func (r *routedDeployment) landings(t *testing.T, ids ...string) map[string]landing {
	t.Helper()
	path := filepath.Join(stateDir(t, r.dir), "logs", "gateway.log")
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := map[string]landing{}
		if f, err := os.Open(path); err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				if !strings.Contains(line, "msg=access") {
					continue
				}
				kv := map[string]string{}
				for _, m := range accessKV.FindAllStringSubmatch(line, -1) {
					kv[m[1]] = strings.Trim(m[2], `"`)
				}
				roles := strings.Split(kv["roles"], ",")
				if len(roles) != 2 {
					continue
				}
				var l landing
				l.prefill, l.decode = roles[0], roles[1]
				fmt.Sscan(kv["prefill_rank"], &l.prank)
				fmt.Sscan(kv["decode_rank"], &l.drank)
				l.route, l.reason, l.match = kv["route"], kv["route_reason"], kv["match"]
				got[kv["rid"]] = l
			}
			f.Close()
		}
		missing := 0
		for _, id := range ids {
			if _, ok := got[id]; !ok {
				missing++
			}
		}
		if missing == 0 {
			return got
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(path)
			t.Fatalf("%d of %d access lines missing after 30s; gateway log:\n%s", missing, len(ids), tail(string(b), 60))
		}
		time.Sleep(20 * time.Millisecond) // the log file has no event to wait on; bounded by the deadline
	}
}

// seq is n token ids starting at head: distinct heads, distinct prompts.
func seq(head int32, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = head + int32(i)
	}
	return p
}

func cat(a, b []int32) []int32 { return append(append([]int32(nil), a...), b...) }

// TestE2ERoutingPolicies drives every routing policy through `tsd up` on
// ts-fake and checks where requests land, from their access lines: the
// prefill policy chooses the replica and its DP rank, the decode policy
// the decode replica. Six deployments cover the ten policies (each pairs
// a prefill policy with a decode policy).
func TestE2ERoutingPolicies(t *testing.T) {
	t.Parallel()

	// cache_aware (prefill) sends every turn of a conversation (the whole
	// prompt so far, a long shared head) to the rank that computed it and
	// says cache_hit with its match; new prompts spread over the ranks.
	// manual (decode) keeps a routing key on one decode replica.
	t.Run("cache_aware+manual", func(t *testing.T) {
		t.Parallel()
		r := upRouted(t, "cache_aware", "manual", "")
		history := seq(1000, 400)
		var ids []string
		for turn := 0; turn < 4; turn++ {
			history = cat(history, seq(int32(5000+100*turn), 20))
			id := fmt.Sprintf("conv-%d", turn)
			// ts-fake's prefix cache answers with what it held: every turn
			// after the first finds the conversation so far (whole pages).
			if cached := r.generate(t, id, "user-7", history); turn > 0 && cached < 384 {
				t.Errorf("turn %d: cached_tokens %d, want the history's whole pages (≥ 384)", turn, cached)
			}
			ids = append(ids, id)
		}
		for i := 0; i < 3; i++ {
			id := fmt.Sprintf("other-%d", i)
			r.generate(t, id, "", seq(int32(20000+1000*i), 300))
			ids = append(ids, id)
		}
		ls := r.landings(t, ids...)
		first := ls["conv-0"]
		ranks := map[string]bool{}
		for turn := 0; turn < 4; turn++ {
			l := ls[fmt.Sprintf("conv-%d", turn)]
			ranks[l.prefillRank()] = true
			if l.prefillRank() != first.prefillRank() || l.route != "cache_aware" {
				t.Errorf("turn %d landed on %s (%s), turn 0 on %s", turn, l.prefillRank(), l.route, first.prefillRank())
			}
			if m, err := strconv.ParseFloat(l.match, 64); turn > 0 && (l.reason != "cache_hit" || err != nil || m < 0.9) {
				t.Errorf("turn %d: reason %s match %s, want cache_hit above 0.9", turn, l.reason, l.match)
			}
			if l.decode != first.decode {
				t.Errorf("manual: routing key user-7 went to %s then %s", first.decode, l.decode)
			}
		}
		for i := 0; i < 3; i++ {
			ranks[ls[fmt.Sprintf("other-%d", i)].prefillRank()] = true
		}
		if len(ranks) < 3 {
			t.Errorf("4 distinct prompts landed on only %v", ranks)
		}
	})

	// round_robin (prefill) cycles the replicas and each one's DP ranks:
	// four requests, four ranks. consistent_hashing (decode) keeps a key
	// on one replica.
	t.Run("round_robin+consistent_hashing", func(t *testing.T) {
		t.Parallel()
		r := upRouted(t, "round_robin", "consistent_hashing", "")
		var ids []string
		for i := 0; i < 4; i++ {
			id := fmt.Sprintf("rr-%d", i)
			r.generate(t, id, "tenant-a", seq(int32(100*i), 10))
			ids = append(ids, id)
		}
		ls := r.landings(t, ids...)
		ranks := map[string]bool{}
		for _, id := range ids {
			ranks[ls[id].prefillRank()] = true
			if ls[id].reason != "cycle" || ls[id].decode != ls["rr-0"].decode {
				t.Errorf("%s: %+v (decode of rr-0: %s)", id, ls[id], ls["rr-0"].decode)
			}
		}
		if len(ranks) != 4 {
			t.Errorf("round robin over 2 replicas × dp 2 used %v", ranks)
		}
		if ls["rr-0"].prefill == ls["rr-1"].prefill {
			t.Errorf("round robin gave two requests in a row to %s", ls["rr-0"].prefill)
		}
	})

	// manual (prefill): each routing key stays on one rank of one replica.
	// prefix_hash (decode): the same prompt head lands on one replica.
	t.Run("manual+prefix_hash", func(t *testing.T) {
		t.Parallel()
		r := upRouted(t, "manual", "prefix_hash", "")
		head := seq(7000, 300)
		var ids []string
		for i := 0; i < 6; i++ {
			key := []string{"alice", "bob"}[i%2]
			id := fmt.Sprintf("%s-%d", key, i)
			r.generate(t, id, key, cat(head, seq(int32(9000+10*i), 5)))
			ids = append(ids, id)
		}
		ls := r.landings(t, ids...)
		for i, id := range ids {
			same := ls[ids[i%2]]
			if ls[id].prefillRank() != same.prefillRank() {
				t.Errorf("manual: %s landed on %s, its key's first on %s", id, ls[id].prefillRank(), same.prefillRank())
			}
			if i >= 2 && ls[id].reason != "sticky" {
				t.Errorf("manual: %s reason %s, want sticky", id, ls[id].reason)
			}
			if ls[id].decode != ls[ids[0]].decode {
				t.Errorf("prefix_hash: %s went to %s, the same head first to %s", id, ls[id].decode, ls[ids[0]].decode)
			}
		}
	})

	// bucket (prefill): short prompts to the first replica's first rank,
	// long ones (≥ 2048 tokens) to the second's last (the initial even
	// ranges; balance and re-cutting are put out of reach here).
	// power_of_two (decode): every request served.
	t.Run("bucket+power_of_two", func(t *testing.T) {
		t.Parallel()
		r := upRouted(t, "bucket", "power_of_two", "  bucket: {balance_abs_threshold: 100000000, adjust_interval: 1h}")
		var ids []string
		for i := 0; i < 4; i++ {
			n := 100
			if i%2 == 1 {
				n = 3000
			}
			id := fmt.Sprintf("len-%d", i)
			r.generate(t, id, "", seq(int32(1000*i), n))
			ids = append(ids, id)
		}
		ls := r.landings(t, ids...)
		for i, id := range ids {
			want := "prefill-0#0"
			if i%2 == 1 {
				want = "prefill-1#1"
			}
			if got := ls[id].prefillRank(); got != want || ls[id].reason != "bucket" {
				t.Errorf("%s: %s (%s), want %s", id, got, ls[id].reason, want)
			}
			if ls[id].reason == "" || ls[id].decode == "" {
				t.Errorf("%s: %+v", id, ls[id])
			}
		}
	})

	// kv_aware (prefill): with both prefills' KV events live, a
	// conversation stays on the rank that holds it (kv_hit) and finds its
	// history cached there. least_load (decode) cycles the idle decode
	// replicas.
	t.Run("kv_aware+least_load", func(t *testing.T) {
		t.Parallel()
		r := upRouted(t, "kv_aware", "least_load", "")
		// The gateway follows both prefills' KV events before the first
		// request, so every decision reads them.
		r.waitStatus(func(s snapshot.Snapshot) bool {
			live := 0
			for _, row := range s.Gateway.Roles {
				if strings.HasPrefix(row.Role, "prefill") && row.KVEvents == snapshot.KVEventsLive {
					live++
				}
			}
			return live == 2
		})
		history := seq(3000, 512)
		var ids []string
		for turn := 0; turn < 3; turn++ {
			history = cat(history, seq(int32(8000+100*turn), 16))
			id := fmt.Sprintf("kv-%d", turn)
			if cached := r.generate(t, id, "", history); turn > 0 && cached < 512 {
				t.Errorf("turn %d: cached_tokens %d, want the history's whole pages (≥ 512)", turn, cached)
			}
			ids = append(ids, id)
		}
		ls := r.landings(t, ids...)
		decodes := map[string]bool{}
		for turn, id := range ids {
			l := ls[id]
			decodes[l.decode] = true
			if l.route != "kv_aware" || l.prefillRank() != ls[ids[0]].prefillRank() {
				t.Errorf("%s: %+v, the first turn on %s", id, l, ls[ids[0]].prefillRank())
			}
			if want := map[bool]string{false: "kv_miss", true: "kv_hit"}[turn > 0]; l.reason != want {
				t.Errorf("%s: reason %s, want %s (events live)", id, l.reason, want)
			}
		}
		if len(decodes) != 2 {
			t.Errorf("least_load over two idle decodes used %v", decodes)
		}
	})

	// random (decode) and the rest of prefill's choices: every request is
	// served and its line names the policy.
	t.Run("power_of_two+random", func(t *testing.T) {
		t.Parallel()
		r := upRouted(t, "power_of_two", "random", "")
		var ids []string
		for i := 0; i < 4; i++ {
			id := fmt.Sprintf("p2-%d", i)
			r.generate(t, id, "", seq(int32(100*i), 8))
			ids = append(ids, id)
		}
		for _, id := range ids {
			if l := r.landings(t, ids...)[id]; l.route != "power_of_two" || l.reason != "two_choices" {
				t.Errorf("%s: %+v", id, l)
			}
		}
	})
}
