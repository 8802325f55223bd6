package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tsd-project/tsd/internal/percentile"
)

// shareRow is the gateway's own share of TTFT over one C=1 run, read
// from the access lines' gw_us fields (gateway/reqtime) that run wrote.
type shareRow struct {
	Name   string
	Run    loadRow
	Lines  int     // access lines with gw_us
	P50    float64 // µs: gw_us
	P90    float64
	Tok    float64 // µs: the stages' medians
	Send   float64
	Write  float64
	Err    string
	Repeat bool // every request the same chat messages
}

var gwField = regexp.MustCompile(`\b(gw_us|gw_tok_us|gw_send_us|gw_write_us)=(\d+)`)

// gwSamples reads the gw_* fields of every access line in r, by field.
func gwSamples(r io.Reader) map[string][]float64 {
	out := map[string][]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "msg=access") {
			continue
		}
		for _, m := range gwField.FindAllStringSubmatch(line, -1) {
			v, err := strconv.ParseFloat(m[2], 64)
			if err == nil {
				out[m[1]] = append(out[m[1]], v)
			}
		}
	}
	return out
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// readShare reads the gw_us of the access lines written to path from
// offset on, waiting (a driver's poll, on a deadline) until want of them
// are there: a record ends just after its response's last byte.
func readShare(path string, offset int64, want int) (map[string][]float64, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("read the gateway log: %w", err)
		}
		_, err = f.Seek(offset, io.SeekStart)
		var s map[string][]float64
		if err == nil {
			s = gwSamples(f)
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read the gateway log: %w", err)
		}
		if len(s["gw_us"]) >= want || time.Now().After(deadline) {
			return s, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runShare measures the gateway's share of TTFT at C=1 on d: random
// prompts, then one prompt repeated (what a tokenizer cache hits).
func runShare(o options, l layout, tsd, work string, d *deployment) []shareRow {
	logPath := filepath.Join(stateDir(d.dir), "logs", "gateway.log")
	repeat := filepath.Join(work, "repeat.jsonl")
	words := make([]string, o.inLen)
	for i := range words {
		words[i] = []string{"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog"}[i%9]
	}
	var rows []shareRow
	if err := os.WriteFile(repeat, []byte(fmt.Sprintf("{\"prompt\": %q}\n", strings.Join(words, " "))), 0o644); err != nil {
		return []shareRow{{Name: "repeated prompt", Err: err.Error()}}
	}
	for _, c := range []struct {
		name   string
		repeat bool
		extra  []string
	}{
		{"random prompts", false, nil},
		{"one prompt repeated (tokenizer-cache hit)", true, []string{"--dataset-name", "file", "--dataset-path", repeat}},
	} {
		off := fileSize(logPath)
		r := runLoad(o, l, tsd, work, d.base, "chat", 1, o.shareN, d.srv.pid(), c.extra...)
		row := shareRow{Name: c.name, Run: r, Repeat: c.repeat, Err: r.Err}
		s, err := readShare(logPath, off, r.S.Completed)
		switch {
		case err != nil:
			row.Err = err.Error()
		case len(s["gw_us"]) == 0:
			row.Err = "no access line with gw_us in " + logPath
		default:
			row.Lines = len(s["gw_us"])
			row.P50, row.P90 = percentile.NearestRankOf(s["gw_us"], 50), percentile.NearestRankOf(s["gw_us"], 90)
			row.Tok, row.Send, row.Write = percentile.NearestRankOf(s["gw_tok_us"], 50), percentile.NearestRankOf(s["gw_send_us"], 50), percentile.NearestRankOf(s["gw_write_us"], 50)
		}
		fmt.Printf("  gateway share of TTFT, %s: p50 %.0f µs p90 %.0f µs (tok %.0f send %.0f write %.0f) over %d lines %s\n",
			c.name, row.P50, row.P90, row.Tok, row.Send, row.Write, row.Lines, row.Err)
		rows = append(rows, row)
	}
	return rows
}
