package load

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func ms(v ...float64) []time.Duration {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x * float64(time.Millisecond))
	}
	return d
}

// TestTextMatchesEtcdBenchmark compares the text summary with the output
// of etcd's benchmark (its report package, go.etcd.io/etcd/pkg/v3 v3.6.8,
// fed the same latencies) kept in testdata, with its wall-clock Total and
// Requests/sec lines replaced by those of a 1 s run.
func TestTextMatchesEtcdBenchmark(t *testing.T) {
	for _, c := range []struct {
		golden  string
		lats    []time.Duration
		precise bool
	}{
		{"etcd-benchmark-20.txt", ns(602948, 810753, 1413473, 824533, 2601505, 1463902, 4103355, 1339203, 1498424, 2567330,
			940070, 2764932, 638224, 428291, 688109, 3240976, 1494926, 1219757, 781139, 3457755), false},
		// Four requests, two equal: each percentile takes a later sample
		// than the one before, and p75 and above are not reported.
		{"etcd-benchmark-4-precise.txt", ns(1500000, 250000, 4000000, 250000), true},
	} {
		want, err := os.ReadFile(filepath.Join("testdata", c.golden))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		Format{Precise: c.precise}.WriteText(&buf, Summarize("put", c.lats, nil, time.Second))
		if buf.String() != string(want) {
			t.Errorf("%s: got\n%s\nwant\n%s", c.golden, buf.String(), want)
		}
	}
}

func ns(v ...int64) []time.Duration {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x)
	}
	return d
}

func TestPercentilesAsEtcd(t *testing.T) {
	// 1..100 ms: etcd's rule takes the sample at 0-based rank p*n/100,
	// one above the nearest rank; p99.9 needs more than 100 samples.
	var lats []time.Duration
	for i := 100; i >= 1; i-- {
		lats = append(lats, time.Duration(i)*time.Millisecond)
	}
	s := Summarize("x", lats, nil, time.Second)
	want := map[float64]time.Duration{10: 11, 25: 26, 50: 51, 75: 76, 90: 91, 95: 96, 99: 100, 99.9: 0}
	for i, p := range Percentiles {
		if got := s.Pcts[i]; got != want[p]*time.Millisecond {
			t.Errorf("p%v = %v, want %v", p, got, want[p]*time.Millisecond)
		}
	}
	// Three samples: rank 0 is the 0th percentile, so p10 takes rank 1
	// and p25 rank 2; the rest are not reported.
	s = Summarize("x", ms(3, 1, 2), nil, time.Second)
	if s.Pcts[0] != ms(2)[0] || s.Pcts[1] != ms(3)[0] || s.Pcts[2] != 0 || s.Pcts[7] != 0 {
		t.Errorf("3 samples: percentiles %v", s.Pcts)
	}
}

func TestSummarizeStats(t *testing.T) {
	errs := map[string]int{"boom": 2}
	s := Summarize("put", ms(1, 2, 3, 4), errs, 2*time.Second)
	if s.Requests != 4 || s.Errors != 2 {
		t.Fatalf("requests %d errors %d", s.Requests, s.Errors)
	}
	if s.RPS != 2 {
		t.Errorf("rps %v, want 2 (successful requests / total)", s.RPS)
	}
	if s.Fastest != ms(1)[0] || s.Slowest != ms(4)[0] {
		t.Errorf("fastest %v slowest %v", s.Fastest, s.Slowest)
	}
	if s.Average != 2500*time.Microsecond {
		t.Errorf("average %v", s.Average)
	}
	// Population stddev of 1,2,3,4 is sqrt(1.25).
	want := time.Duration(math.Round(math.Sqrt(1.25) * float64(time.Millisecond)))
	if s.Stddev != want {
		t.Errorf("stddev %v, want %v", s.Stddev, want)
	}

	empty := Summarize("none", nil, map[string]int{"refused": 3}, time.Second)
	if empty.Requests != 0 || empty.Errors != 3 || empty.RPS != 0 || empty.Hist != nil {
		t.Errorf("all failed: %+v", empty)
	}
}

