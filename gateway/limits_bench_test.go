package gateway

import (
	"bufio"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tsd-project/tsd/gateway/openai"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/profiles"
)

// parallelPrompts is how many huge prompts go at once.
const parallelPrompts = 4

func vmRSSMB(b *testing.B) float64 { return procStatusMB(b, "VmRSS:") }

func procStatusMB(b *testing.B, key string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			kb, _ := strconv.Atoi(strings.Fields(v)[0])
			return float64(kb) / 1024
		}
	}
	return 0
}

// Four 30 MB completions prompts at once on a 1P1D of ts-fake engines
// (max_model_len 32768), through the OpenAI front end: reports the
// gateway's RSS growth. Before the limits each one was decoded and
// tokenized (about 1.5 GB each); now the body cannot hold a prompt that
// fits and is refused before it is read.
func BenchmarkHugePromptRSS(b *testing.B) {
	tok, err := tokenizer.Load("tokenizer/testdata/demo")
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{Mount: func(e tokenapi.Engine, mux *http.ServeMux) {
		openai.New(e, tok, openai.Options{}).Register(mux)
	}}
	c := newCluster(b, opts, role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode})
	c.waitRegistered("prefill", "decode")
	body := `{"model":"fake","max_tokens":1,"prompt":"` + strings.Repeat("hello world ", 30<<20/12) + `"}`
	b.ResetTimer()
	for range b.N {
		debug.FreeOSMemory()
		base := vmRSSMB(b)
		var wg sync.WaitGroup
		codes := make([]int, parallelPrompts)
		for i := range parallelPrompts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := http.Post(c.base+"/v1/completions", "application/json", strings.NewReader(body))
				if err == nil {
					codes[i] = resp.StatusCode
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(vmRSSMB(b)-base, "rss-growth-MB")
		b.ReportMetric(procStatusMB(b, "VmHWM:")-base, "peak-growth-MB")
		b.Logf("status codes %v", codes)
	}
}
