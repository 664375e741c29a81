package mvcc

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkWatchFanout measures put-to-receipt latency of live watchers
// (p50/p99, in ms) with 1,000 or 10,000 watchers over 10 or 100 streams,
// while one stream reads with a 2 ms pause per response. Puts are paced at
// one per millisecond; b.N puts are made, at least 1000, so run it with
// e.g. -benchtime=3000x. It also reports the p99 of the put (apply) call
// itself, which must not grow with the slow stream.
func BenchmarkWatchFanout(b *testing.B) {
	for _, streams := range []int{10, 100} {
		b.Run(fmt.Sprintf("watchers=%d", streams*100), func(b *testing.B) {
			c := scaleConfig{streams: streams, perStream: 100, keys: 100, prefill: 300,
				puts: max(b.N, 1000), putInterval: time.Millisecond, slowDelay: 2 * time.Millisecond}
			b.ResetTimer()
			res := runWatchScale(b, c)
			b.StopTimer()
			slices.Sort(res.latencies)
			slices.Sort(res.puts)
			b.ReportMetric(pct(res.latencies, 0.50), "p50-ms")
			b.ReportMetric(pct(res.latencies, 0.99), "p99-ms")
			b.ReportMetric(pct(res.puts, 0.99), "put-p99-ms")
			b.ReportMetric(float64(res.deliveries)/float64(c.puts), "deliveries/put")
			b.ReportMetric(pct(res.latencies, 0.90), "p90-ms")
			b.ReportMetric(float64(res.slowWatchersSeen), "peak-slow-watchers")
			b.ReportMetric(float64(res.slowDone-res.fastDone)/float64(time.Millisecond), "slow-stream-lag-ms")
		})
	}
}

func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(float64(len(sorted)-1)*p)]) / float64(time.Millisecond)
}