func TestHistogram(t *testing.T) {
	var lats []time.Duration
	for i := 1; i <= 1000; i++ {
		lats = append(lats, time.Duration(i)*time.Microsecond)
	}
	s := Summarize("x", lats, nil, time.Second)
	if len(s.Hist) != histBuckets {
		t.Fatalf("%d buckets", len(s.Hist))
	}
	// Linear, as etcd's: fastest, then tenths of the way to the slowest.
	for k, want := range []int{1, 99, 100, 100, 100, 100, 100, 100, 100, 100, 100} {
		if b := s.Hist[k]; b.Count != want || b.Upper != time.Microsecond+time.Duration(k)*999*time.Microsecond/10 {
			t.Errorf("bucket %d: %+v, want %d up to %v", k, b, want, time.Microsecond+time.Duration(k)*999*time.Microsecond/10)
		}
	}
	// All equal: every latency in the first of 11 equal bounds.
	s = Summarize("x", ms(2, 2, 2), nil, time.Second)
	if len(s.Hist) != histBuckets || s.Hist[0].Count != 3 || s.Hist[10].Upper != 2*time.Millisecond {
		t.Errorf("equal latencies: %+v", s.Hist)
	}
}

func TestRecorderMergesShards(t *testing.T) {
	rec := NewRecorder("put", nil)
	a, b := rec.Shard(), rec.Shard()
	a.Observe(time.Millisecond, nil)
	b.Observe(3*time.Millisecond, nil)
	b.Observe(0, errors.New("rpc error: code = Unavailable desc = etcdserver: leader changed"))
	a.Observe(0, errors.New("rpc error: code = Unavailable desc = etcdserver: leader changed"))
	start := time.Now()
	rec.SetInterval(start, start.Add(time.Second))
	s := rec.Summary()
	if s.Requests != 2 || s.Errors != 2 || s.ErrorDist["etcdserver: leader changed"] != 2 {
		t.Fatalf("%+v", s)
	}
	if s.Average != 2*time.Millisecond {
		t.Errorf("average %v", s.Average)
	}
}

func TestTextAndJSON(t *testing.T) {
	s := Summarize("range", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), map[string]int{"x": 1}, time.Second)
	var buf bytes.Buffer
	Format{}.WriteText(&buf, s)
	out := buf.String()
	for _, want := range []string{
		"Summary:", "Total:\t1.0000 secs.", "Slowest:\t0.0100 secs.", "Fastest:\t0.0010 secs.",
		"Average:\t0.0055 secs.", "Requests/sec:\t10.0000", "\nResponse time histogram:\n",
		"Latency distribution:", "50% in 0.0060 secs.", "90% in 0.0100 secs.",
		"Error distribution:", "[1]\tx",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	buf.Reset()
	if err := WriteJSON(&buf, s); err != nil {
		t.Fatal(err)
	}
	if strings.Count(buf.String(), "\n") != 1 {
		t.Errorf("JSON is not one line: %q", buf.String())
	}
	var j map[string]any
	if err := json.Unmarshal(buf.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	if j["requests_per_sec"].(float64) != 10 || j["requests"].(float64) != 10 || j["errors"].(float64) != 1 {
		t.Errorf("json %v", j)
	}
	p := j["percentiles_sec"].(map[string]any)
	if _, ok := p["p95"]; p["p50"].(float64) != 0.006 || p["p90"].(float64) != 0.01 || ok {
		t.Errorf("percentiles %v", p)
	}

	// A workload with parts prints every part, then the overall figures.
	top := *s
	top.Name = "txn-mixed"
	top.Parts = []*Summary{{Name: "txn-mixed-read"}, {Name: "txn-mixed-write"}}
	buf.Reset()
	Format{Precise: true}.WriteText(&buf, &top)
	out = buf.String()
	if !strings.Contains(out, "txn-mixed-read:") || !strings.Contains(out, "txn-mixed (overall):") || !strings.Contains(out, "Requests/sec:\t10\n") {
		t.Errorf("parts output:\n%s", out)
	}
}
