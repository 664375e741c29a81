package harness

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Family is one metric family of a Prometheus text exposition: its name,
// its type (counter, gauge, histogram, summary, untyped) and its samples.
// A histogram's or summary's _bucket, _sum and _count lines belong to it.
type Family struct {
	Name    string
	Type    string
	Samples []Sample
}

// Sample is one line: the name as written (e.g. x_bucket for a
// histogram), its labels and its value.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// LabelNames is the sorted set of label names used by the family's
// samples, without the le and quantile labels that histograms and
// summaries add to their own lines.
func (f *Family) LabelNames() []string {
	seen := map[string]bool{}
	for _, s := range f.Samples {
		for k := range s.Labels {
			if k != "le" && k != "quantile" {
				seen[k] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Find returns the value of the sample named name whose labels include
// every pair in match, and whether there is exactly one such sample.
func (f *Family) Find(name string, match map[string]string) (float64, bool) {
	var v float64
	n := 0
	for _, s := range f.Samples {
		if s.Name != name {
			continue
		}
		ok := true
		for k, want := range match {
			if s.Labels[k] != want {
				ok = false
				break
			}
		}
		if ok {
			v = s.Value
			n++
		}
	}
	return v, n == 1
}

// ScrapeMetrics GETs url (a /metrics endpoint) and parses the answer.
func ScrapeMetrics(url string) (map[string]*Family, error) {
	cl := &http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("harness: GET %s: %s", url, resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// ParseMetrics parses the Prometheus text exposition format (version
// 0.0.4), which is what an etcd-compatible /metrics endpoint answers
// without content negotiation. Families are keyed by name. A sample line
// before any TYPE line of its family, or a malformed line, is an error
// naming the line.
func ParseMetrics(r io.Reader) (map[string]*Family, error) {
	fams := map[string]*Family{}
	var cur *Family
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			if len(f) != 4 {
				return nil, fmt.Errorf("harness: metrics line %d: bad TYPE line %q", ln, line)
			}
			cur = &Family{Name: f[2], Type: f[3]}
			fams[cur.Name] = cur
			continue
		case strings.HasPrefix(line, "#"):
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("harness: metrics line %d: %w", ln, err)
		}
		if cur == nil || !sampleOf(cur, s.Name) {
			return nil, fmt.Errorf("harness: metrics line %d: sample %s outside its family", ln, s.Name)
		}
		cur.Samples = append(cur.Samples, s)
	}
	return fams, sc.Err()
}

func sampleOf(f *Family, name string) bool {
	if name == f.Name {
		return true
	}
	if f.Type != "histogram" && f.Type != "summary" {
		return false
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if name == f.Name+suf {
			return true
		}
	}
	return false
}

// parseSample parses `name{l="v",...} value [timestamp]`.
func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, fmt.Errorf("bad sample %q", line)
	}
	s.Name, line = line[:i], line[i:]
	if line[0] == '{' {
		rest, err := parseLabels(line[1:], s.Labels)
		if err != nil {
			return s, fmt.Errorf("sample %s: %w", s.Name, err)
		}
		line = rest
	}
	f := strings.Fields(line)
	if len(f) < 1 || len(f) > 2 {
		return s, fmt.Errorf("sample %s: bad value %q", s.Name, line)
	}
	switch f[0] {
	case "+Inf":
		s.Value = math.Inf(1)
	case "-Inf":
		s.Value = math.Inf(-1)
	case "NaN":
		s.Value = math.NaN()
	default:
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return s, fmt.Errorf("sample %s: %w", s.Name, err)
		}
		s.Value = v
	}
	return s, nil
}

// parseLabels reads `l="v",...}` into m and returns what follows the
// closing brace. Values may hold \\, \" and \n escapes.
func parseLabels(in string, m map[string]string) (string, error) {
	for {
		in = strings.TrimLeft(in, " ,")
		if strings.HasPrefix(in, "}") {
			return in[1:], nil
		}
		eq := strings.IndexByte(in, '=')
		if eq <= 0 || len(in) < eq+2 || in[eq+1] != '"' {
			return "", fmt.Errorf("bad labels near %q", in)
		}
		name := strings.TrimSpace(in[:eq])
		in = in[eq+2:]
		var val strings.Builder
		closed := false
		for j := 0; j < len(in); j++ {
			c := in[j]
			if c == '\\' && j+1 < len(in) {
				j++
				switch in[j] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(in[j])
				}
				continue
			}
			if c == '"' {
				in = in[j+1:]
				closed = true
				break
			}
			val.WriteByte(c)
		}
		if !closed {
			return "", fmt.Errorf("unterminated label value for %s", name)
		}
		m[name] = val.String()
	}
}
