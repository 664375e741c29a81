package disk

import (
	"fmt"
	"strings"

	"github.com/strata-db/strata/diskprobe"
	"github.com/strata-db/strata/progress"
)

// Summary is the readable report of a result: the figures, then the
// verdict with one line per finding.
func Summary(r *diskprobe.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Directory:   %s\n", r.Dir)
	fmt.Fprintf(&b, "Workload:    %d sequential writes of %d bytes (%s), each followed by fdatasync\n",
		r.Writes, r.BlockSize, progress.Bytes(r.Bytes))
	fmt.Fprintf(&b, "Total time:  %.2f s\n", r.Elapsed.Seconds())
	fmt.Fprintf(&b, "Sync IOPS:   %.0f\n", r.IOPS)
	fmt.Fprintf(&b, "\n%-11s %10s %10s %10s %10s %10s %10s\n", "latency", "min", "mean", "p50", "p99", "p99.9", "max")
	for _, row := range []struct {
		name string
		l    diskprobe.Latency
	}{{"fdatasync", r.Sync}, {"write", r.Write}} {
		fmt.Fprintf(&b, "%-11s %10s %10s %10s %10s %10s %10s\n", row.name,
			fmtDur(row.l.Min), fmtDur(row.l.Mean), fmtDur(row.l.P50), fmtDur(row.l.P99), fmtDur(row.l.P999), fmtDur(row.l.Max))
	}
	fmt.Fprintf(&b, "\nVerdict:     %s\n", strings.ToUpper(r.Verdict.Grade))
	for _, n := range r.Verdict.Notes {
		fmt.Fprintf(&b, "  - %s\n", n)
	}
	return b.String()
}
