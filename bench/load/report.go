package load

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Percentiles are the latency percentiles every summary reports.
var Percentiles = []float64{10, 25, 50, 75, 90, 95, 99, 99.9}

// histBuckets is the number of response-time histogram buckets.
const histBuckets = 10

// Recorder collects the outcome of the requests of one report (one phase of
// a workload). Each worker goroutine takes its own Shard, so recording needs
// no lock; Summary merges the shards once the workers are done.
type Recorder struct {
	name  string
	done  *atomic.Int64 // shared progress counter, may be nil
	mu    sync.Mutex
	parts []*Shard
	start time.Time
	end   time.Time
}

// NewRecorder makes a recorder; every observation also advances done when
// it is not nil (the progress bar reads it).
func NewRecorder(name string, done *atomic.Int64) *Recorder {
	return &Recorder{name: name, done: done}
}

// Shard is one goroutine's share of a Recorder. It is not safe for
// concurrent use.
type Shard struct {
	done *atomic.Int64
	lats []time.Duration
	errs map[string]int
}

// Shard returns a new shard of r for one goroutine.
func (r *Recorder) Shard() *Shard {
	s := &Shard{done: r.done}
	r.mu.Lock()
	r.parts = append(r.parts, s)
	r.mu.Unlock()
	return s
}

// Observe records one request: its latency when err is nil, else its error.
func (s *Shard) Observe(lat time.Duration, err error) {
	if err != nil {
		if s.errs == nil {
			s.errs = map[string]int{}
		}
		s.errs[errText(err)]++
	} else {
		s.lats = append(s.lats, lat)
	}
	if s.done != nil {
		s.done.Add(1)
	}
}

// SetInterval sets the measured interval: requests per second are the
// successful requests over end-start.
func (r *Recorder) SetInterval(start, end time.Time) { r.start, r.end = start, end }

// Summary merges the shards into a summary.
func (r *Recorder) Summary() *Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.parts {
		n += len(s.lats)
	}
	lats := make([]time.Duration, 0, n)
	errs := map[string]int{}
	for _, s := range r.parts {
		lats = append(lats, s.lats...)
		for k, v := range s.errs {
			errs[k] += v
		}
	}
	return Summarize(r.name, lats, errs, r.end.Sub(r.start))
}

// errText shortens gRPC errors to their message, so equal failures group.
func errText(err error) string {
	s := err.Error()
	if i := strings.Index(s, "desc = "); i >= 0 && strings.HasPrefix(s, "rpc error:") {
		s = s[i+len("desc = "):]
	}
	return s
}

// Summary is the statistics of one report.
type Summary struct {
	Name      string
	Requests  int // successful requests
	Errors    int
	ErrorDist map[string]int
	Total     time.Duration // wall time of the measured interval
	RPS       float64       // successful requests per second of Total
	Fastest   time.Duration
	Slowest   time.Duration
	Average   time.Duration
	Stddev    time.Duration
	// Pcts holds the latency at each of Percentiles.
	Pcts []time.Duration
	// Hist is the response-time histogram.
	Hist []Bucket
	// Parts are the sub-reports of a workload with several phases
	// (txn-mixed reads and writes, watch creation and events, ...).
	Parts []*Summary
}

// Bucket is one histogram bar: Count latencies above the previous bucket's
// bound and at most Upper.
type Bucket struct {
	Upper time.Duration
	Count int
}

// Summarize computes a summary from raw latencies (reordered in place),
// the error counts and the wall time of the run.
func Summarize(name string, lats []time.Duration, errs map[string]int, total time.Duration) *Summary {
	s := &Summary{Name: name, Requests: len(lats), ErrorDist: errs, Total: total}
	if s.ErrorDist == nil {
		s.ErrorDist = map[string]int{}
	}
	for _, v := range s.ErrorDist {
		s.Errors += v
	}
	if total > 0 {
		s.RPS = float64(len(lats)) / total.Seconds()
	}
	if len(lats) == 0 {
		return s
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	s.Fastest, s.Slowest = lats[0], lats[len(lats)-1]
	var sum float64
	for _, l := range lats {
		sum += float64(l)
	}
	mean := sum / float64(len(lats))
	var sq float64
	for _, l := range lats {
		d := float64(l) - mean
		sq += d * d
	}
	s.Average = time.Duration(math.Round(mean))
	s.Stddev = time.Duration(math.Round(math.Sqrt(sq / float64(len(lats)))))
	s.Pcts = make([]time.Duration, len(Percentiles))
	for i, p := range Percentiles {
		s.Pcts[i] = percentile(lats, p)
	}
	s.Hist = histogram(lats)
	return s
}

// percentile is the nearest-rank percentile of sorted: the smallest value
// with at least p percent of the values at or below it.
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	if rank < 1 {
		rank = 1
	}
	if rank > n {
		rank = n
	}
	return sorted[rank-1]
}

// histogram buckets sorted latencies between the fastest and the slowest on
// a logarithmic scale, since latency tails are long: with linear buckets
// nearly every request lands in the first one.
func histogram(sorted []time.Duration) []Bucket {
	lo, hi := sorted[0], sorted[len(sorted)-1]
	if lo == hi {
		return []Bucket{{Upper: hi, Count: len(sorted)}}
	}
	flo := float64(lo)
	if flo < 1 {
		flo = 1
	}
	ratio := float64(hi) / flo
	b := make([]Bucket, histBuckets)
	for i := range b {
		b[i].Upper = time.Duration(math.Round(flo * math.Pow(ratio, float64(i+1)/histBuckets)))
	}
	b[histBuckets-1].Upper = hi
	i := 0
	for _, l := range sorted {
		for l > b[i].Upper {
			i++
		}
		b[i].Count++
	}
	return b
}

