package load

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
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

func TestPercentileNearestRank(t *testing.T) {
	// 1..100 ms: the p-th percentile is p ms (nearest rank).
	var lats []time.Duration
	for i := 100; i >= 1; i-- {
		lats = append(lats, time.Duration(i)*time.Millisecond)
	}
	s := Summarize("x", lats, nil, time.Second)
	want := map[float64]time.Duration{10: 10, 25: 25, 50: 50, 75: 75, 90: 90, 95: 95, 99: 99, 99.9: 100}
	for i, p := range Percentiles {
		if got := s.Pcts[i]; got != want[p]*time.Millisecond {
			t.Errorf("p%v = %v, want %v", p, got, want[p]*time.Millisecond)
		}
	}
	// Small samples: every percentile is a sample, p99.9 the largest.
	s = Summarize("x", ms(3, 1, 2), nil, time.Second)
	if s.Pcts[0] != ms(1)[0] || s.Pcts[2] != ms(2)[0] || s.Pcts[len(s.Pcts)-1] != ms(3)[0] {
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
	total := 0
	prev := time.Duration(0)
	for i, b := range s.Hist {
		total += b.Count
		if b.Upper <= prev {
			t.Errorf("bucket %d bound %v not above %v", i, b.Upper, prev)
		}
		prev = b.Upper
	}
	if total != len(lats) {
		t.Errorf("histogram holds %d of %d", total, len(lats))
	}
	if last := s.Hist[histBuckets-1].Upper; last != s.Slowest {
		t.Errorf("last bound %v, want slowest %v", last, s.Slowest)
	}
	// Logarithmic: bounds grow by a constant factor, 1000^(1/10) here.
	r := float64(s.Hist[5].Upper) / float64(s.Hist[4].Upper)
	if math.Abs(r-math.Pow(1000, 0.1)) > 0.01 {
		t.Errorf("bucket ratio %v", r)
	}
	// The first bucket includes the fastest.
	if s.Hist[0].Count < 1 {
		t.Errorf("first bucket empty")
	}
	// All equal: one bucket.
	s = Summarize("x", ms(2, 2, 2), nil, time.Second)
	if len(s.Hist) != 1 || s.Hist[0].Count != 3 {
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
		"Average:\t0.0055 secs.", "Requests/sec:\t10.0000", "Response time histogram",
		"Latency distribution:", "50% in 0.0050 secs.", "99.9% in 0.0100 secs.",
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
	if p["p50"].(float64) != 0.005 || p["p99.9"].(float64) != 0.01 {
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
