package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// The parts of the list. Only must-pass gates the exit status; the others
// are run on request (-parts) and reported, so that a test that starts to
// pass is noticed and moved.
const (
	partMustPass      = "must-pass"
	partCluster       = "cluster"
	partByDesign      = "by-design"
	partNotApplicable = "not-applicable"
)

// partOrder is the order parts are printed in.
var partOrder = []string{partMustPass, partCluster, partByDesign, partNotApplicable}

// errList is the prefix of every list error, for errors.Is.
var errList = errors.New("etcd-e2e list")

// entry is one line of the list: a top-level test of etcd's e2e package or
// one of its subtests (TestA/sub, as `go test -v` names it).
type entry struct {
	Name   string // TestA or TestA/sub
	Part   string
	Short  bool   // in the short subset that `make test` runs (must-pass only)
	Reason string // why it is not must-pass; a note for must-pass
	Line   int
}

// Top is the top-level test name.
func (e entry) Top() string {
	top, _, _ := strings.Cut(e.Name, "/")
	return top
}

// RunPattern is the -test.run pattern that selects exactly this test: each
// level anchored and quoted, as go test splits the pattern on '/'.
func (e entry) RunPattern() string {
	levels := strings.Split(e.Name, "/")
	for i, l := range levels {
		levels[i] = "^" + regexp.QuoteMeta(l) + "$"
	}
	return strings.Join(levels, "/")
}

var testName = regexp.MustCompile(`^Test[A-Za-z0-9_]*(/[^\s/]+)*$`)

// parseList reads lines of "PART TEST [short] [REASON...]". Blank lines and
// lines starting with # are ignored. A reason is required unless the part
// is must-pass; "short" is allowed only in must-pass. A test may be listed
// once, and not both as a whole and by its subtests.
func parseList(r io.Reader, name string) ([]entry, error) {
	var out []entry
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%w: %s:%d: %s", errList, name, n, fmt.Sprintf(format, a...))
		}
		if len(f) < 2 {
			return nil, bad("want PART TEST [short] [REASON], got %q", line)
		}
		e := entry{Part: f[0], Name: f[1], Line: n}
		switch e.Part {
		case partMustPass, partCluster, partByDesign, partNotApplicable:
		default:
			return nil, bad("unknown part %q (want %s)", e.Part, strings.Join(partOrder, ", "))
		}
		if !testName.MatchString(e.Name) {
			return nil, bad("%q is not a test name (TestX or TestX/subtest)", e.Name)
		}
		rest := f[2:]
		if len(rest) > 0 && rest[0] == "short" {
			if e.Part != partMustPass {
				return nil, bad("%s: only must-pass tests can be in the short subset", e.Name)
			}
			e.Short = true
			rest = rest[1:]
		}
		e.Reason = strings.Join(rest, " ")
		if e.Part != partMustPass && e.Reason == "" {
			return nil, bad("%s is %s but gives no reason", e.Name, e.Part)
		}
		if prev, ok := seen[e.Name]; ok {
			return nil, bad("%s is listed twice (first on line %d)", e.Name, prev)
		}
		seen[e.Name] = n
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errList, name, err)
	}
	// A whole test and one of its subtests would run the subtest twice and
	// make the parts ambiguous.
	for _, e := range out {
		if e.Top() != e.Name {
			if prev, ok := seen[e.Top()]; ok {
				return nil, fmt.Errorf("%w: %s:%d: %s is listed whole on line %d and by its subtest %s", errList, name, e.Line, e.Top(), prev, e.Name)
			}
		}
	}
	return out, nil
}

func readList(path string) ([]entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errList, err)
	}
	defer f.Close()
	return parseList(f, path)
}

// coverage compares the list with the top-level tests the binary has
// (e2e.test -test.list .): tests the list misses, and listed tests the
// binary does not have. Both sorted.
func coverage(list []entry, binary []string) (missing, unknown []string) {
	listed := map[string]bool{}
	for _, e := range list {
		listed[e.Top()] = true
	}
	have := map[string]bool{}
	for _, t := range binary {
		have[t] = true
		if !listed[t] {
			missing = append(missing, t)
		}
	}
	for t := range listed {
		if !have[t] {
			unknown = append(unknown, t)
		}
	}
	sort.Strings(missing)
	sort.Strings(unknown)
	return missing, unknown
}

// selectEntries keeps the entries in parts (nil: all), matching run (nil:
// all) and, if short, only the short subset.
func selectEntries(list []entry, parts map[string]bool, run *regexp.Regexp, short bool) []entry {
	var out []entry
	for _, e := range list {
		if parts != nil && !parts[e.Part] {
			continue
		}
		if run != nil && !run.MatchString(e.Name) {
			continue
		}
		if short && !e.Short {
			continue
		}
		out = append(out, e)
	}
	return out
}
