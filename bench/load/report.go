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

// Percentiles are the latency percentiles a summary reports, those of
// etcd's benchmark; see percentiles for which ones a sample can give.
var Percentiles = []float64{10, 25, 50, 75, 90, 95, 99, 99.9}

// histBuckets is the number of response-time histogram buckets: etcd's
// benchmark divides fastest..slowest into 10 equal steps and prints the 11
// bounds.
const histBuckets = 11

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
	// Pcts holds the latency at each of Percentiles; 0 for those the
	// sample is too small to give (see percentiles).
	Pcts []time.Duration
	// Hist is the response-time histogram.
	Hist []Bucket
	// Parts are the sub-reports of a workload with several phases
	// (txn-mixed reads and writes, watch creation and events, ...).
	Parts []*Summary

	avg, std float64 // Average and Stddev in seconds, as printed
}

// Bucket is one histogram bar: Count latencies above the previous bucket's
// bound and at most Upper.
type Bucket struct {
	Upper time.Duration
	Count int

	upper float64 // Upper in seconds, as printed
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
	// In seconds as float64, summed in the order recorded, as etcd's
	// benchmark computes them, so --precise prints the same digits.
	var sum float64
	for _, l := range lats {
		sum += l.Seconds()
	}
	s.avg = sum / float64(len(lats))
	for _, l := range lats {
		d := l.Seconds() - s.avg
		s.std += d * d
	}
	s.std = math.Sqrt(s.std / float64(len(lats)))
	s.Average = secsToDuration(s.avg)
	s.Stddev = secsToDuration(s.std)
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	s.Fastest, s.Slowest = lats[0], lats[len(lats)-1]
	s.Pcts = percentiles(lats)
	s.Hist = histogram(lats)
	return s
}

func secsToDuration(v float64) time.Duration { return time.Duration(math.Round(v * 1e9)) }

// percentiles returns the latency at each of Percentiles in sorted, by
// etcd's benchmark's rule (its report is what users compare against):
// going up the sorted sample, each percentile p takes the first latency
// after the previous percentile's whose 0-based rank i has
// i*100/n >= p. A sample too small to reach a percentile leaves it, and
// all above it, zero (not reported): 200 requests give no p99.9.
func percentiles(sorted []time.Duration) []time.Duration {
	pcts := make([]time.Duration, len(Percentiles))
	n := len(sorted)
	i := 0
	for k, p := range Percentiles {
		for i < n && float64(i)*100/float64(n) < p {
			i++
		}
		if i >= n {
			break
		}
		pcts[k] = sorted[i]
		i++
	}
	return pcts
}

// histogram buckets sorted latencies as etcd's benchmark does: bounds at
// fastest + k/10 of the way to slowest for k = 0..9, then slowest; each
// latency counts in the first bucket whose bound it does not exceed (so
// the first bucket holds the latencies equal to the fastest). Bounds are
// float64 seconds, computed as etcd computes them, so a latency on a
// bound lands in the same bucket.
func histogram(sorted []time.Duration) []Bucket {
	lo, hi := sorted[0].Seconds(), sorted[len(sorted)-1].Seconds()
	step := (hi - lo) / float64(histBuckets-1)
	b := make([]Bucket, histBuckets)
	for k := range b {
		b[k].upper = lo + step*float64(k)
	}
	b[histBuckets-1].upper = hi
	for k := range b {
		b[k].Upper = secsToDuration(b[k].upper)
	}
	k := 0
	for _, l := range sorted {
		for l.Seconds() > b[k].upper {
			k++
		}
		b[k].Count++
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

// writeOne prints one summary in etcd's benchmark layout, line for line:
// the Summary block, the response time histogram and the latency
// distribution when any request succeeded, then the error distribution
// when any failed.
func (f Format) writeOne(w io.Writer, s *Summary) {
	if s.Requests > 0 {
		fmt.Fprintf(w, "\nSummary:\n")
		fmt.Fprintf(w, "  Total:\t%s.\n", f.secs(s.Total))
		fmt.Fprintf(w, "  Slowest:\t%s.\n", f.secs(s.Slowest))
		fmt.Fprintf(w, "  Fastest:\t%s.\n", f.secs(s.Fastest))
		fmt.Fprintf(w, "  Average:\t%s.\n", f.num(s.avg)+" secs")
		fmt.Fprintf(w, "  Stddev:\t%s.\n", f.num(s.std)+" secs")
		fmt.Fprintf(w, "  Requests/sec:\t%s\n", f.num(s.RPS))
		max := 0
		for _, b := range s.Hist {
			if b.Count > max {
				max = b.Count
			}
		}
		fmt.Fprintf(w, "\nResponse time histogram:\n")
		for _, b := range s.Hist {
			bar := 0
			if max > 0 {
				bar = b.Count * 40 / max
			}
			fmt.Fprintf(w, "  %s [%d]\t|%s\n", f.num(b.upper), b.Count, strings.Repeat("∎", bar))
		}
		fmt.Fprintf(w, "\nLatency distribution:\n")
		for i, p := range Percentiles {
			if s.Pcts[i] > 0 {
				fmt.Fprintf(w, "  %v%% in %s.\n", p, f.secs(s.Pcts[i]))
			}
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
	Percentiles map[string]float64 `json:"percentiles_sec"` // only those reported
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
		if i < len(s.Pcts) && s.Pcts[i] > 0 { // not reported: too few requests
			j.Percentiles[PercentileKey(p)] = s.Pcts[i].Seconds()
		}
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
