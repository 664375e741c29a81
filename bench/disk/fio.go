package disk

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/strata-db/strata/diskprobe"
)

// FioResult is what a comparison needs from fio's JSON output
// (--output-format=json) of a job like fio-profiles/etcd-wal.fio.
type FioResult struct {
	Job     string            `json:"job"`
	Version string            `json:"version"`
	Writes  int64             `json:"writes"`
	Runtime time.Duration     `json:"runtime_ns"`
	IOPS    float64           `json:"iops"`
	Sync    diskprobe.Latency `json:"fdatasync"`
}

type fioLat struct {
	Min        float64            `json:"min"`
	Max        float64            `json:"max"`
	Mean       float64            `json:"mean"`
	N          int64              `json:"N"`
	Percentile map[string]float64 `json:"percentile"`
}

type fioOutput struct {
	Version string `json:"fio version"`
	Jobs    []struct {
		Name  string `json:"jobname"`
		Error int    `json:"error"`
		Write struct {
			TotalIOs int64   `json:"total_ios"`
			Runtime  int64   `json:"runtime"` // ms
			IOPS     float64 `json:"iops"`
		} `json:"write"`
		Sync *struct {
			Lat *fioLat `json:"lat_ns"`
		} `json:"sync"`
	} `json:"jobs"`
}

// ParseFio reads the first job of fio's JSON output. fio may print
// warnings before the JSON document; they are skipped.
func ParseFio(data []byte) (*FioResult, error) {
	if i := strings.IndexByte(string(data), '{'); i > 0 {
		data = data[i:]
	}
	var out fioOutput
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("fio output: not fio's JSON (run fio with --output-format=json): %w", err)
	}
	if len(out.Jobs) == 0 {
		return nil, errors.New("fio output: no jobs")
	}
	j := out.Jobs[0]
	if j.Error != 0 {
		return nil, fmt.Errorf("fio output: job %s failed with error %d", j.Name, j.Error)
	}
	if j.Write.TotalIOs == 0 {
		return nil, fmt.Errorf("fio output: job %s wrote nothing", j.Name)
	}
	if j.Sync == nil || j.Sync.Lat == nil || j.Sync.Lat.N == 0 {
		return nil, fmt.Errorf("fio output: job %s has no fdatasync latencies (the job needs fdatasync=1; fio 3.5 or later reports them)", j.Name)
	}
	l := j.Sync.Lat
	ns := func(v float64) time.Duration { return time.Duration(math.Round(v)) }
	pct := func(p string) time.Duration { return ns(l.Percentile[p]) }
	return &FioResult{
		Job: j.Name, Version: out.Version, Writes: j.Write.TotalIOs,
		Runtime: time.Duration(j.Write.Runtime) * time.Millisecond, IOPS: j.Write.IOPS,
		Sync: diskprobe.Latency{Min: ns(l.Min), Max: ns(l.Max), Mean: ns(l.Mean),
			P50: pct("50.000000"), P90: pct("90.000000"), P99: pct("99.000000"), P999: pct("99.900000")},
	}, nil
}

// Comparison sets fio runs beside stratabench disk runs. With several
// runs of each (interleaved, so that load on a shared machine falls on
// both), IOPS are pooled: all writes over all the time; latencies are the
// mean of each run's figure.
type Comparison struct {
	FioRuns   []*FioResult        `json:"fio_runs"`
	BenchRuns []*diskprobe.Result `json:"stratabench_runs"`
	Fio       FioResult           `json:"fio"`
	Bench     diskprobe.Result    `json:"stratabench"`
	// Ratio is stratabench's pooled IOPS over fio's.
	Ratio float64 `json:"iops_ratio"`
	// Tolerance is the largest accepted |Ratio-1|.
	Tolerance float64 `json:"tolerance"`
	Agree     bool    `json:"agree"`
}

// meanLatency averages latency summaries field by field.
func meanLatency(ls []diskprobe.Latency) diskprobe.Latency {
	var m diskprobe.Latency
	if len(ls) == 0 {
		return m
	}
	n := time.Duration(len(ls))
	for _, l := range ls {
		m.Min += l.Min / n
		m.Mean += l.Mean / n
		m.P50 += l.P50 / n
		m.P90 += l.P90 / n
		m.P99 += l.P99 / n
		m.P999 += l.P999 / n
		m.Max = max(m.Max, l.Max)
	}
	return m
}

