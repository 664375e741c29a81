package disk

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strata-db/strata/diskprobe"
)

// FioResult is what a comparison needs from fio's JSON output
// (--output-format=json) of a job like fio-profiles/etcd-wal.fio.
type FioResult struct {
	Job     string `json:"job"`
	Version string `json:"version"`
	// BlockSize is the job's bs option, in bytes.
	BlockSize int               `json:"block_size"`
	Writes    int64             `json:"writes"`
	Runtime   time.Duration     `json:"runtime_ns"`
	IOPS      float64           `json:"iops"`
	Sync      diskprobe.Latency `json:"fdatasync"`
}

type fioLat struct {
	Min        float64            `json:"min"`
	Max        float64            `json:"max"`
	Mean       float64            `json:"mean"`
	N          int64              `json:"N"`
	Percentile map[string]float64 `json:"percentile"`
}

type fioOutput struct {
	Version string            `json:"fio version"`
	Global  map[string]string `json:"global options"`
	Jobs    []struct {
		Name    string            `json:"jobname"`
		Error   int               `json:"error"`
		Options map[string]string `json:"job options"`
		Write   struct {
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
	bs, ok := j.Options["bs"]
	if !ok {
		bs = out.Global["bs"]
	}
	blockSize, err := fioSize(bs)
	if err != nil {
		return nil, fmt.Errorf("fio output: job %s: bs %q: %w", j.Name, bs, err)
	}
	l := j.Sync.Lat
	ns := func(v float64) time.Duration { return time.Duration(math.Round(v)) }
	pct := func(p string) time.Duration { return ns(l.Percentile[p]) }
	return &FioResult{
		Job: j.Name, Version: out.Version, BlockSize: blockSize, Writes: j.Write.TotalIOs,
		Runtime: time.Duration(j.Write.Runtime) * time.Millisecond, IOPS: j.Write.IOPS,
		Sync: diskprobe.Latency{Min: ns(l.Min), Max: ns(l.Max), Mean: ns(l.Mean),
			P50: pct("50.000000"), P90: pct("90.000000"), P99: pct("99.000000"), P999: pct("99.900000")},
	}, nil
}

// fioSize reads a fio size option as a block size: ParseSize's syntax
// (fio's default kb_base is 1024), empty meaning fio's default bs, 4 KiB.
func fioSize(s string) (int, error) {
	if strings.TrimSpace(s) == "" {
		return 4096, nil
	}
	v, err := ParseSize(s)
	if err != nil || v <= 0 || v > 1<<31 {
		return 0, errors.New("not a size fio would accept as a block size")
	}
	return int(v), nil
}

// ParseSize reads a byte count with an optional k, m or g suffix (binary
// units, as fio reads them; "KiB", "MB" and the like are accepted too).
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<50)/mult {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	return v * mult, nil
}

// Comparison sets fio runs beside stratabench disk runs, for `make
// disk-check`. The runs are interleaved (fio, stratabench, stratabench,
// fio, ...) so that a load that comes and goes on a shared disk falls on
// both tools, and each side is summarised by the median of its runs,
// which one burst cannot move. The spread of each side's runs says how
// noisy the disk was, and the verdict weighs the difference between the
// tools against it.
type Comparison struct {
	FioRuns   []*FioResult        `json:"fio_runs"`
	BenchRuns []*diskprobe.Result `json:"stratabench_runs"`
	// Fio and Bench hold the medians: IOPS, and each latency figure.
	// Writes and time are the totals over the runs.
	Fio   FioResult        `json:"fio"`
	Bench diskprobe.Result `json:"stratabench"`
	// Ratio is stratabench's median IOPS over fio's.
	Ratio float64 `json:"iops_ratio"`
	// FioSpread and BenchSpread are each side's run-to-run spread:
	// half the range of its runs' IOPS over their median (±).
	FioSpread   float64 `json:"fio_spread"`
	BenchSpread float64 `json:"stratabench_spread"`
	// Tolerance is the largest accepted |Ratio-1|.
	Tolerance float64 `json:"tolerance"`
	// Agree: |Ratio-1| <= Tolerance. Noisy: they do not agree, but the
	// two tools' runs overlap (some fio run was as fast as some
	// stratabench run), so the disk's noise may be the whole difference.
	// Otherwise every run of one tool beat every run of the other: with
	// n runs each that happens by chance in 2 of C(2n, n) orderings (1 in
	// 10 for 3 rounds, 1 in 126 for 5) if the tools measured the same.
	// Verdict says which in words, with each side's spread.
	Agree   bool   `json:"agree"`
	Noisy   bool   `json:"noisy"`
	Verdict string `json:"verdict"`
}

// median of a non-empty slice (sorted in place).
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// spread is half the range of v over its median (0 for a single value).
func spread(v []float64) float64 {
	m := median(v)
	if m <= 0 {
		return 0
	}
	return (slices.Max(v) - slices.Min(v)) / 2 / m
}

// medianLatency takes the median of each figure over the runs.
func medianLatency(ls []diskprobe.Latency) diskprobe.Latency {
	if len(ls) == 0 {
		return diskprobe.Latency{}
	}
	pick := func(f func(diskprobe.Latency) time.Duration) time.Duration {
		v := make([]float64, len(ls))
		for i, l := range ls {
			v[i] = float64(f(l))
		}
		return time.Duration(median(v))
	}
	return diskprobe.Latency{
		Min:  pick(func(l diskprobe.Latency) time.Duration { return l.Min }),
		Mean: pick(func(l diskprobe.Latency) time.Duration { return l.Mean }),
		P50:  pick(func(l diskprobe.Latency) time.Duration { return l.P50 }),
		P90:  pick(func(l diskprobe.Latency) time.Duration { return l.P90 }),
		P99:  pick(func(l diskprobe.Latency) time.Duration { return l.P99 }),
		P999: pick(func(l diskprobe.Latency) time.Duration { return l.P999 }),
		Max:  pick(func(l diskprobe.Latency) time.Duration { return l.Max }),
	}
}

// Compare checks that the median sequential sync IOPS of the fio runs and
// of the stratabench runs agree within tol (0.25 for ±25%), relative to
// fio's. Both lists must be non-empty.
func Compare(fio []*FioResult, bench []*diskprobe.Result, tol float64) Comparison {
	c := Comparison{FioRuns: fio, BenchRuns: bench, Tolerance: tol}
	var ls []diskprobe.Latency
	var fi, bi []float64
	for _, f := range fio {
		c.Fio.Job, c.Fio.Version, c.Fio.BlockSize = f.Job, f.Version, f.BlockSize
		c.Fio.Writes += f.Writes
		c.Fio.Runtime += f.Runtime
		ls = append(ls, f.Sync)
		fi = append(fi, f.IOPS)
	}
	c.Fio.Sync = medianLatency(ls)
	ls = ls[:0]
	for _, r := range bench {
		c.Bench.Dir, c.Bench.BlockSize = r.Dir, r.BlockSize
		c.Bench.Writes += r.Writes
		c.Bench.Bytes += r.Bytes
		c.Bench.Elapsed += r.Elapsed
		ls = append(ls, r.Sync)
		bi = append(bi, r.IOPS)
	}
	c.Bench.Sync = medianLatency(ls)
	if len(fi) > 0 {
		c.Fio.IOPS, c.FioSpread = median(fi), spread(fi)
	}
	if len(bi) > 0 {
		c.Bench.IOPS, c.BenchSpread = median(bi), spread(bi)
	}
	if c.Fio.IOPS > 0 {
		c.Ratio = c.Bench.IOPS / c.Fio.IOPS
	}
	diff := math.Abs(c.Ratio - 1)
	c.Agree = c.Fio.IOPS > 0 && diff <= tol
	var ranges string
	if len(fi) > 0 && len(bi) > 0 {
		// fi and bi are sorted by median.
		c.Noisy = !c.Agree && fi[0] <= bi[len(bi)-1] && bi[0] <= fi[len(fi)-1]
		ranges = fmt.Sprintf("runs: fio %.0f to %.0f, stratabench %.0f to %.0f IOPS; ", fi[0], fi[len(fi)-1], bi[0], bi[len(bi)-1])
	}
	spreads := fmt.Sprintf("%srun-to-run spread: fio ±%.0f%%, stratabench ±%.0f%% over %d+%d runs",
		ranges, c.FioSpread*100, c.BenchSpread*100, len(fio), len(bench))
	faster := "stratabench"
	if c.Ratio < 1 {
		faster = "fio"
	}
	switch {
	case c.Fio.IOPS <= 0:
		c.Verdict = "no verdict: fio measured no IOPS"
	case c.Agree:
		c.Verdict = fmt.Sprintf("agree, within ±%.0f%% (%s)", tol*100, spreads)
	case c.Noisy:
		c.Verdict = fmt.Sprintf("INCONCLUSIVE: the medians differ by %.0f%%, beyond ±%.0f%%, but the two tools' runs overlap, so the disk's noise can explain it (%s); rerun on a quieter disk or with more ROUNDS",
			diff*100, tol*100, spreads)
	default:
		c.Verdict = fmt.Sprintf("DISAGREE, beyond ±%.0f%%: every %s run was faster than every run of the other tool (%s)", tol*100, faster, spreads)
	}
	return c
}

// String prints the two sides next to each other.
func (c Comparison) String() string {
	var b strings.Builder
	row := func(name, fio, sb string) { fmt.Fprintf(&b, "%-16s %20s %20s\n", name, fio, sb) }
	if len(c.FioRuns) > 1 || len(c.BenchRuns) > 1 {
		var fr, br []string
		for _, f := range c.FioRuns {
			fr = append(fr, fmt.Sprintf("%.0f", f.IOPS))
		}
		for _, r := range c.BenchRuns {
			br = append(br, fmt.Sprintf("%.0f", r.IOPS))
		}
		fmt.Fprintf(&b, "IOPS by run, in order: fio %s; stratabench %s\n", strings.Join(fr, " "), strings.Join(br, " "))
	}
	row("", "fio "+c.Fio.Job, "stratabench disk")
	row("writes", fmt.Sprint(c.Fio.Writes), fmt.Sprint(c.Bench.Writes))
	row("time", fmt.Sprintf("%.2f s", c.Fio.Runtime.Seconds()), fmt.Sprintf("%.2f s", c.Bench.Elapsed.Seconds()))
	row("sync IOPS", fmt.Sprintf("%.0f", c.Fio.IOPS), fmt.Sprintf("%.0f", c.Bench.IOPS))
	if len(c.FioRuns) > 1 || len(c.BenchRuns) > 1 {
		row("spread", fmt.Sprintf("±%.0f%%", c.FioSpread*100), fmt.Sprintf("±%.0f%%", c.BenchSpread*100))
	}
	row("p50 fdatasync", fmtDur(c.Fio.Sync.P50), fmtDur(c.Bench.Sync.P50))
	row("p99 fdatasync", fmtDur(c.Fio.Sync.P99), fmtDur(c.Bench.Sync.P99))
	row("p99.9 fdatasync", fmtDur(c.Fio.Sync.P999), fmtDur(c.Bench.Sync.P999))
	row("max fdatasync", fmtDur(c.Fio.Sync.Max), fmtDur(c.Bench.Sync.Max))
	med := ""
	if len(c.FioRuns) > 1 || len(c.BenchRuns) > 1 {
		med = " (medians)"
	}
	fmt.Fprintf(&b, "IOPS ratio stratabench/fio%s: %.3f (%+.1f%%): %s\n", med, c.Ratio, (c.Ratio-1)*100, c.Verdict)
	return b.String()
}

// Check verifies, for `make test`, what a run of each tool must satisfy
// whatever the disk's speed: both measured the same workload (block size),
// every figure is positive, and the figures are in the units they claim:
// IOPS are writes per second of the run's time, and the fdatasync
// latencies (nanoseconds) of all writes fit in that time. It compares no
// speeds: on a shared disk two runs of one tool differ by 50% and more,
// which is noise, not a defect (make disk-check compares).
func Check(f *FioResult, b *diskprobe.Result) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("disk: "+format, a...)) }
	if f.BlockSize <= 0 {
		bad("fio: no block size (bs) in the job options")
	} else if f.BlockSize != b.BlockSize {
		bad("fio wrote %d-byte blocks, stratabench %d: not the same workload", f.BlockSize, b.BlockSize)
	}
	side := func(name string, writes int64, elapsed time.Duration, iops float64, sync diskprobe.Latency, tick time.Duration) {
		if writes <= 0 || elapsed <= 0 || iops <= 0 {
			bad("%s: writes %d, time %v, IOPS %.3f: want all positive", name, writes, elapsed, iops)
			return
		}
		// IOPS is writes per second; the time may be rounded to tick.
		lo := float64(writes) / (elapsed + tick).Seconds()
		hi := float64(writes) / max(elapsed-tick, tick/2).Seconds()
		if iops < lo*0.95 || iops > hi*1.05 {
			bad("%s: %.1f IOPS for %d writes in %v: not writes per second", name, iops, writes, elapsed)
		}
		if sync.Min <= 0 || sync.P50 <= 0 || sync.P99 <= 0 || sync.Max <= 0 || sync.Mean <= 0 {
			bad("%s: fdatasync latencies %+v: want all positive", name, sync)
			return
		}
		// fio's percentiles are histogram buckets (about 1.6% wide), so
		// they are compared with each other only, not with min and max.
		if sync.P50 > sync.P99 || sync.Min > sync.Max || sync.Mean < sync.Min || sync.Mean > sync.Max {
			bad("%s: fdatasync latencies out of order (min %v, p50 %v, p99 %v, max %v)", name, sync.Min, sync.P50, sync.P99, sync.Max)
		}
		// Every write's fdatasync happened within the run.
		if sum := time.Duration(writes) * sync.Mean; float64(sum) > float64(elapsed+tick)*1.05 {
			bad("%s: %d fdatasyncs of %v on average take %v, longer than the run (%v): latencies not in nanoseconds", name, writes, sync.Mean, sum, elapsed)
		}
	}
	side("fio", f.Writes, f.Runtime, f.IOPS, f.Sync, time.Millisecond) // fio reports its runtime in ms
	side("stratabench", int64(b.Writes), b.Elapsed, b.IOPS, b.Sync, 0)
	return errors.Join(errs...)
}

// fmtDur is the latency format of the summaries.
func fmtDur(d time.Duration) string { return diskprobe.FormatDuration(d) }
