package disk

import (
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/diskprobe"
)

func TestSummaryText(t *testing.T) {
	r := &diskprobe.Result{Dir: "/d", BlockSize: 2300, Writes: 10, IOPS: 123, Elapsed: time.Second,
		Sync: diskprobe.Latency{P99: 3 * time.Millisecond}, Verdict: diskprobe.Judge(3*time.Millisecond, 123)}
	s := Summary(r)
	for _, want := range []string{"/d", "Sync IOPS:   123", "3.00 ms", "ADEQUATE"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}
