package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/e2e/harness"
)

// stratabenchBin is bin/stratabench (make build writes it before make e2e
// runs), else $STRATA_E2E_STRATABENCH, else a fresh build.
func stratabenchBin(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("STRATA_E2E_STRATABENCH"); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	if abs, err := filepath.Abs("../bin/stratabench"); err == nil {
		if fi, err := os.Stat(abs); err == nil && fi.Mode()&0o111 != 0 {
			return abs
		}
	}
	out := filepath.Join(t.TempDir(), "stratabench")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/stratabench")
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build stratabench: %v\n%s", err, b)
	}
	return out
}

var etcdRPS = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// BenchmarkStratabenchAgreesWithEtcdBenchmark runs etcd's own load generator
// (go.etcd.io/etcd/v3/tools/benchmark v3.6.8) and stratabench against the
// same server, with the same put and range workloads, and checks that
// their req/s agree within 15%: stratabench measures what etcd's own
// load generator does.
//
// The machine is shared with other builds and benchmarks, whose load
// moves a one-second run by up to ±40%, so the test runs every workload
// two ways, in rounds, and compares medians of per-round ratios
// stratabench/benchmark:
//
//   - together: both tools start at the same moment on the same server and
//     each reports its own req/s. Whatever else the machine does hits both
//     alike, so the ratio is steady (0.99..1.11 in trials). The ±15% bound
//     is checked here.
//   - in turn: one tool, then the other, alternating which goes first.
//     These are the figures each tool gives on its own, but they carry the
//     machine's noise (per-round ratios 0.6..1.6, medians 0.86..1.27
//     under load), so they are logged and only held to a sanity bound
//     (0.5..2) that a tool counting or timing wrongly would break.
//
// The server runs on CPU 0 and the tools on CPU 1 (taskset) so that the
// tools' own CPU use does not slow the server: etcd's benchmark spends
// about 15% more CPU per request than stratabench, which on a shared core
// with the server shows up as up to 15% fewer req/s. $STRATA_BENCH_ROUNDS
// sets the number of rounds of each kind (default 5).
//
// It is a benchmark, run by `make bench-stratabench`, not a test: its
// verdict is a ratio of two timings, which a loaded machine can flip
// (an in-turn median of 2.13 failed a CI run), so it does not gate
// `make test`. What holds on any machine (both tools run the same
// workloads, report the same requests, and print the same summary) is
// TestStratabenchSummaryLayout's. Run it with -benchtime 1x.
func BenchmarkStratabenchAgreesWithEtcdBenchmark(tb *testing.B) {
	var t testing.TB = tb
	b := needBins(t)
	sb := stratabenchBin(t)
	target := targetBin(t, b)
	bin, pin := pinned(t, target)
	srv, err := harness.NewServer(harness.ServerConfig{Bin: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv.ClientURL}}
	if r := ctl.Run("", "put", "foo", strings.Repeat("v", 256)); r.Code != 0 {
		t.Fatal(r)
	}

	rounds := 5
	if v := os.Getenv("STRATA_BENCH_ROUNDS"); v != "" {
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			t.Fatalf("STRATA_BENCH_ROUNDS=%q", v)
		}
	}
	global := []string{"--endpoints=" + srv.ClientAddr, "--conns=4", "--clients=16"}
	workloads := []struct {
		name string
		args []string
	}{
		{"put", []string{"put", "--total=3000", "--key-size=8", "--val-size=256", "--sequential-keys", "--key-space-size=100000"}},
		{"range-l", []string{"range", "foo", "--total=10000", "--consistency=l"}},
		{"range-s", []string{"range", "foo", "--total=10000", "--consistency=s"}},
	}

	// etcd's tool takes the global flags before the workload; stratabench
	// takes them either way, here after it, plus -w json.
	command := func(ctx context.Context, tool string, args []string) *exec.Cmd {
		a := append(append(pin[1:len(pin):len(pin)], tool), global...)
		a = append(a, args...)
		if tool == sb {
			a = append(a, "-w", "json")
		}
		return exec.CommandContext(ctx, pin[0], a...)
	}
	parseEtcd := func(out []byte) (float64, error) {
		m := etcdRPS.FindSubmatch(out)
		if m == nil || strings.Contains(string(out), "Error distribution") {
			return 0, fmt.Errorf("no clean summary")
		}
		return strconv.ParseFloat(string(m[1]), 64)
	}
	parseStrata := func(out []byte) (float64, error) {
		var s struct {
			Errors int     `json:"errors"`
			RPS    float64 `json:"requests_per_sec"`
		}
		if err := json.Unmarshal(out, &s); err != nil {
			return 0, err
		}
		if s.Errors != 0 || s.RPS <= 0 {
			return 0, fmt.Errorf("%d errors", s.Errors)
		}
		return s.RPS, nil
	}
	// pair runs both tools on args, etcd's first or second, one after the
	// other or together, and returns their req/s.
	pair := func(args []string, etcdFirst, together bool) (e, s float64) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmds := []*exec.Cmd{command(ctx, b.Benchmark, args), command(ctx, sb, args)}
		outs := []*bytes.Buffer{{}, {}}
		for i, c := range cmds {
			c.Stdout = outs[i]
		}
		order := []int{0, 1}
		if !etcdFirst {
			order = []int{1, 0}
		}
		errs := make([]error, 2)
		if together {
			for _, i := range order {
				errs[i] = cmds[i].Start()
			}
			for _, i := range order {
				if errs[i] == nil {
					errs[i] = cmds[i].Wait()
				}
			}
		} else {
			for _, i := range order {
				errs[i] = cmds[i].Run()
			}
		}
		var perr [2]error
		e, perr[0] = parseEtcd(outs[0].Bytes())
		s, perr[1] = parseStrata(outs[1].Bytes())
		for i, name := range []string{"benchmark", "stratabench"} {
			if errs[i] != nil || perr[i] != nil {
				t.Fatalf("%s %q: %v %v\n%s", name, args, errs[i], perr[i], outs[i])
			}
		}
		return e, s
	}

	// Warm up the server (first WAL segment, page cache).
	pair([]string{"put", "--total=500", "--key-size=8", "--val-size=256"}, true, false)

	type result struct{ etcd, strata, ratio []float64 }
	var report strings.Builder
	fmt.Fprintf(&report, "server %s (%s), --clients=16 --conns=4, %d rounds each\n", filepath.Base(target), pinNote(pin), rounds)
	var bad []string
	for _, mode := range []struct {
		name     string
		together bool
		lo, hi   float64
	}{{"together", true, 0.85, 1.15}, {"in turn", false, 0.5, 2}} {
		res := map[string]*result{}
		start := time.Now()
		for r := 0; r < rounds; r++ {
			for _, w := range workloads {
				e, s := pair(w.args, r%2 == 0, mode.together)
				if res[w.name] == nil {
					res[w.name] = &result{}
				}
				x := res[w.name]
				x.etcd, x.strata, x.ratio = append(x.etcd, e), append(x.strata, s), append(x.ratio, s/e)
			}
		}
		fmt.Fprintf(&report, "\n%s (%v): req/s per round = median\n", mode.name, time.Since(start).Round(time.Second))
		for _, w := range workloads {
			x := res[w.name]
			m := median(x.ratio)
			fmt.Fprintf(&report, "  %-8s benchmark   %s = %.0f\n", w.name, fmts(x.etcd), median(x.etcd))
			fmt.Fprintf(&report, "  %-8s stratabench %s = %.0f\n", "", fmts(x.strata), median(x.strata))
			fmt.Fprintf(&report, "  %-8s ratio       %s, median %.3f (bound %.2f..%.2f)\n", "", fmtr(x.ratio), m, mode.lo, mode.hi)
			if m < mode.lo || m > mode.hi {
				bad = append(bad, fmt.Sprintf("%s, %s: stratabench/benchmark req/s median ratio %.3f is outside %.2f..%.2f", w.name, mode.name, m, mode.lo, mode.hi))
			}
		}
	}
	t.Log("\n" + report.String())
	for _, e := range bad {
		t.Error(e)
	}
}

