package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Results of one test.
const (
	resPass    = "PASS"
	resFail    = "FAIL"
	resTimeout = "TIMEOUT"
	resSkip    = "SKIP"
)

// outcome is what one test's run came to.
type outcome struct {
	Result string
	// First is the first assertion that failed (or the skip reason, or
	// where a timed-out test was when it was stopped), one line.
	First string
	// Note qualifies a pass (see expectLeakOnly).
	Note string
}

var (
	resultLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(`)
	logLine    = regexp.MustCompile(`^\s+([\w.-]+\.go):(\d+): ?(.*)$`)
	// failCall is a source line that fails a test: t.Fatal and friends
	// (also through a helper's t or cx.t), testify's require and assert.
	failCall = regexp.MustCompile(`(^|[^\w.])(t|tb|\w+\.t)\.(Fatal|Fatalf|Error|Errorf|FailNow|Fail)\(|\b(require|assert)\.[A-Z]\w*\(`)
	labelRE  = regexp.MustCompile(`^\s*(Error Trace|Error|Test|Messages):\s*(.*)$`)
)

// judge reads a test's output and decides its result. name is the listed
// test (TestA or TestA/sub); exitCode is the test binary's; killed says the
// watchdog stopped it; src finds source lines (nil: no source check).
func judge(output []byte, name string, exitCode int, killed bool, src *sourceIndex) outcome {
	lines := strings.Split(strings.ReplaceAll(string(output), "\r\n", "\n"), "\n")
	if killed {
		return outcome{Result: resTimeout, First: "stopped by the watchdog; last output: " + lastLogLine(lines, len(lines))}
	}
	for i, l := range lines {
		if strings.HasPrefix(l, "panic: test timed out after") {
			return outcome{Result: resTimeout, First: strings.TrimPrefix(l, "panic: ") + "; last output: " + lastLogLine(lines, i)}
		}
	}
	status := ""
	statusAt := -1
	for i, l := range lines {
		m := resultLine.FindStringSubmatch(l)
		if m != nil && m[2] == name {
			status, statusAt = m[1], i
			break
		}
	}
	switch {
	case status == "SKIP":
		return outcome{Result: resSkip, First: skipReason(lines, statusAt)}
	case status == "PASS" && exitCode == 0:
		return outcome{Result: resPass, First: ""}
	case status == "PASS" && expectLeakOnly(lines[statusAt+1:]):
		return outcome{Result: resPass, Note: leakNote}
	case status == "PASS":
		// The test passed but the binary failed afterwards: etcd's
		// TestMain fails a run that leaks goroutines.
		var after []string
		for _, l := range lines[statusAt+1:] {
			if s := strings.TrimSpace(l); s != "PASS" && !resultLine.MatchString(l) {
				after = append(after, l)
			}
		}
		return outcome{Result: resFail, First: "passed, then the test binary exited " + strconv.Itoa(exitCode) + ": " + firstNonEmpty(after)}
	case status == "" && exitCode == 0:
		var out []string
		for _, l := range lines {
			if s := strings.TrimSpace(l); s != "PASS" && s != "FAIL" && !strings.HasPrefix(s, "# ") {
				out = append(out, l)
			}
		}
		return outcome{Result: resFail, First: "no result line for " + name + " (not in the test binary?): " + firstNonEmpty(reverse(out))}
	}
	return outcome{Result: resFail, First: firstAssertion(lines, src)}
}

const leakNote = "TestMain's goroutine check saw only the expect package's readers of processes the test had stopped but not waited for"

// expectLeakOnly reports whether the output after a test's PASS line is
// etcd's TestMain failing its goroutine-leak check on nothing but the
// goroutines of go.etcd.io/etcd/pkg/v3/expect that read and wait for a
// spawned process. Some tests (TestEtcdExampleConfig, TestEtcdUnixPeers)
// send the server SIGTERM and return without waiting for it to exit. etcd
// runs the whole package in one process, where the check comes long after
// the process is gone; with one test per process it comes right after the
// test, while the server is still shutting down. Any other goroutine, and
// any other failure, still fails the test.
func expectLeakOnly(after []string) bool {
	i := 0
	for i < len(after) && strings.TrimSpace(after[i]) != "Unexpected goroutines running after all test(s)." {
		if s := strings.TrimSpace(after[i]); s != "" && s != "PASS" && !resultLine.MatchString(after[i]) {
			return false
		}
		i++
	}
	if i == len(after) {
		return false
	}
	blocks := 0
	var block []string
	flush := func() bool {
		if block == nil {
			return true
		}
		blocks++
		ok := false
		for _, l := range block {
			ok = ok || strings.HasPrefix(l, "created by go.etcd.io/etcd/pkg/v3/expect.")
		}
		block = nil
		return ok
	}
	for _, l := range after[i+1:] {
		if strings.HasSuffix(l, " instances of:") {
			if !flush() {
				return false
			}
			block = []string{}
			continue
		}
		if block == nil && strings.TrimSpace(l) != "" {
			return false // text outside a stack block
		}
		if block != nil {
			block = append(block, l)
		}
	}
	return flush() && blocks > 0
}

// firstAssertion finds the first failure in the output, in this order: a
// testify block (Error Trace/Error), a t.Fatal/t.Error line (a file:line
// whose source line fails the test), a panic, and else the last file:line
// before the first --- FAIL.
func firstAssertion(lines []string, src *sourceIndex) string {
	for i, l := range lines {
		if m := labelRE.FindStringSubmatch(l); m != nil && m[1] == "Error Trace" {
			return testifyBlock(lines, i)
		}
		if m := logLine.FindStringSubmatch(l); m != nil && src != nil {
			n, _ := strconv.Atoi(m[2])
			if failCall.MatchString(src.line(m[1], n)) {
				// A testify failure prints "file.go:N: " followed by its
				// block; report the block.
				if strings.TrimSpace(m[3]) == "" && i+1 < len(lines) && labelRE.MatchString(lines[i+1]) {
					return testifyBlock(lines, i+1)
				}
				return m[1] + ":" + m[2] + ": " + m[3]
			}
		}
	}
	for i, l := range lines {
		if strings.HasPrefix(l, "panic: ") {
			return strings.Join(compact(lines[i:min(i+2, len(lines))]), " ")
		}
	}
	end := len(lines)
	for i, l := range lines {
		if m := resultLine.FindStringSubmatch(l); m != nil && m[1] == "FAIL" {
			end = i
			break
		}
	}
	return lastLogLine(lines, end)
}

// testifyBlock condenses testify's report starting at its "Error Trace:"
// line into "file.go:N: message [subtest]".
func testifyBlock(lines []string, at int) string {
	where, msg, test, extra := "", []string{}, "", []string{}
	label := ""
	for _, l := range lines[at:] {
		m := labelRE.FindStringSubmatch(l)
		if m != nil {
			label = m[1]
			if label == "Error Trace" && where != "" {
				break // the next failure
			}
		} else if !strings.HasPrefix(l, "        \t") || label == "" {
			break
		}
		val := strings.TrimSpace(l)
		if m != nil {
			val = strings.TrimSpace(m[2])
		}
		switch label {
		case "Error Trace":
			if where == "" {
				where = filepath.Base(val)
			}
		case "Error":
			if len(msg) < 3 && val != "" {
				msg = append(msg, val)
			}
		case "Test":
			test = val
		case "Messages":
			if len(extra) < 2 && val != "" {
				extra = append(extra, val)
			}
		}
	}
	s := where + ": " + strings.Join(msg, " ")
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, " ") + ")"
	}
	if test != "" {
		s += " [" + test + "]"
	}
	return s
}

// skipReason is the t.Skip message: go test -v prints a test's log lines
// as they happen, so it is the last one before the --- SKIP line.
func skipReason(lines []string, at int) string {
	return lastLogLine(lines, at)
}

// lastLogLine is the last "file.go:N: message" line before end, or the last
// non-empty line.
func lastLogLine(lines []string, end int) string {
	for i := min(end, len(lines)) - 1; i >= 0; i-- {
		if m := logLine.FindStringSubmatch(lines[i]); m != nil && strings.TrimSpace(m[3]) != "" {
			return m[1] + ":" + m[2] + ": " + m[3]
		}
	}
	return firstNonEmpty(reverse(lines[:min(end, len(lines))]))
}

func firstNonEmpty(lines []string) string {
	for _, l := range lines {
		if s := strings.TrimSpace(l); s != "" {
			return s
		}
	}
	return "(no output)"
}

func compact(lines []string) []string {
	var out []string
	for _, l := range lines {
		if s := strings.TrimSpace(l); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func reverse(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[len(lines)-1-i] = l
	}
	return out
}

// sourceIndex finds a source line by file base name in the tests module:
// go test -v prints only the base name, and the e2e package and its
// framework have no two files of one name that both report failures.
type sourceIndex struct {
	paths map[string][]string // base name -> paths
	files map[string][]string // path -> lines, read on first use
}

func newSourceIndex(root string) *sourceIndex {
	idx := &sourceIndex{paths: map[string][]string{}, files: map[string][]string{}}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") {
			b := filepath.Base(p)
			idx.paths[b] = append(idx.paths[b], p)
		}
		return nil
	})
	return idx
}

// line returns line n of the file named base, or "" when it is unknown. With
// several files of that name, the lines are joined, so a failing call in any
// of them counts.
func (s *sourceIndex) line(base string, n int) string {
	var out []string
	for _, p := range s.paths[base] {
		lines, ok := s.files[p]
		if !ok {
			lines = readLines(p)
			s.files[p] = lines
		}
		if n >= 1 && n <= len(lines) {
			out = append(out, lines[n-1])
		}
	}
	return strings.Join(out, "\n")
}

func readLines(p string) []string {
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
