// Command etcd-e2e runs etcd's own end-to-end tests (the e2e package of
// go.etcd.io/etcd/tests/v3, compiled with go test -c) against the server in
// a bin directory, one test per process, from a list kept in the
// repository; conformance/etcd-e2e.sh builds everything it needs and calls
// it (make etcd-e2e). See conformance/README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

const usage = `usage: etcd-e2e -test-bin FILE -src DIR -bin-dir DIR -list FILE [flags]

Runs the tests of etcd's tests/e2e named in the list against the etcd in
-bin-dir (bin/strata linked as etcd, or real etcd), one test per process,
each from a fresh working directory, with a per-test time limit enforced
by a watchdog. Prints a table (test, part, result, seconds), the first
assertion of every test that did not pass, and the counts per part. Exits
1 when a must-pass test did not pass (a skip counts as not passing) or when
the list and the test binary disagree on which tests exist; 2 on bad usage.

Examples:
  etcd-e2e -test-bin e2e.test -src tests -bin-dir $PWD/bin-strata -list etcd-e2e.list
  etcd-e2e ... -run 'TestCtlV3Put|TestCtlV3Get'         # some tests only
  etcd-e2e ... -parts must-pass,cluster -timeout 2m     # more parts
  etcd-e2e ... -short                                   # the make test subset
  etcd-e2e -test-bin e2e.test -list etcd-e2e.list -check  # is the list complete?

Flags:
`

func main() {
	if len(os.Args) > 1 && (os.Args[1] == nsExecArg || os.Args[1] == nsProbeArg) {
		nsMain(os.Args[1:])
		return
	}
	os.Exit(run(os.Args[1:]))
}