func pinNote(pin []string) string {
	if pin[0] == "env" {
		return "unpinned"
	}
	return "server on CPU 0, load generators on CPU 1"
}

// pinned returns a server binary and a command prefix for the load
// generators that keep them on different CPUs (taskset), so the tools'
// own CPU use does not slow the server down: with both on the same two
// cores, the lighter client leaves the server more CPU and reports more
// req/s. Without taskset or a second CPU it returns bin and a no-op
// prefix.
func pinned(t testing.TB, bin string) (string, []string) {
	ts, err := exec.LookPath("taskset")
	if err != nil || runtime.NumCPU() < 2 || os.Getenv("STRATA_BENCH_NOPIN") != "" {
		return bin, []string{"env"}
	}
	script := filepath.Join(t.TempDir(), "server-on-cpu0")
	body := fmt.Sprintf("#!/bin/sh\nexec %s -c 0 %s \"$@\"\n", ts, bin)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, []string{ts, "-c", "1"}
}

func fmts(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(s, " ")
}

func fmtr(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " ")
}

// skeleton reduces a text summary to its layout: every number becomes N
// and the histogram bars go, so two runs of different speed compare equal
// when their lines, labels and punctuation are the same.
func skeleton(out string) []string {
	num := regexp.MustCompile(`[0-9]+(\.[0-9]+)?(e[-+][0-9]+)?`)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		lines = append(lines, num.ReplaceAllString(strings.TrimRight(l, "∎"), "N"))
	}
	return lines
}