// Compare checks that the pooled sequential sync IOPS of the fio runs and
// the stratabench runs agree within tol (0.25 for ±25%), relative to
// fio's. Both lists must be non-empty.
func Compare(fio []*FioResult, bench []*diskprobe.Result, tol float64) Comparison {
	c := Comparison{FioRuns: fio, BenchRuns: bench, Tolerance: tol}
	var ls []diskprobe.Latency
	for _, f := range fio {
		c.Fio.Job, c.Fio.Version = f.Job, f.Version
		c.Fio.Writes += f.Writes
		c.Fio.Runtime += f.Runtime
		ls = append(ls, f.Sync)
	}
	c.Fio.Sync = meanLatency(ls)
	if c.Fio.Runtime > 0 {
		c.Fio.IOPS = float64(c.Fio.Writes) / c.Fio.Runtime.Seconds()
	} else if len(fio) == 1 {
		c.Fio.IOPS = fio[0].IOPS
	}
	ls = ls[:0]
	for _, r := range bench {
		c.Bench.Dir, c.Bench.BlockSize = r.Dir, r.BlockSize
		c.Bench.Writes += r.Writes
		c.Bench.Bytes += r.Bytes
		c.Bench.Elapsed += r.Elapsed
		ls = append(ls, r.Sync)
	}
	c.Bench.Sync = meanLatency(ls)
	if c.Bench.Elapsed > 0 {
		c.Bench.IOPS = float64(c.Bench.Writes) / c.Bench.Elapsed.Seconds()
	} else if len(bench) == 1 {
		c.Bench.IOPS = bench[0].IOPS
	}
	if c.Fio.IOPS > 0 {
		c.Ratio = c.Bench.IOPS / c.Fio.IOPS
	}
	c.Agree = c.Fio.IOPS > 0 && math.Abs(c.Ratio-1) <= tol
	return c
}

// String prints the two sides next to each other.
func (c Comparison) String() string {
	var b strings.Builder
	row := func(name, fio, sb string) { fmt.Fprintf(&b, "%-16s %20s %20s\n", name, fio, sb) }
	row("", "fio "+c.Fio.Job, "stratabench disk")
	if len(c.FioRuns) > 1 || len(c.BenchRuns) > 1 {
		var fr, br []string
		for _, f := range c.FioRuns {
			fr = append(fr, fmt.Sprintf("%.0f", f.IOPS))
		}
		for _, r := range c.BenchRuns {
			br = append(br, fmt.Sprintf("%.0f", r.IOPS))
		}
		row("IOPS by run", strings.Join(fr, " "), strings.Join(br, " "))
	}
	row("writes", fmt.Sprint(c.Fio.Writes), fmt.Sprint(c.Bench.Writes))
	row("time", fmt.Sprintf("%.2f s", c.Fio.Runtime.Seconds()), fmt.Sprintf("%.2f s", c.Bench.Elapsed.Seconds()))
	row("sync IOPS", fmt.Sprintf("%.0f", c.Fio.IOPS), fmt.Sprintf("%.0f", c.Bench.IOPS))
	row("p50 fdatasync", fmtDur(c.Fio.Sync.P50), fmtDur(c.Bench.Sync.P50))
	row("p99 fdatasync", fmtDur(c.Fio.Sync.P99), fmtDur(c.Bench.Sync.P99))
	row("p99.9 fdatasync", fmtDur(c.Fio.Sync.P999), fmtDur(c.Bench.Sync.P999))
	row("max fdatasync", fmtDur(c.Fio.Sync.Max), fmtDur(c.Bench.Sync.Max))
	verdict := "agree, within"
	if !c.Agree {
		verdict = "DISAGREE, beyond"
	}
	fmt.Fprintf(&b, "IOPS ratio stratabench/fio: %.3f (%+.1f%%): %s ±%.0f%%\n",
		c.Ratio, (c.Ratio-1)*100, verdict, c.Tolerance*100)
	return b.String()
}

// fmtDur is the latency format of the summaries.
func fmtDur(d time.Duration) string { return diskprobe.FormatDuration(d) }