// Format says how durations are printed: etcd's benchmark prints seconds
// with four decimals, or every digit with --precise.
type Format struct{ Precise bool }

func (f Format) num(v float64) string {
	if f.Precise {
		return fmt.Sprintf("%g", v)
	}
	return fmt.Sprintf("%4.4f", v)
}

func (f Format) secs(d time.Duration) string { return f.num(d.Seconds()) + " secs" }

// WriteText prints s in the layout of etcd's benchmark tool (the
// "Requests/sec:" line parses the same way), followed by its parts.
func (f Format) WriteText(w io.Writer, s *Summary) {
	if len(s.Parts) > 0 {
		for _, p := range s.Parts {
			fmt.Fprintf(w, "\n%s:\n", p.Name)
			f.writeOne(w, p)
		}
		if !partsCover(s) {
			fmt.Fprintf(w, "\n%s (overall):\n", s.Name)
			f.writeOne(w, s)
		}
		return
	}
	f.writeOne(w, s)
}

// partsCover reports whether s is identical to one of its parts, so
// printing it again would repeat that part.
func partsCover(s *Summary) bool {
	for _, p := range s.Parts {
		if p.Name == s.Name {
			return true
		}
	}
	return false
}

func (f Format) writeOne(w io.Writer, s *Summary) {
	fmt.Fprintf(w, "\nSummary:\n")
	fmt.Fprintf(w, "  Total:\t%s.\n", f.secs(s.Total))
	if s.Requests > 0 {
		fmt.Fprintf(w, "  Slowest:\t%s.\n", f.secs(s.Slowest))
		fmt.Fprintf(w, "  Fastest:\t%s.\n", f.secs(s.Fastest))
		fmt.Fprintf(w, "  Average:\t%s.\n", f.secs(s.Average))
		fmt.Fprintf(w, "  Stddev:\t%s.\n", f.secs(s.Stddev))
	}
	fmt.Fprintf(w, "  Requests/sec:\t%s\n", f.num(s.RPS))
	fmt.Fprintf(w, "  Requests:\t%d ok, %d failed\n", s.Requests, s.Errors)
	if s.Requests > 0 {
		max := 0
		for _, b := range s.Hist {
			if b.Count > max {
				max = b.Count
			}
		}
		fmt.Fprintf(w, "\nResponse time histogram (upper bound [count]):\n")
		for _, b := range s.Hist {
			bar := 0
			if max > 0 {
				bar = b.Count * 40 / max
			}
			fmt.Fprintf(w, "  %s [%d]\t|%s\n", f.num(b.Upper.Seconds()), b.Count, strings.Repeat("∎", bar))
		}
		fmt.Fprintf(w, "\nLatency distribution:\n")
		for i, p := range Percentiles {
			fmt.Fprintf(w, "  %v%% in %s.\n", p, f.secs(s.Pcts[i]))
		}
	}
	if len(s.ErrorDist) > 0 {
		fmt.Fprintf(w, "\nError distribution:\n")
		keys := make([]string, 0, len(s.ErrorDist))
		for k := range s.ErrorDist {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if s.ErrorDist[keys[i]] != s.ErrorDist[keys[j]] {
				return s.ErrorDist[keys[i]] > s.ErrorDist[keys[j]]
			}
			return keys[i] < keys[j]
		})
		for _, k := range keys {
			fmt.Fprintf(w, "  [%d]\t%s\n", s.ErrorDist[k], k)
		}
	}
}

// JSONSummary is the -w json form of a Summary. Durations are seconds.
type JSONSummary struct {
	Name        string             `json:"name"`
	Requests    int                `json:"requests"`
	Errors      int                `json:"errors"`
	ErrorDist   map[string]int     `json:"error_distribution"`
	Total       float64            `json:"total_sec"`
	RPS         float64            `json:"requests_per_sec"`
	Fastest     float64            `json:"fastest_sec"`
	Slowest     float64            `json:"slowest_sec"`
	Average     float64            `json:"average_sec"`
	Stddev      float64            `json:"stddev_sec"`
	Percentiles map[string]float64 `json:"percentiles_sec"`
	Histogram   []JSONBucket       `json:"histogram"`
	Parts       []*JSONSummary     `json:"parts,omitempty"`
}

// JSONBucket is one histogram bucket in JSON.
type JSONBucket struct {
	Upper float64 `json:"upper_sec"`
	Count int     `json:"count"`
}

// PercentileKey names percentile p in JSON: "p50", "p99.9".
func PercentileKey(p float64) string { return "p" + fmt.Sprint(p) }

// JSON converts s (and its parts) to its JSON form.
func (s *Summary) JSON() *JSONSummary {
	j := &JSONSummary{
		Name: s.Name, Requests: s.Requests, Errors: s.Errors, ErrorDist: s.ErrorDist,
		Total: s.Total.Seconds(), RPS: s.RPS,
		Fastest: s.Fastest.Seconds(), Slowest: s.Slowest.Seconds(),
		Average: s.Average.Seconds(), Stddev: s.Stddev.Seconds(),
		Percentiles: map[string]float64{}, Histogram: []JSONBucket{},
	}
	for i, p := range Percentiles {
		v := 0.0
		if i < len(s.Pcts) {
			v = s.Pcts[i].Seconds()
		}
		j.Percentiles[PercentileKey(p)] = v
	}
	for _, b := range s.Hist {
		j.Histogram = append(j.Histogram, JSONBucket{Upper: b.Upper.Seconds(), Count: b.Count})
	}
	for _, p := range s.Parts {
		j.Parts = append(j.Parts, p.JSON())
	}
	return j
}

// WriteJSON prints s as one JSON object on a line.
func WriteJSON(w io.Writer, s *Summary) error {
	b, err := json.Marshal(s.JSON())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
