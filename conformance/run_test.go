package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The runner's tests start real processes: this test binary, re-executed
// as a stand-in for etcd's e2e.test (fakeEnv selects what it does), in the
// runner's real layout, namespaces and watchdog.
const (
	fakeEnv    = "CONFORMANCE_FAKE_E2E"
	pidFileEnv = "CONFORMANCE_FAKE_PIDFILE"
	portEnv    = "CONFORMANCE_FAKE_PORT"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == nsExecArg || os.Args[1] == nsProbeArg) {
		nsMain(os.Args[1:])
		return
	}
	if mode := os.Getenv(fakeEnv); mode != "" {
		os.Exit(fakeE2E(mode))
	}
	os.Exit(m.Run())
}

// fakeE2E acts as the e2e test binary for one test named TestFake.
func fakeE2E(mode string) int {
	fail := func(format string, a ...any) int {
		fmt.Printf("=== RUN   TestFake\n    fake_test.go:1: %s\n--- FAIL: TestFake (0.00s)\nFAIL\n", fmt.Sprintf(format, a...))
		return 1
	}
	switch mode {
	case "hang":
		// Like a member started through a pty: a session of its own,
		// outside the test binary's process group.
		self, _ := os.Executable()
		member := exec.Command(self)
		member.Env = append(os.Environ(), fakeEnv+"=member")
		member.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := member.Start(); err != nil {
			return fail("%v", err)
		}
		fmt.Printf("=== RUN   TestFake\n    fake_test.go:3: waiting for the member\n")
		select {}
	case "member":
		// /proc is the host's, so /proc/self names the pid the outer
		// test can check, also from inside a PID namespace.
		pid, err := os.Readlink("/proc/self")
		if err != nil {
			return 1
		}
		tmp := os.Getenv(pidFileEnv) + ".tmp"
		os.WriteFile(tmp, []byte(pid), 0o644)
		os.Rename(tmp, os.Getenv(pidFileEnv))
		select {}
	case "fresh":
		if _, err := os.Stat("default.etcd"); err == nil {
			return fail("default.etcd from an earlier test is still here")
		}
		if err := os.Mkdir("default.etcd", 0o755); err != nil {
			return fail("%v", err)
		}
		if _, err := os.Stat("../fixtures/ca.crt"); err != nil {
			return fail("fixtures: %v", err)
		}
		if _, err := os.Stat("../../etcd.conf.yml.sample"); err != nil {
			return fail("example config: %v", err)
		}
		if v := os.Getenv("ETCD_LOG_LEVEL"); v != "" {
			return fail("ETCD_LOG_LEVEL=%s reached the test", v)
		}
		wd, _ := os.Getwd()
		if tmp := os.Getenv("TMPDIR"); filepath.Join(filepath.Dir(filepath.Dir(wd)), "tmp") != tmp {
			return fail("TMPDIR %s is not the test's own (cwd %s)", tmp, wd)
		}
	case "port":
		// The port the outer test holds on the machine's loopback is free
		// on the namespace's own, which is up.
		l, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv(portEnv))
		if err != nil {
			return fail("listen: %v", err)
		}
		defer l.Close()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return fail("dial: %v", err)
		}
		c.Close()
		// The node IP as TestEtcdPeerLocalAddr finds it, and reachable.
		u, err := net.Dial("udp", "8.8.8.8:80")
		if err != nil {
			return fail("no default route: %v", err)
		}
		ip := u.LocalAddr().(*net.UDPAddr).IP
		u.Close()
		if !ip.Equal(hostIP) {
			return fail("node IP %v, want %v", ip, hostIP)
		}
		l2, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			return fail("listen: %v", err)
		}
		defer l2.Close()
		_, port, _ := net.SplitHostPort(l2.Addr().String())
		c, err = net.Dial("tcp", net.JoinHostPort(ip.String(), port))
		if err != nil {
			return fail("dial the node IP: %v", err)
		}
		c.Close()
	default:
		return fail("unknown mode %q", mode)
	}
	fmt.Printf("=== RUN   TestFake\n--- PASS: TestFake (0.00s)\nPASS\n")
	return 0
}

