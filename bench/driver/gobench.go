package main

import (
	"bufio"
	"strconv"
	"strings"
)

// goBench is one result line of `go test -bench` output.
type goBench struct {
	Name    string             // without the -GOMAXPROCS suffix
	N       int64              // iterations
	Metrics map[string]float64 // unit → value, e.g. "ns/op", "MB/s", "tok/s"
	Units   []string           // units in the order printed
}

// parseGoBench reads the result lines of `go test -bench` output (and of
// a test binary run with -test.bench); other lines are ignored.
func parseGoBench(out string) []goBench {
	var res []goBench
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		b := goBench{Name: name, N: n, Metrics: map[string]float64{}}
		ok := true
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				ok = false
				break
			}
			b.Metrics[f[i+1]] = v
			b.Units = append(b.Units, f[i+1])
		}
		if ok {
			res = append(res, b)
		}
	}
	return res
}
