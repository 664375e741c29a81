package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The outputs below have the shape go test -v gives etcd's e2e tests
// (testify blocks, t.Fatalf lines among the framework's log lines, skips,
// go test's own timeout); the messages are made up.

const testifyOut = `=== RUN   TestX
=== RUN   TestX/sub
    x_test.go:137: 
        	Error Trace:	/src/e2e/x_test.go:137
        	            				/src/e2e/helper.go:20
        	Error:      	Received unexpected error:
        	            	boom happened
        	Test:       	TestX/sub
        	Messages:   	while doing y
    x_test.go:140: 
        	Error Trace:	/src/e2e/x_test.go:140
        	Error:      	a later failure
        	Test:       	TestX/sub
--- FAIL: TestX (1.00s)
    --- FAIL: TestX/sub (0.50s)
FAIL
`

// A source file for the fatal-line check: line 5 logs (and calls
// err.Error(), which is not a failure), line 9 fails the test.
const ySource = `package e2e

func TestY(t *testing.T) {
	cx := ctx(t)
	t.Logf("starting %s", err.Error())
	for {
		out, err := put()
		if err != nil {
			cx.t.Fatalf("put failed (%v)", err)
		}
	}
	t.Log("closing cluster")
}
`

const fatalOut = `=== RUN   TestY
    y_test.go:5: starting x
    logger.go:146: 2026-01-01T00:00:00.000Z	INFO	failed to do something, retrying
    y_test.go:9: put failed (exit code 1)
    y_test.go:12: closing cluster
--- FAIL: TestY (2.00s)
FAIL
`

func TestJudge(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "e2e"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "e2e", "y_test.go"), []byte(ySource), 0o644); err != nil {
		t.Fatal(err)
	}
	idx := newSourceIndex(src)
	for _, c := range []struct {
		what   string
		out    string
		name   string
		code   int
		killed bool
		src    *sourceIndex
		want   outcome
	}{
		{"testify block", testifyOut, "TestX", 1, false, idx,
			outcome{Result: resFail, First: "x_test.go:137: Received unexpected error: boom happened (while doing y) [TestX/sub]"}},
		{"t.Fatalf found through the source", fatalOut, "TestY", 1, false, idx,
			outcome{Result: resFail, First: "y_test.go:9: put failed (exit code 1)"}},
		{"without sources: the last line before --- FAIL", fatalOut, "TestY", 1, false, nil,
			outcome{Result: resFail, First: "y_test.go:12: closing cluster"}},
		{"pass", "=== RUN   TestP\n--- PASS: TestP (0.10s)\nPASS\n", "TestP", 0, false, idx,
			outcome{Result: resPass, First: ""}},
		{"subtest pass", "=== RUN   TestP\n=== RUN   TestP/a_b\n--- PASS: TestP (0.10s)\n    --- PASS: TestP/a_b (0.05s)\nPASS\n", "TestP/a_b", 0, false, idx,
			outcome{Result: resPass, First: ""}},
		{"subtest not in the binary", "# e2e.test -test.run ...\n=== RUN   TestP\n--- PASS: TestP (0.10s)\nPASS\n", "TestP/gone", 0, false, idx,
			outcome{Result: resFail, First: "no result line for TestP/gone (not in the test binary?): --- PASS: TestP (0.10s)"}},
		{"test not in the binary", "# e2e.test -test.run ...\ntesting: warning: no tests to run\nPASS\n", "TestGone", 0, false, idx,
			outcome{Result: resFail, First: "no result line for TestGone (not in the test binary?): testing: warning: no tests to run"}},
		{"skip", "=== RUN   TestS\n    s_test.go:99: \"/bin/etcd-last-release\" does not exist\n--- SKIP: TestS (0.00s)\nPASS\n", "TestS", 0, false, idx,
			outcome{Result: resSkip, First: `s_test.go:99: "/bin/etcd-last-release" does not exist`}},
		{"leaked goroutines after a pass", "=== RUN   TestL\n--- PASS: TestL (1.00s)\nPASS\nUnexpected goroutines running after all test(s).\ngoroutine 7 [select]:\n", "TestL", 1, false, idx,
			outcome{Result: resFail, First: "passed, then the test binary exited 1: Unexpected goroutines running after all test(s)."}},
		{"only the expect package's goroutines left", "=== RUN   TestE\n--- PASS: TestE (0.30s)\n    --- PASS: TestE/sub (0.10s)\nPASS\nUnexpected goroutines running after all test(s).\n1 instances of:\nsyscall.read(...)\ngo.etcd.io/etcd/pkg/v3/expect.(*ExpectProcess).read(...)\ncreated by go.etcd.io/etcd/pkg/v3/expect.NewExpectWithEnv in goroutine 7\n\t/x/expect.go:85 +0x265\n1 instances of:\nos.(*Process).pidfdWait.func1(...)\ncreated by go.etcd.io/etcd/pkg/v3/expect.NewExpectWithEnv in goroutine 7\n\t/x/expect.go:86\n", "TestE", 1, false, idx,
			outcome{Result: resPass, Note: leakNote}},
		{"another goroutine left besides", "=== RUN   TestE\n--- PASS: TestE (0.30s)\nPASS\nUnexpected goroutines running after all test(s).\n1 instances of:\ncreated by go.etcd.io/etcd/pkg/v3/expect.NewExpectWithEnv in goroutine 7\n1 instances of:\nmain.leaky(...)\ncreated by main.TestE in goroutine 6\n", "TestE", 1, false, idx,
			outcome{Result: resFail, First: "passed, then the test binary exited 1: Unexpected goroutines running after all test(s)."}},
		{"go test's own timeout", "=== RUN   TestT\n    t_test.go:10: waiting for the member\npanic: test timed out after 5m0s\n\trunning tests:\n\t\tTestT (5m0s)\n\ngoroutine 1 [running]:\n", "TestT", 2, false, idx,
			outcome{Result: resTimeout, First: "test timed out after 5m0s; last output: t_test.go:10: waiting for the member"}},
		{"killed by the watchdog", "=== RUN   TestK\n    k_test.go:3: waiting for ready\n", "TestK", -1, true, idx,
			outcome{Result: resTimeout, First: "stopped by the watchdog; last output: k_test.go:3: waiting for ready"}},
		{"panic", "=== RUN   TestN\npanic: runtime error: invalid memory address or nil pointer dereference\n[signal SIGSEGV]\n\ngoroutine 5 [running]:\n", "TestN", 2, false, idx,
			outcome{Result: resFail, First: "panic: runtime error: invalid memory address or nil pointer dereference [signal SIGSEGV]"}},
	} {
		got := judge([]byte(c.out), c.name, c.code, c.killed, c.src)
		if got != c.want {
			t.Errorf("%s:\n got  %+v\n want %+v", c.what, got, c.want)
		}
	}
}

func TestOneLine(t *testing.T) {
	if got := oneLine("a\n\tb   c", 100); got != "a b c" {
		t.Errorf("got %q", got)
	}
	if got := oneLine(strings.Repeat("x", 10), 4); got != "xxxx ..." {
		t.Errorf("got %q", got)
	}
}
