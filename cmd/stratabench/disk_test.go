package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiskCommand(t *testing.T) {
	dir := t.TempDir()
	plot := filepath.Join(t.TempDir(), "h.png")
	var out, errb bytes.Buffer
	if rc := runDisk([]string{"--dir", dir, "--count", "25", "--plot", plot, "-w", "json"}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	var res struct {
		Writes int     `json:"writes"`
		IOPS   float64 `json:"iops"`
		Sync   struct {
			P99 int64 `json:"p99_ns"`
		} `json:"fdatasync"`
		Verdict struct{ Grade string } `json:"verdict"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if res.Writes != 25 || res.IOPS <= 0 || res.Sync.P99 <= 0 || res.Verdict.Grade == "" {
		t.Fatalf("%+v", res)
	}
	if !strings.Contains(errb.String(), "100%") {
		t.Errorf("no progress bar: %q", errb.String())
	}
	if st, err := os.Stat(plot); err != nil || st.Size() == 0 {
		t.Fatalf("plot: %v", err)
	}

	out.Reset()
	if rc := runDisk([]string{"--dir", dir, "--count", "5"}, &out, &errb); rc != 0 || !strings.Contains(out.String(), "Verdict:") {
		t.Fatalf("rc %d: %s", rc, out.String())
	}
	for _, args := range [][]string{{}, {"--dir", dir, "--plot", "x.gif"}, {"--dir", dir, "-w", "yaml"},
		{"--dir", dir, "--bs", "0"}, {"--dir", dir, "--size", "1k", "--bs", "4k"}, {"--dir", dir, "extra"}, {"--nope"}} {
		if rc := runDisk(args, &out, &errb); rc != 2 {
			t.Errorf("%v: rc %d, want 2", args, rc)
		}
	}
	// A missing directory is an error before anything is drawn.
	errb.Reset()
	if rc := runDisk([]string{"--dir", filepath.Join(dir, "missing"), "--count", "1"}, &out, &errb); rc != 1 ||
		!strings.HasPrefix(errb.String(), "stratabench disk: --dir ") || strings.Contains(errb.String(), "%") {
		t.Errorf("missing dir: rc %d, want 1 and the error alone: %q", rc, errb.String())
	}
}

func TestDiskCompareCommand(t *testing.T) {
	dir := t.TempDir()
	bench := filepath.Join(dir, "sb.json")
	var out, errb bytes.Buffer
	fioJSON := "../../bench/disk/testdata/fio-etcd-wal.json" // 461.5 IOPS
	write := func(iops float64) {
		b, _ := json.Marshal(map[string]any{"writes": 10, "iops": iops})
		os.WriteFile(bench, b, 0o644)
	}
	write(470)
	if rc := runDisk([]string{"compare", "--fio", fioJSON, "--bench", bench}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s %s", rc, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "sync IOPS") {
		t.Fatalf("no table: %s", out.String())
	}
	write(900)
	if rc := runDisk([]string{"compare", "--fio", fioJSON, "--bench", bench}, &out, &errb); rc != 1 {
		t.Fatalf("disagreement: rc %d", rc)
	}
	if rc := runDisk([]string{"compare", "--fio", fioJSON, "--bench", bench, "--tolerance", "100"}, &out, &errb); rc != 0 {
		t.Fatalf("tolerance 100%%: rc %d", rc)
	}
	if rc := runDisk([]string{"compare", "--fio", bench, "--bench", bench}, &out, &errb); rc != 1 {
		t.Fatalf("bad fio file: rc %d", rc)
	}
	if rc := runDisk([]string{"compare", "--fio", fioJSON}, &out, &errb); rc != 2 {
		t.Fatalf("missing --bench: rc %d", rc)
	}
}

// TestDiskCompareCheckOnly is make test's disk step: a real stratabench
// run beside a real fio output. Speeds that differ as much as they did in
// make test's failing runs on a shared disk (ratio 1.6, noise) fail the
// comparison but not the check; wrong workloads and units fail the check.
func TestDiskCompareCheckOnly(t *testing.T) {
	dir := t.TempDir()
	fioJSON := "../../bench/disk/testdata/fio-etcd-wal.json" // fio 3.33: 924 writes in 2.002 s, 461.5 IOPS
	var out, errb bytes.Buffer
	if rc := runDisk([]string{"--dir", dir, "--count", "40", "-w", "json"}, &out, &errb); rc != 0 {
		t.Fatalf("stratabench disk: rc %d: %s", rc, errb.String())
	}
	real := filepath.Join(dir, "real.json")
	if err := os.WriteFile(real, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	compare := func(args ...string) (int, string) {
		out.Reset()
		errb.Reset()
		rc := runDisk(append([]string{"compare"}, args...), &out, &errb)
		return rc, out.String() + errb.String()
	}
	if rc, s := compare("--check-only", "--fio", fioJSON, "--bench", real); rc != 0 || !strings.Contains(s, "check: both tools ran the same workload") || !strings.Contains(s, "not judged") {
		t.Fatalf("a real run: rc %d\n%s", rc, s)
	}

	// A consistent stratabench result 1.6 times fio's IOPS.
	bench := func(name string, edit func(m map[string]any)) string {
		m := map[string]any{"block_size": 2300, "writes": 1477, "elapsed_ns": 2e9, "iops": 738.5,
			"fdatasync": map[string]any{"min_ns": 2e5, "mean_ns": 1.3e6, "p50_ns": 1e6, "p90_ns": 2e6, "p99_ns": 8e6, "p99_9_ns": 2e7, "max_ns": 3e7}}
		if edit != nil {
			edit(m)
		}
		b, _ := json.Marshal(m)
		p := filepath.Join(dir, name+".json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noisy := bench("noisy", nil)
	if rc, s := compare("--fio", fioJSON, "--bench", noisy); rc != 1 || !strings.Contains(s, "1.600") {
		t.Fatalf("the comparison passed a 1.6 ratio: rc %d\n%s", rc, s)
	}
	if rc, s := compare("--check-only", "--fio", fioJSON, "--bench", noisy); rc != 0 {
		t.Fatalf("--check-only failed on speeds: rc %d\n%s", rc, s)
	}
	for name, c := range map[string]struct {
		edit func(m map[string]any)
		want string
	}{
		"other block size": {func(m map[string]any) { m["block_size"] = 4096 }, "not the same workload"},
		"IOPS per ms":      {func(m map[string]any) { m["iops"] = 0.7385 }, "not writes per second"},
		"latencies in µs":  {func(m map[string]any) { m["fdatasync"].(map[string]any)["mean_ns"] = 1.3e9 }, "not in nanoseconds"},
		"zero p99":         {func(m map[string]any) { m["fdatasync"].(map[string]any)["p99_ns"] = 0 }, "want all positive"},
	} {
		if rc, s := compare("--check-only", "--fio", fioJSON, "--bench", bench("bad", c.edit)); rc != 1 || !strings.Contains(s, c.want) {
			t.Errorf("%s: rc %d, want 1 and %q:\n%s", name, rc, c.want, s)
		}
	}
	if rc, s := compare("--check-only", "--fio", noisy, "--bench", noisy); rc != 1 || !strings.Contains(s, "fio output: no jobs") {
		t.Errorf("stratabench output as fio's: rc %d\n%s", rc, s)
	}
	if rc, _ := compare("--check-only", "--fio", fioJSON, "--fio", fioJSON, "--bench", noisy); rc != 2 {
		t.Errorf("--check-only with two fio runs: rc %d, want 2", rc)
	}
}
