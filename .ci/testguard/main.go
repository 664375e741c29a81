// Command testguard reads the event stream of `go test -json` on stdin,
// prints what a plain `go test` run would (each package's ok/FAIL line,
// the full output of every failing test) and fails when the run is not a
// real pass:
//
//   - a test or package failed, or a package did not build;
//   - a test was skipped and is not in the allowlist (a skip hides a test
//     that a fresh machine should run: a missing prerequisite must fail);
//   - no test passed at all (an empty run is not a pass).
//
// The allowlist names the tests that may skip, each with its reason; in
// this repository only the child-mode helpers of the kill loops, which
// skip unless their parent test re-executes the binary.
//
// Usage:
//
//	set -o pipefail
//	go test -json ./... | testguard -allow .ci/skip-allowlist
//	go test -json ./... | testguard -allow .ci/skip-allowlist -show '^(--- |    --- )|steps,'
//
// It lives in its own module so that `go test ./...` of the project never
// builds it; `make test` builds it into bin/ and runs its own tests.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

const usage = `usage: go test -json PKGS | testguard [-allow FILE] [-show REGEXP]

Reads go test -json events on stdin, prints each package's result line and
the output of failing tests, and exits 1 when a test failed, a package did
not build, a test was skipped without being in the allowlist, or no test
passed.

Examples:
  set -o pipefail
  go test -json -count=1 ./... | testguard -allow .ci/skip-allowlist
  go test -json -run TestDiff . | testguard -show '^(--- |    --- )|steps,'

Flags:
`

func main() {
	fs := flag.NewFlagSet("testguard", flag.ContinueOnError)
	allowFile := fs.String("allow", "", "allowlist `FILE`: lines of PACKAGE TEST REASON; # starts a comment")
	show := fs.String("show", "", "also print test output lines matching `REGEXP` as they arrive (progress of long tests)")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "testguard: unexpected argument %q\n", fs.Arg(0))
		os.Exit(2)
	}
	cfg := config{}
	if *allowFile != "" {
		f, err := os.Open(*allowFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "testguard: %v\n", err)
			os.Exit(2)
		}
		cfg.allow, err = parseAllowlist(f, *allowFile)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "testguard: %v\n", err)
			os.Exit(2)
		}
	}
	if *show != "" {
		re, err := regexp.Compile(*show)
		if err != nil {
			fmt.Fprintf(os.Stderr, "testguard: -show: %v\n", err)
			os.Exit(2)
		}
		cfg.show = re
	}
	if err := run(os.Stdin, os.Stdout, cfg); err != nil {
		fmt.Fprintf(os.Stdout, "testguard: FAIL: %v\n", err)
		os.Exit(1)
	}
}

// config is what run needs besides its input and output.
type config struct {
	// allow maps "package test" to the reason the test may skip.
	allow map[string]string
	// show, if set, selects test output lines to print as they arrive.
	show *regexp.Regexp
}

// parseAllowlist reads lines of "PACKAGE TEST REASON..."; blank lines and
// text after # are ignored. A reason is required: an entry must say why
// the skip is fine.
func parseAllowlist(r io.Reader, name string) (map[string]string, error) {
	allow := map[string]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 {
			return nil, fmt.Errorf("%s:%d: want PACKAGE TEST REASON, got %q", name, n, strings.TrimSpace(line))
		}
		allow[f[0]+" "+f[1]] = strings.Join(f[2:], " ")
	}
	return allow, sc.Err()
}

// event is one line of `go test -json` (cmd/test2json's TestEvent, plus
// the build events go test emits since Go 1.24).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output, build-fail
}

// skip is one skipped test and what it printed (its t.Skip message).
type skip struct {
	pkg, test, msg, allowedBecause string
}

