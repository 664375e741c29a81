package disk

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/diskprobe"
)

func TestParseFio(t *testing.T) {
	data, err := os.ReadFile("testdata/fio-etcd-wal.json")
	if err != nil {
		t.Fatal(err)
	}
	// fio may print warnings before the document.
	f, err := ParseFio(append([]byte("fio: some warning\n"), data...))
	if err != nil {
		t.Fatal(err)
	}
	want := FioResult{Job: "etcd-wal", Version: "fio-3.33", BlockSize: 2300, Writes: 924, Runtime: 2002 * time.Millisecond, IOPS: 461.538462,
		Sync: diskprobe.Latency{Min: 270664, Max: 34745045, Mean: 2153867, P50: 1138688, P90: 4227072, P99: 13303808, P999: 34865152}}
	if *f != want {
		t.Fatalf("got  %+v\nwant %+v", *f, want)
	}
	for name, in := range map[string]string{
		"not json": "hello",
		"no jobs":  `{"jobs": []}`,
		"no sync":  `{"jobs": [{"jobname": "x", "write": {"total_ios": 5, "iops": 3}}]}`,
		"failed":   `{"jobs": [{"jobname": "x", "error": 5}]}`,
		"no io":    `{"jobs": [{"jobname": "x", "sync": {"lat_ns": {"N": 3}}}]}`,
		"bad bs":   `{"jobs": [{"jobname": "x", "job options": {"bs": "4k-8k"}, "write": {"total_ios": 5, "iops": 3}, "sync": {"lat_ns": {"N": 3}}}]}`,
	} {
		if _, err := ParseFio([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCompare(t *testing.T) {
	f := &FioResult{Job: "etcd-wal", IOPS: 1000}
	for _, c := range []struct {
		iops  float64
		agree bool
	}{{1000, true}, {1250, true}, {750, true}, {1251, false}, {749, false}} {
		got := Compare([]*FioResult{f}, []*diskprobe.Result{{IOPS: c.iops}}, 0.25)
		if got.Agree != c.agree {
			t.Errorf("IOPS %v vs 1000: agree %v", c.iops, got.Agree)
		}
	}
	if Compare([]*FioResult{{}}, []*diskprobe.Result{{IOPS: 5}}, 0.25).Agree {
		t.Error("zero fio IOPS agreed")
	}
	s := Compare([]*FioResult{f}, []*diskprobe.Result{{IOPS: 800}}, 0.25).String()
	if !strings.Contains(s, "0.800") || !strings.Contains(s, "agree, within ±25%") {
		t.Errorf("%s", s)
	}
}

func TestCompareMedians(t *testing.T) {
	// One burst hits one run of each side; the medians ignore it.
	fio := []*FioResult{
		{Writes: 1000, Runtime: time.Second, IOPS: 1000, Sync: diskprobe.Latency{P99: 4 * time.Millisecond, Max: 9 * time.Millisecond}},
		{Writes: 3000, Runtime: time.Second, IOPS: 3000, Sync: diskprobe.Latency{P99: 2 * time.Millisecond, Max: 5 * time.Millisecond}},
		{Writes: 1100, Runtime: time.Second, IOPS: 1100, Sync: diskprobe.Latency{P99: 3 * time.Millisecond, Max: 6 * time.Millisecond}},
	}
	bench := []*diskprobe.Result{
		{Writes: 1050, Elapsed: time.Second, IOPS: 1050},
		{Writes: 1150, Elapsed: time.Second, IOPS: 1150},
		{Writes: 400, Elapsed: time.Second, IOPS: 400},
	}
	c := Compare(fio, bench, 0.25)
	if c.Fio.IOPS != 1100 || c.Bench.IOPS != 1050 || !c.Agree || c.Noisy {
		t.Fatalf("%+v", c)
	}
	if c.Fio.Writes != 5100 || c.Bench.Writes != 2600 {
		t.Errorf("totals: fio %d, stratabench %d writes", c.Fio.Writes, c.Bench.Writes)
	}
	if c.Fio.Sync.P99 != 3*time.Millisecond || c.Fio.Sync.Max != 6*time.Millisecond {
		t.Fatalf("latencies %+v", c.Fio.Sync)
	}
	// fio: (3000-1000)/2/1100; stratabench: (1150-400)/2/1050.
	if math.Abs(c.FioSpread-0.909) > 0.001 || math.Abs(c.BenchSpread-0.357) > 0.001 {
		t.Errorf("spreads %.3f %.3f", c.FioSpread, c.BenchSpread)
	}
	s := c.String()
	for _, want := range []string{"IOPS by run, in order: fio 1000 3000 1100; stratabench 1050 1150 400", "±91%", "±36%", "(medians): 0.955", "agree, within ±25% (runs: fio 1000 to 3000, stratabench 400 to 1150 IOPS; run-to-run spread: fio ±91%, stratabench ±36% over 3+3 runs)"} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in\n%s", want, s)
		}
	}
}

// TestCompareVerdicts: a difference beyond the tolerance is a
// disagreement only when every run of one tool beat every run of the
// other; when the runs overlap the disk's noise can explain it (the
// failing make test runs had ratios 1.46 to 1.68, the next passing ones
// 0.62 and 0.90).
func TestCompareVerdicts(t *testing.T) {
	runs := func(iops ...float64) ([]*FioResult, []*diskprobe.Result) {
		var f []*FioResult
		var b []*diskprobe.Result
		for i, v := range iops {
			if i%2 == 0 {
				f = append(f, &FioResult{IOPS: v})
			} else {
				b = append(b, &diskprobe.Result{IOPS: v})
			}
		}
		return f, b
	}
	for _, c := range []struct {
		name         string
		iops         []float64 // fio, stratabench, fio, stratabench, ...
		agree, noisy bool
		verdict      string
	}{
		{"steady, agree", []float64{500, 510, 505, 495, 498, 520}, true, false, "agree, within ±25%"},
		{"noisy disk", []float64{300, 560, 650, 600, 400, 450}, false, true, "INCONCLUSIVE: the medians differ by 40%, beyond ±25%, but the two tools' runs overlap, so the disk's noise can explain it (runs: fio 300 to 650, stratabench 450 to 600 IOPS; run-to-run spread: fio ±44%, stratabench ±13% over 3+3 runs); rerun on a quieter disk or with more ROUNDS"},
		{"steady, disagree", []float64{300, 480, 310, 500, 305, 490}, false, false, "DISAGREE, beyond ±25%: every stratabench run was faster than every run of the other tool (runs: fio 300 to 310, stratabench 480 to 500 IOPS; run-to-run spread: fio ±2%, stratabench ±2% over 3+3 runs)"},
		{"noisy, apart", []float64{381, 594, 193, 872, 460, 484}, false, false, "DISAGREE, beyond ±25%: every stratabench run was faster"},
		{"fio faster", []float64{900, 480, 950, 500, 920, 490}, false, false, "every fio run was faster than every run of the other tool"},
		{"one run each, apart", []float64{461, 738}, false, false, "DISAGREE"},
	} {
		f, b := runs(c.iops...)
		got := Compare(f, b, 0.25)
		if got.Agree != c.agree || got.Noisy != c.noisy || !strings.Contains(got.Verdict, c.verdict) {
			t.Errorf("%s: agree %v noisy %v, verdict %q; want %v %v %q", c.name, got.Agree, got.Noisy, got.Verdict, c.agree, c.noisy, c.verdict)
		}
	}
}

func TestCheck(t *testing.T) {
	data, err := os.ReadFile("testdata/fio-etcd-wal.json")
	if err != nil {
		t.Fatal(err)
	}
	good := func() (*FioResult, *diskprobe.Result) {
		f, err := ParseFio(data)
		if err != nil {
			t.Fatal(err)
		}
		b := &diskprobe.Result{BlockSize: 2300, Writes: 1400, Elapsed: 2 * time.Second, IOPS: 700,
			Sync: diskprobe.Latency{Min: 200 * time.Microsecond, Mean: 1300 * time.Microsecond, P50: time.Millisecond, P90: 2 * time.Millisecond, P99: 8 * time.Millisecond, Max: 30 * time.Millisecond}}
		return f, b
	}
	f, b := good()
	// 461 vs 700 IOPS (ratio 1.52, as in the failing runs): no concern of Check.
	if err := Check(f, b); err != nil {
		t.Fatalf("good results refused: %v", err)
	}
	for _, c := range []struct {
		name   string
		break_ func(f *FioResult, b *diskprobe.Result)
		want   string
	}{
		{"other block size", func(f *FioResult, b *diskprobe.Result) { b.BlockSize = 4096 }, "not the same workload"},
		{"no fio block size", func(f *FioResult, b *diskprobe.Result) { f.BlockSize = 0 }, "no block size"},
		{"no writes", func(f *FioResult, b *diskprobe.Result) { b.Writes, b.IOPS = 0, 0 }, "want all positive"},
		{"IOPS per ms", func(f *FioResult, b *diskprobe.Result) { b.IOPS /= 1000 }, "not writes per second"},
		{"fio IOPS per ms", func(f *FioResult, b *diskprobe.Result) { f.IOPS /= 1000 }, "fio: 0.5 IOPS for 924 writes in 2.002s: not writes per second"},
		{"zero latency", func(f *FioResult, b *diskprobe.Result) { b.Sync.P50 = 0 }, "want all positive"},
		{"latencies in µs taken as ns", func(f *FioResult, b *diskprobe.Result) { f.Sync.Mean *= 1000 }, "latencies not in nanoseconds"},
		{"unordered", func(f *FioResult, b *diskprobe.Result) { b.Sync.P50 = b.Sync.P99 * 2 }, "out of order"},
	} {
		f, b := good()
		c.break_(f, b)
		err := Check(f, b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"2300": 2300, "22m": 22 << 20, "4k": 4096, "1G": 1 << 30, "8KiB": 8192, "2MB": 2 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "12q", "99999999999g"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}
