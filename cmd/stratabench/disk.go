package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/strata-db/strata/bench/disk"
	"github.com/strata-db/strata/bench/disk/diskplot"
	"github.com/strata-db/strata/diskprobe"
	"github.com/strata-db/strata/progress"
)

const diskUsage = `Usage: stratabench disk --dir DIR [flags]

Measures what etcd's fio profile (fio-profiles/etcd-wal.fio) measures:
sequential 2300-byte writes to one file in DIR, each followed by fdatasync.
Reports fdatasync latency percentiles, sequential sync IOPS and a verdict
against etcd's guidance (p99 fdatasync under 10 ms; at least 50 IOPS,
preferably 500). A progress bar goes to stderr, the report to stdout.

Use a directory on the disk to qualify, not tmpfs (where fdatasync does
nothing). 'stratabench disk compare' sets the figures beside fio's.

Flags:
`

const diskExamples = `
Examples:
  stratabench disk --dir /var/lib/etcd-test
  stratabench disk --dir /var/lib/etcd-test --duration 3s --plot fsync.png
  stratabench disk --dir /var/lib/etcd-test -w json > bench.json
`

const diskCompareUsage = `Usage: stratabench disk compare --fio FIO.json... --bench BENCH.json... [flags]
       stratabench disk compare --check-only --fio FIO.json --bench BENCH.json

Sets the results of fio running fio-profiles/etcd-wal.fio
(--output-format=json) beside those of 'stratabench disk -w json' on the
same directory. With several runs of each (run them interleaved), each
side is the median of its runs; the verdict weighs the IOPS difference
against the run-to-run spread: agree (exit 0), disagree, or inconclusive
when the disk is as noisy as the difference (exit 1).

--check-only judges no speeds, only what holds on any disk: both outputs
parse, both tools wrote the same block size, every figure is positive and
in its unit (IOPS are writes per second, latencies fit in the run time).
'make test' runs it; 'make disk-check DIR=...' runs both tools and compares.

Flags:
`

const diskCompareExamples = `
Examples:
  fio --directory=/var/lib/etcd-test --output-format=json fio-profiles/etcd-wal.fio > fio.json
  stratabench disk --dir /var/lib/etcd-test -w json > bench.json
  stratabench disk compare --fio fio.json --bench bench.json
  stratabench disk compare --fio f1.json --fio f2.json --bench b1.json --bench b2.json --tolerance 40 -w json
  stratabench disk compare --check-only --fio fio.json --bench bench.json
`

// parseFlags parses a command line: on -h it prints usage, the flags and
// examples to stdout (exit status 0); on a bad flag the flag package has
// printed the error to stderr, and it adds where the help is (exit 2).
// ok is false when the caller should return code.
func parseFlags(fs *flag.FlagSet, args []string, usage, examples string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below, to the right stream
	err := fs.Parse(args)
	if err == nil {
		return 0, true
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fmt.Fprint(stdout, examples)
		return 0, false
	}
	fmt.Fprintf(stderr, "Run '%s -h' for usage.\n", fs.Name())
	return 2, false
}

func runDisk(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return runDiskCompare(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("stratabench disk", flag.ContinueOnError)
	var (
		dir      = fs.String("dir", "", "directory on the device to test (required; must exist)")
		plotFile = fs.String("plot", "", "write a fdatasync latency histogram to `FILE` (.png, .svg or .html)")
		bs       = fs.String("bs", "2300", "block size of each write, in bytes (k, m suffixes: KiB, MiB)")
		size     = fs.String("size", "22m", "file size: the test writes it once (fio's --size; k, m, g suffixes)")
		count    = fs.Int("count", 0, "stop after this many writes (0: write the whole file)")
		duration = fs.Duration("duration", 0, "stop after this long (0: write the whole file), like fio's --runtime")
		keep     = fs.Bool("keep", false, "leave the test file in DIR")
		format   = fs.String("write-out", "simple", "output format: simple or json")
	)
	fs.StringVar(format, "w", "simple", "short for --write-out")
	if code, ok := parseFlags(fs, args, diskUsage, diskExamples, stdout, stderr); !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "stratabench disk: "+format+"\n", a...)
		fmt.Fprintln(stderr, "Run 'stratabench disk -h' for usage.")
		return 2
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if *dir == "" {
		return usageErr("--dir is required")
	}
	if *format != "simple" && *format != "json" {
		return usageErr("--write-out must be simple or json, not %q", *format)
	}
	if *plotFile != "" {
		if _, err := diskplot.Format(*plotFile); err != nil {
			return usageErr("%v", err)
		}
	}
	blockSize, err := disk.ParseSize(*bs)
	if err != nil || blockSize <= 0 || blockSize > 64<<20 {
		return usageErr("--bs %q: want a size from 1 byte to 64m", *bs)
	}
	fileSize, err := disk.ParseSize(*size)
	if err != nil || fileSize < blockSize {
		return usageErr("--size %q: want a size of at least one block (%d bytes)", *size, blockSize)
	}
	if *count < 0 || *duration < 0 {
		return usageErr("--count and --duration must not be negative")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		why := "not a directory"
		if err != nil {
			why = errors.Unwrap(err).Error()
		}
		fmt.Fprintf(stderr, "stratabench disk: --dir %s: %s (give a directory on the disk to test; create it first)\n", *dir, why)
		return 1
	}
	// The bar is drawn once writes have started, never for a run that
	// cannot start.
	var bar *progress.Bar
	res, err := diskprobe.Run(ctx, diskprobe.Options{
		Dir: *dir, BlockSize: int(blockSize), Size: fileSize, Count: *count, Duration: *duration, Keep: *keep,
		Progress: func(done, planned int, elapsed time.Duration) {
			total := int64(planned)
			if *duration > 0 && elapsed > 0 && done < planned {
				// The run ends at the deadline: estimate where.
				total = min(total, max(int64(done)+1, int64(float64(done)*float64(*duration)/float64(elapsed))))
			}
			if bar == nil {
				bar = progress.NewTo(stderr, "fdatasync", total, "writes")
			}
			bar.SetTotal(total)
			bar.Set(int64(done))
		},
	})
	if err != nil {
		if bar != nil {
			fmt.Fprintln(stderr)
		}
		fmt.Fprintf(stderr, "stratabench disk: %v\n", err)
		return 1
	}
	if bar != nil {
		bar.Finish()
	}
	if *plotFile != "" {
		if err := diskplot.Write(res, *plotFile); err != nil {
			fmt.Fprintf(stderr, "stratabench disk: %v\n", err)
			return 1
		}
	}
	if *format == "json" {
		out, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "stratabench disk: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, string(out))
	} else {
		fmt.Fprint(stdout, "\n"+disk.Summary(res))
		if *plotFile != "" {
			fmt.Fprintf(stdout, "\nHistogram written to %s\n", *plotFile)
		}
	}
	return 0
}

