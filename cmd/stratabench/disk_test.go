package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"2300": 2300, "22m": 22 << 20, "4k": 4096, "1G": 1 << 30, "8KiB": 8192, "2MB": 2 << 20} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "12q", "99999999999g"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}

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