func run(argv []string) int {
	fs := flag.NewFlagSet("etcd-e2e", flag.ContinueOnError)
	testBin := fs.String("test-bin", "", "etcd's e2e test binary (`FILE`, from go test -c)")
	srcDir := fs.String("src", "", "the go.etcd.io/etcd/tests/v3 source `DIR` (fixtures/, and the example config at DIR/../etcd.conf.yml.sample)")
	binDir := fs.String("bin-dir", "", "`DIR` holding etcd, etcdctl and etcdutl, passed to the tests as -bin-dir")
	listFile := fs.String("list", "", "the list of tests and their parts (`FILE`)")
	parts := fs.String("parts", partMustPass, "comma-separated `PARTS` to run, or all ("+strings.Join(partOrder, ", ")+")")
	runRE := fs.String("run", "", "run only listed tests whose name matches `REGEXP`")
	short := fs.Bool("short", false, "run only the short subset of must-pass (marked short in the list)")
	limit := fs.Duration("timeout", 5*time.Minute, "time limit per test; the watchdog kills the test's processes "+grace.String()+" later")
	work := fs.String("work", "", "`DIR` for the per-test working directories (default: a new temp dir, removed at the end)")
	logDir := fs.String("logs", "", "`DIR` for each test's full output (default: a new temp dir, kept)")
	target := fs.String("target", "", "name of the server under test, for the report (default: -bin-dir)")
	tsv := fs.String("tsv", "", "also write the results to `FILE` as tab-separated values")
	isolate := fs.String("isolate", "auto", "run each test in new PID and network namespaces: auto, on or off")
	keep := fs.Bool("keep", false, "keep the working directory of each test that did not pass")
	check := fs.Bool("check", false, "only check that the list names every test of the binary and no other, then exit")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(argv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "etcd-e2e: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	if *testBin == "" || *listFile == "" {
		return bad("-test-bin and -list are required (-h for help)")
	}
	list, err := readList(*listFile)
	if err != nil {
		return bad("%v", err)
	}
	if err := checkCoverage(*testBin, list); err != nil {
		fmt.Fprintf(os.Stderr, "etcd-e2e: %v\n", err)
		return 1
	}
	if *check {
		fmt.Printf("etcd-e2e: %s names each of the test binary's %d tests once\n", *listFile, countTops(list))
		return 0
	}
	if *srcDir == "" || *binDir == "" {
		return bad("-src and -bin-dir are required (-h for help)")
	}
	if !filepath.IsAbs(*binDir) {
		return bad("-bin-dir must be absolute (the tests run from their own directories): %s", *binDir)
	}
	for _, b := range []string{"etcd", "etcdctl", "etcdutl"} {
		if _, err := os.Stat(filepath.Join(*binDir, b)); err != nil {
			return bad("-bin-dir: %v", err)
		}
	}
	if *target == "" {
		*target = *binDir
	}
	var partSet map[string]bool
	if *parts != "all" {
		partSet = map[string]bool{}
		for _, p := range strings.Split(*parts, ",") {
			known := false
			for _, q := range partOrder {
				known = known || p == q
			}
			if !known {
				return bad("-parts: unknown part %q (want %s or all)", p, strings.Join(partOrder, ", "))
			}
			partSet[p] = true
		}
	}
	var re *regexp.Regexp
	if *runRE != "" {
		if re, err = regexp.Compile(*runRE); err != nil {
			return bad("-run: %v", err)
		}
	}
	sel := selectEntries(list, partSet, re, *short)
	if len(sel) == 0 {
		fmt.Fprintf(os.Stderr, "etcd-e2e: no listed test matches (-parts %s -run %q -short=%v)\n", *parts, *runRE, *short)
		return 1
	}

	r := &runner{testBin: abs(*testBin), srcDir: abs(*srcDir), binDir: *binDir, limit: *limit, grace: grace, keep: *keep}
	r.src = newSourceIndex(r.srcDir)
	switch *isolate {
	case "on":
		if err := namespacesWork(); err != nil {
			return bad("-isolate on: namespaces do not work here: %v", err)
		}
		r.isolate = true
	case "auto":
		if err := namespacesWork(); err != nil {
			fmt.Fprintf(os.Stderr, "etcd-e2e: no PID/network namespaces here (%v): leftover processes are found through /proc, and ports are shared with the rest of the machine\n", err)
		} else {
			r.isolate = true
		}
	case "off":
	default:
		return bad("-isolate: want auto, on or off, got %q", *isolate)
	}
	if err := becomeSubreaper(); err != nil {
		fmt.Fprintf(os.Stderr, "etcd-e2e: cannot become a child subreaper (%v): processes orphaned by a test may survive it\n", err)
	}
	if *work == "" {
		d, err := os.MkdirTemp("", "ee2e")
		if err != nil {
			return bad("%v", err)
		}
		defer os.RemoveAll(d)
		*work = d
	}
	r.workRoot = abs(*work)
	if *logDir == "" {
		d, err := os.MkdirTemp("", "etcd-e2e-logs.")
		if err != nil {
			return bad("%v", err)
		}
		*logDir = d
	}
	r.logDir = abs(*logDir)
	if err := os.MkdirAll(r.logDir, 0o755); err != nil {
		return bad("%v", err)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "\netcd-e2e: %v: stopping the running test\n", s)
		r.stop()
	}()

	mode := "own PID and network namespaces"
	if !r.isolate {
		mode = "no namespaces"
	}
	fmt.Printf("etcd-e2e: %d tests against %s (bin dir %s), one process each, limit %v, %s; logs in %s\n",
		len(sel), *target, r.binDir, r.limit, mode, r.logDir)
	var rs []result
	for i, e := range sel {
		res := r.runOne(e, i)
		if r.isStopped() {
			break
		}
		rs = append(rs, res)
		fmt.Printf("[%3d/%d] %-7s %7.1fs  %-14s %s\n", i+1, len(sel), res.Result, res.Secs, res.Part, res.Name)
	}
	printTable(os.Stdout, rs, *target)
	if *tsv != "" {
		if f, err := os.Create(*tsv); err != nil {
			fmt.Fprintf(os.Stderr, "etcd-e2e: %v\n", err)
		} else {
			writeTSV(f, rs)
			f.Close()
		}
	}
	if r.isStopped() {
		fmt.Printf("\netcd-e2e: interrupted after %d of %d tests\n", len(rs), len(sel))
		return 130
	}
	failed := mustPassFailed(rs)
	nMust := 0
	for _, e := range sel {
		if e.Part == partMustPass {
			nMust++
		}
	}
	if len(failed) > 0 {
		fmt.Printf("\netcd-e2e: FAIL: %d of %d must-pass tests did not pass against %s: %s\n", len(failed), nMust, *target, strings.Join(failed, " "))
		return 1
	}
	fmt.Printf("\netcd-e2e: ok: all %d must-pass tests run passed against %s\n", nMust, *target)
	return 0
}

// checkCoverage fails when the binary has a test the list does not name
// (a new etcd version must have each test classified) or the list names a
// test the binary does not have.
func checkCoverage(testBin string, list []entry) error {
	out, err := exec.Command(testBin, "-test.list", ".").Output()
	if err != nil {
		return fmt.Errorf("listing the tests of %s: %v", testBin, err)
	}
	var tops []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Test") {
			tops = append(tops, strings.TrimSpace(l))
		}
	}
	missing, unknown := coverage(list, tops)
	var msgs []string
	if len(missing) > 0 {
		msgs = append(msgs, fmt.Sprintf("the list does not name %d test(s) of the binary (classify each in a part): %s", len(missing), strings.Join(missing, " ")))
	}
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf("the list names %d test(s) the binary does not have: %s", len(unknown), strings.Join(unknown, " ")))
	}
	if len(msgs) > 0 {
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}

func countTops(list []entry) int {
	seen := map[string]bool{}
	for _, e := range list {
		seen[e.Top()] = true
	}
	return len(seen)
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}