// newFakeRunner is a runner whose test binary is this one, in mode.
func newFakeRunner(t *testing.T, mode string, isolate bool) *runner {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "tests")
	if err := os.MkdirAll(filepath.Join(src, "fixtures"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(src, "fixtures", "ca.crt"), filepath.Join(src, "..", "etcd.conf.yml.sample")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if isolate {
		if err := namespacesWork(); err != nil {
			t.Fatalf("new PID and network namespaces are needed (run as root, as make test does): %v", err)
		}
	}
	t.Setenv(fakeEnv, mode)
	logs := t.TempDir()
	return &runner{
		testBin: self, srcDir: src, binDir: "/nonexistent", workRoot: t.TempDir(), logDir: logs,
		limit: time.Hour, isolate: isolate,
	}
}

// waitFor polls cond; the deadline only bounds a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A test binary whose member escaped its process group (as etcd's members
// do, through a pty) is stopped with all its processes, and reported as a
// timeout with its last output.
func TestWatchdogKillsEveryProcess(t *testing.T) {
	if err := becomeSubreaper(); err != nil {
		t.Fatal(err)
	}
	for _, isolate := range []bool{false, true} {
		t.Run(fmt.Sprintf("namespaces=%v", isolate), func(t *testing.T) {
			r := newFakeRunner(t, "hang", isolate)
			pidFile := filepath.Join(t.TempDir(), "member.pid")
			t.Setenv(pidFileEnv, pidFile)
			var memberPid int
			// Fire the watchdog once the member runs: its limit is then
			// passed by construction, whatever the machine's speed.
			r.watchdog = func(_ time.Duration, kill func()) func() {
				go func() {
					waitFor(t, "the member's pid file", func() bool {
						b, err := os.ReadFile(pidFile)
						if err != nil {
							return false
						}
						memberPid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
						return memberPid > 0
					})
					kill()
				}()
				return func() {}
			}
			res := r.runOne(entry{Name: "TestFake", Part: partMustPass}, 0)
			if res.Result != resTimeout || !strings.Contains(res.First, "fake_test.go:3: waiting for the member") {
				t.Fatalf("got %+v, want TIMEOUT with the last output", res.outcome)
			}
			if processAlive(memberPid) {
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", memberPid))
				t.Fatalf("member %d survived the watchdog (stat %s)", memberPid, st)
			}
		})
	}
}

// Each test starts in a new directory laid out as etcd's tests expect, so
// a default.etcd left by one cannot reach the next; ETCD_* variables are
// not passed on.
func TestEachTestGetsAFreshDirectory(t *testing.T) {
	r := newFakeRunner(t, "fresh", false)
	t.Setenv("ETCD_LOG_LEVEL", "debug")
	for i := 0; i < 2; i++ {
		// The same directory both times, kept after each run.
		code, killed, err := r.exec(entry{Name: "TestFake"}, filepath.Join(r.workRoot, "same"), filepath.Join(r.logDir, "fresh.log"))
		out, _ := os.ReadFile(filepath.Join(r.logDir, "fresh.log"))
		if err != nil || code != 0 || killed {
			t.Fatalf("run %d: code %d killed %v err %v\n%s", i, code, killed, err, out)
		}
	}
}

// In its namespace a test has a loopback of its own: a port held on the
// machine is free there (fixed ports cannot collide with another run), and
// a node IP besides 127.0.0.1 that the default route leaves from.
func TestNamespaceHasItsOwnLoopback(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := newFakeRunner(t, "port", true)
	t.Setenv(portEnv, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	res := r.runOne(entry{Name: "TestFake", Part: partMustPass}, 0)
	if res.Result != resPass {
		out, _ := os.ReadFile(res.Log)
		t.Fatalf("got %+v\n%s", res.outcome, out)
	}
}

// processAlive reports whether pid still runs. A zombie (killed, its exit
// status not yet collected by the subreaper's reaper) has stopped running
// and counts as dead: kill(pid, 0) still succeeds on it.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself hold spaces or parentheses.
	i := strings.LastIndexByte(string(st), ')')
	if i < 0 || i+2 >= len(st) {
		return true
	}
	state := st[i+2]
	return state != 'Z' && state != 'X'
}