// TestStratabenchSummaryLayout runs etcd's benchmark and stratabench with
// the same put workload on one server and compares their text summaries
// line by line, numbers aside: docs/benchmarks.md promises etcd's summary.
func TestStratabenchSummaryLayout(t *testing.T) {
	b := needBins(t)
	sb := stratabenchBin(t)
	srv, err := harness.NewServer(harness.ServerConfig{Bin: targetBin(t, b), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv.ClientURL}}
	if r := ctl.Run("", "put", "foo", "bar"); r.Code != 0 {
		t.Fatal(r)
	}
	for _, w := range [][]string{
		{"put", "--total=300"}, {"--precise", "put", "--total=300"}, {"range", "foo", "--total=300"},
		{"range", "foo", "--total=300", "--consistency=s"}, {"txn-put", "--total=200"}, {"lease-keepalive", "--total=200"},
	} {
		a := append([]string{"--endpoints=" + srv.ClientAddr, "--clients=4", "--conns=2"}, w...)
		var outs [2]string
		var writes [2]int64
		for i, bin := range []string{b.Benchmark, sb} {
			before := revision(t, ctl)
			cmd := exec.Command(bin, a...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s %q: %v\n%s", filepath.Base(bin), a, err, stderr.String())
			}
			outs[i] = stdout.String()
			writes[i] = revision(t, ctl) - before
		}
		// Both tools made the same number of writes: each put and
		// txn-put is one revision, reads and keep-alives none. A tool that
		// counted requests wrongly (lost, doubled or retried ones) differs.
		if writes[0] != writes[1] {
			t.Errorf("%q: benchmark made %d revisions, stratabench %d", w, writes[0], writes[1])
		}
		want, got := skeleton(outs[0]), skeleton(outs[1])
		if strings.Join(want, "\n") != strings.Join(got, "\n") {
			t.Errorf("%q: stratabench's output differs from etcd benchmark's\n--- benchmark\n%s\n--- stratabench\n%s",
				w, outs[0], outs[1])
		}
	}
}

// revision is the server's current revision, read with etcdctl.
func revision(t testing.TB, ctl *harness.Ctl) int64 {
	t.Helper()
	r := ctl.Run("", "get", "foo", "-w", "json")
	if r.Code != 0 {
		t.Fatal(r)
	}
	var out struct {
		Header struct {
			Revision int64 `json:"revision"`
		} `json:"header"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || out.Header.Revision <= 0 {
		t.Fatalf("etcdctl get -w json: %v\n%s", err, r.Stdout)
	}
	return out.Header.Revision
}
