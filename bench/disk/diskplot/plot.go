// Package diskplot draws stratabench disk's fdatasync latency histogram
// with gonum.org/v1/plot, as PNG, SVG or an HTML page. It is apart from
// package diskprobe so that the server, which runs the probe, does not link
// the plotting library.
package diskplot

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/strata-db/strata/bench/disk"
	"github.com/strata-db/strata/diskprobe"
)

// Format returns the picture format for a --plot file name: "png",
// "svg" or "html", or an error for any other extension.
func Format(name string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(name)); ext {
	case ".png", ".svg", ".html", ".htm":
		if ext == ".htm" {
			return "html", nil
		}
		return ext[1:], nil
	default:
		return "", fmt.Errorf("plot file %q: unsupported extension %q (use .png, .svg or .html)", name, ext)
	}
}

// bucketsPerDecade is the histogram resolution on its log-scale axis.
const bucketsPerDecade = 10

// histogram bins sync latencies, in milliseconds, into log-spaced bins.
func histogram(d []time.Duration) []plotter.HistogramBin {
	if len(d) == 0 {
		return nil
	}
	ms := func(v time.Duration) float64 { return math.Max(float64(v), 1) / float64(time.Millisecond) }
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range d {
		lo, hi = math.Min(lo, ms(v)), math.Max(hi, ms(v))
	}
	first := int(math.Floor(math.Log10(lo) * bucketsPerDecade))
	last := int(math.Floor(math.Log10(hi)*bucketsPerDecade)) + 1
	edge := func(k int) float64 { return math.Pow(10, float64(k)/bucketsPerDecade) }
	bins := make([]plotter.HistogramBin, last-first)
	for i := range bins {
		bins[i] = plotter.HistogramBin{Min: edge(first + i), Max: edge(first + i + 1)}
	}
	for _, v := range d {
		i := int(math.Floor(math.Log10(ms(v))*bucketsPerDecade)) - first
		i = max(0, min(i, len(bins)-1))
		bins[i].Weight++
	}
	return bins
}

// newPlot draws the fdatasync latency histogram with the percentiles and
// etcd's 10 ms limit marked.
func newPlot(r *diskprobe.Result) (*plot.Plot, error) {
	bins := histogram(r.Syncs)
	if len(bins) == 0 {
		return nil, fmt.Errorf("plot: no samples")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("fdatasync latency, %d sequential %d-byte writes: %.0f IOPS, verdict %s",
		r.Writes, r.BlockSize, r.IOPS, r.Verdict.Grade)
	p.X.Label.Text = "fdatasync latency (ms, log scale)"
	p.Y.Label.Text = "writes (log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = logTicks125{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())

	h := &plotter.Histogram{Bins: bins, FillColor: color.RGBA{R: 70, G: 130, B: 180, A: 255}, LogY: true}
	h.LineStyle.Width = vg.Points(0.5)
	h.LineStyle.Color = color.RGBA{R: 30, G: 60, B: 90, A: 255}
	p.Add(h)

	var ymax float64
	for _, b := range bins {
		ymax = math.Max(ymax, b.Weight)
	}
	// The marker lines stop at twice the tallest bar; the axis goes on to
	// leave the legend room above them.
	ymin, ytop := 0.5, ymax*2
	axisTop := ymax * 40
	ms := func(d time.Duration) float64 { return math.Max(float64(d), 1) / float64(time.Millisecond) }
	marks := []struct {
		name  string
		at    time.Duration
		color color.Color
		dash  bool
	}{
		{"p50 " + diskprobe.FormatDuration(r.Sync.P50), r.Sync.P50, color.RGBA{G: 140, A: 255}, false},
		{"p99 " + diskprobe.FormatDuration(r.Sync.P99), r.Sync.P99, color.RGBA{R: 230, G: 140, A: 255}, false},
		{"p99.9 " + diskprobe.FormatDuration(r.Sync.P999), r.Sync.P999, color.RGBA{R: 150, B: 150, A: 255}, false},
		{"etcd limit for p99: 10 ms", diskprobe.MaxP99, color.RGBA{R: 220, A: 255}, true},
	}
	for _, m := range marks {
		l, err := plotter.NewLine(plotter.XYs{{X: ms(m.at), Y: ymin}, {X: ms(m.at), Y: ytop}})
		if err != nil {
			return nil, err
		}
		l.Color = m.color
		l.Width = vg.Points(1.5)
		if m.dash {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(m.name, l)
	}
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.XOffs = -vg.Points(10)
	p.Legend.YOffs = -vg.Points(10)
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Y.Min, p.Y.Max = ymin, axisTop
	p.X.Max = math.Max(p.X.Max, ms(diskprobe.MaxP99)*1.5)
	p.X.Min = math.Min(p.X.Min, bins[0].Min)
	return p, nil
}

// logTicks125 labels a log axis at 1, 2 and 5 times powers of ten, with
// unlabelled minor ticks at the other integers.
type logTicks125 struct{}

func (logTicks125) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	var ts []plot.Tick
	for e := int(math.Floor(math.Log10(lo))); e <= int(math.Ceil(math.Log10(hi))); e++ {
		for m := 1; m <= 9; m++ {
			v := float64(m) * math.Pow(10, float64(e))
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// Write writes the fdatasync latency histogram to name, as PNG, SVG or
// a self-contained HTML page (SVG plus the summary), by its extension.
func Write(r *diskprobe.Result, name string) error {
	format, err := Format(name)
	if err != nil {
		return err
	}
	p, err := newPlot(r)
	if err != nil {
		return err
	}
	var img bytes.Buffer
	imgFormat := format
	if format == "html" {
		imgFormat = "svg"
	}
	wt, err := p.WriterTo(9*vg.Inch, 5*vg.Inch, imgFormat)
	if err != nil {
		return err
	}
	if _, err := wt.WriteTo(&img); err != nil {
		return err
	}
	out := img.Bytes()
	if format == "html" {
		var page bytes.Buffer
		if err := htmlPage.Execute(&page, htmlData{R: r, SVG: template.HTML(svgBody(out)), Summary: disk.Summary(r)}); err != nil {
			return err
		}
		out = page.Bytes()
	}
	if err := os.WriteFile(name, out, 0o644); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

// svgBody drops the XML prolog so the SVG can be inlined in HTML.
func svgBody(svg []byte) string {
	s := string(svg)
	if i := strings.Index(s, "<svg"); i >= 0 {
		s = s[i:]
	}
	return s
}

type htmlData struct {
	R       *diskprobe.Result
	SVG     template.HTML
	Summary string
}

var htmlPage = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>stratabench disk: {{.R.Dir}}</title>
<style>body{font-family:sans-serif;margin:2em}pre{background:#f4f4f4;padding:1em}</style></head>
<body>
<h1>fdatasync latency: {{.R.Dir}}</h1>
{{.SVG}}
<pre>{{.Summary}}</pre>
</body>
</html>
`))