// run consumes the stream and returns nil only for a real pass.
func run(in io.Reader, out io.Writer, cfg config) error {
	var (
		// buf holds the output of each test that has not finished, keyed
		// by package and test; it is printed if the test fails and
		// dropped if it passes.
		buf      = map[string]*strings.Builder{}
		passed   int
		failed   []string
		badPkgs  []string
		skips    []skip
		packages = map[string]bool{}
	)
	key := func(e event) string { return e.Package + " " + e.Test }
	flushPkg := func(pkg string) {
		// Tests still open when their package fails (a timeout, a
		// panic in another goroutine): their output is the evidence.
		var open []string
		for k := range buf {
			if strings.HasPrefix(k, pkg+" ") {
				open = append(open, k)
			}
		}
		sort.Strings(open)
		for _, k := range open {
			io.WriteString(out, buf[k].String())
			delete(buf, k)
		}
	}

	r := bufio.NewReaderSize(in, 1<<20)
	for {
		line, err := r.ReadString('\n')
		if len(line) > 0 {
			var e event
			if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
				io.WriteString(out, line) // not an event: pass it on
			} else {
				switch e.Action {
				case "build-output":
					io.WriteString(out, e.Output)
				case "build-fail":
					badPkgs = append(badPkgs, e.ImportPath+" (build failed)")
				case "output":
					if e.Test == "" {
						if e.Output != "PASS\n" {
							io.WriteString(out, e.Output)
						}
						break
					}
					b := buf[key(e)]
					if b == nil {
						b = new(strings.Builder)
						buf[key(e)] = b
					}
					b.WriteString(e.Output)
					if cfg.show != nil && cfg.show.MatchString(e.Output) {
						io.WriteString(out, e.Output)
					}
				case "pass":
					if e.Test == "" {
						packages[e.Package] = true
						break
					}
					passed++
					delete(buf, key(e))
				case "skip":
					if e.Test == "" {
						break // a package without tests
					}
					s := skip{pkg: e.Package, test: e.Test, msg: skipMessage(buf[key(e)])}
					s.allowedBecause = cfg.allow[key(e)]
					skips = append(skips, s)
					delete(buf, key(e))
				case "fail":
					if e.Test == "" {
						packages[e.Package] = true
						badPkgs = append(badPkgs, e.Package)
						flushPkg(e.Package)
						break
					}
					failed = append(failed, e.Package+" "+e.Test)
					if b := buf[key(e)]; b != nil {
						io.WriteString(out, b.String())
					}
					delete(buf, key(e))
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	for _, k := range sortedKeys(buf) {
		// The stream ended with tests still open: go test was killed.
		io.WriteString(out, buf[k].String())
		failed = append(failed, k+" (never finished)")
	}

	var problems []string
	var allowed, refused []skip
	for _, s := range skips {
		if s.allowedBecause != "" {
			allowed = append(allowed, s)
		} else {
			refused = append(refused, s)
		}
	}
	for _, s := range allowed {
		fmt.Fprintf(out, "testguard: allowed skip: %s %s (%s)\n", s.pkg, s.test, s.allowedBecause)
	}
	for _, s := range refused {
		fmt.Fprintf(out, "testguard: SKIP not allowed: %s %s: %s\n", s.pkg, s.test, s.msg)
	}
	fmt.Fprintf(out, "testguard: %d packages, %d tests passed, %d failed, %d skipped (%d allowed)\n",
		len(packages), passed, len(failed), len(skips), len(allowed))
	if len(badPkgs) > 0 {
		problems = append(problems, fmt.Sprintf("%d package(s) failed: %s", len(badPkgs), strings.Join(badPkgs, ", ")))
	}
	if len(failed) > 0 {
		problems = append(problems, fmt.Sprintf("%d test(s) failed: %s", len(failed), strings.Join(failed, ", ")))
	}
	if len(refused) > 0 {
		var names []string
		for _, s := range refused {
			names = append(names, s.pkg+" "+s.test)
		}
		problems = append(problems, fmt.Sprintf("%d test(s) skipped that are not in the allowlist (a missing prerequisite must fail, not skip; fix the prerequisite, or allowlist the test with its reason): %s",
			len(refused), strings.Join(names, ", ")))
	}
	if passed == 0 && len(problems) == 0 {
		problems = append(problems, "no test passed (nothing ran?)")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// skipMessage is a skipped test's output without the framing lines
// (=== RUN, --- SKIP), i.e. its t.Skip message and any logs before it.
func skipMessage(b *strings.Builder) string {
	if b == nil {
		return "(no message)"
	}
	var keep []string
	for _, l := range strings.Split(b.String(), "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		keep = append(keep, t)
	}
	if len(keep) == 0 {
		return "(no message)"
	}
	return strings.Join(keep, " | ")
}

func sortedKeys(m map[string]*strings.Builder) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