// runDiskCompare sets fio JSON results beside `stratabench disk -w json`
// results (the medians of several runs of each, see disk.Compare) and
// fails (exit 1) unless their sequential sync IOPS agree within the
// tolerance; with --check-only it fails only on disk.Check's findings.
func runDiskCompare(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stratabench disk compare", flag.ContinueOnError)
	var fioFiles, benchFiles fileList
	fs.Var(&fioFiles, "fio", "fio --output-format=json output of fio-profiles/etcd-wal.fio (repeat for several runs)")
	fs.Var(&benchFiles, "bench", "stratabench disk -w json output (repeat for several runs)")
	tol := fs.Float64("tolerance", 25, "largest accepted IOPS difference, in percent of fio's")
	format := fs.String("write-out", "simple", "output format: simple or json")
	fs.StringVar(format, "w", "simple", "short for --write-out")
	checkOnly := fs.Bool("check-only", false, "judge no speeds: only that the outputs parse and their figures are positive and in the same units (one run of each)")
	if code, ok := parseFlags(fs, args, diskCompareUsage, diskCompareExamples, stdout, stderr); !ok {
		return code
	}
	if len(fioFiles) == 0 || len(benchFiles) == 0 || fs.NArg() > 0 || *tol < 0 || (*format != "simple" && *format != "json") ||
		(*checkOnly && (len(fioFiles) != 1 || len(benchFiles) != 1)) {
		fmt.Fprintln(stderr, "usage: stratabench disk compare --fio FIO.json... --bench BENCH.json... [--tolerance PERCENT] [-w simple|json]")
		fmt.Fprintln(stderr, "       stratabench disk compare --check-only --fio FIO.json --bench BENCH.json")
		fmt.Fprintln(stderr, "Run 'stratabench disk compare -h' for usage.")
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "stratabench disk compare: %v\n", err)
		return 1
	}
	var fio []*disk.FioResult
	for _, name := range fioFiles {
		data, err := os.ReadFile(name)
		if err != nil {
			return fail(err)
		}
		fr, err := disk.ParseFio(data)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", name, err))
		}
		fio = append(fio, fr)
	}
	var bench []*diskprobe.Result
	for _, name := range benchFiles {
		data, err := os.ReadFile(name)
		if err != nil {
			return fail(err)
		}
		br := new(diskprobe.Result)
		if err := json.Unmarshal(data, br); err != nil || br.Writes == 0 {
			return fail(fmt.Errorf("%s: not the output of stratabench disk -w json", name))
		}
		bench = append(bench, br)
	}
	c := disk.Compare(fio, bench, *tol/100)
	var checkErr error
	if *checkOnly {
		checkErr = disk.Check(fio[0], bench[0])
		c.Agree, c.Noisy = checkErr == nil, false
		c.Verdict = "not judged (--check-only; make disk-check DIR=... compares speeds)"
	}
	if *format == "json" {
		out, _ := json.MarshalIndent(c, "", "  ")
		fmt.Fprintln(stdout, string(out))
	} else {
		fmt.Fprint(stdout, c.String())
	}
	if *checkOnly {
		if checkErr != nil {
			fmt.Fprintf(stderr, "stratabench disk compare: check failed:\n%v\n", checkErr)
			return 1
		}
		fmt.Fprintln(stdout, "check: both tools ran the same workload; every figure is positive and in its unit")
		return 0
	}
	if !c.Agree {
		return 1
	}
	return 0
}

// fileList is a repeatable file-name flag.
type fileList []string

func (l *fileList) String() string     { return strings.Join(*l, ",") }
func (l *fileList) Set(v string) error { *l = append(*l, v); return nil }
