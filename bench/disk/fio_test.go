package disk

import (
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
	want := FioResult{Job: "etcd-wal", Version: "fio-3.33", Writes: 924, Runtime: 2002 * time.Millisecond, IOPS: 461.538462,
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

func TestComparePools(t *testing.T) {
	// A fast and a slow period hit one run of each side.
	fio := []*FioResult{
		{Writes: 3000, Runtime: time.Second, IOPS: 3000, Sync: diskprobe.Latency{P99: 2 * time.Millisecond, Max: 5 * time.Millisecond}},
		{Writes: 1000, Runtime: time.Second, IOPS: 1000, Sync: diskprobe.Latency{P99: 4 * time.Millisecond, Max: 9 * time.Millisecond}},
	}
	bench := []*diskprobe.Result{
		{Writes: 1100, Elapsed: time.Second, IOPS: 1100},
		{Writes: 2900, Elapsed: time.Second, IOPS: 2900},
	}
	c := Compare(fio, bench, 0.25)
	if c.Fio.IOPS != 2000 || c.Bench.IOPS != 2000 || c.Ratio != 1 || !c.Agree {
		t.Fatalf("%+v", c)
	}
	if c.Fio.Sync.P99 != 3*time.Millisecond || c.Fio.Sync.Max != 9*time.Millisecond {
		t.Fatalf("latencies %+v", c.Fio.Sync)
	}
	if s := c.String(); !strings.Contains(s, "3000 1000") || !strings.Contains(s, "1100 2900") {
		t.Errorf("no per-run IOPS:\n%s", s)
	}
}
