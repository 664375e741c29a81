package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// grace is how long past the per-test limit the watchdog waits before it
// kills: the test binary gets -test.timeout=limit and so first panics with
// every goroutine's stack (which shows where it hung) into the log.
const grace = 20 * time.Second

// runner runs one listed test at a time, each in its own process (tree),
// working directory and, when it can, its own PID and network namespaces.
//
// Why namespaces: etcd's framework starts every member through a pty, so
// each member is a session leader of its own and escapes the test binary's
// process group; killing the group on a timeout would leave members
// running and holding their ports. The first process of a new PID
// namespace takes every process of the namespace with it when it dies, and
// a new network namespace gives each test its own loopback, so a leftover
// member, or another engineer's run on the same machine, can never hold a
// port the next test needs (the framework uses fixed ports from 20000).
// Without the privilege for namespaces the runner is a child subreaper and
// kills every descendant it finds in /proc (fallback, ports shared).
type runner struct {
	testBin  string // etcd's e2e test binary
	srcDir   string // the tests module (fixtures/, and ../etcd.conf.yml.sample)
	binDir   string // etcd, etcdctl, etcdutl; absolute
	workRoot string // fresh per-test directories are made here
	logDir   string // each test's full output
	limit    time.Duration
	keep     bool          // keep the working directory of a test that did not pass
	isolate  bool          // run in new PID and network namespaces
	grace    time.Duration // after limit, before the watchdog kills
	// watchdog calls kill once d has passed, unless the returned stop is
	// called first; nil means a timer (tests replace it to kill on a
	// condition instead of a time).
	watchdog func(d time.Duration, kill func()) (stop func())
	src      *sourceIndex

	mu      sync.Mutex
	current *exec.Cmd // the running test, for stop
	stopped bool
}

// result is one test's run.
type result struct {
	entry
	outcome
	Secs float64
	Log  string
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

func fileName(test string) string {
	return unsafeChars.ReplaceAllString(strings.ReplaceAll(test, "/", "__"), "_")
}

// runOne runs e from a fresh directory and judges its output.
func (r *runner) runOne(e entry, seq int) result {
	res := result{entry: e}
	// Short: unix sockets in t.TempDir() must fit in 108 bytes
	// (TestEtcdAdvertiseClientUnix puts one there).
	dir := filepath.Join(r.workRoot, fmt.Sprintf("%03d", seq))
	res.Log = filepath.Join(r.logDir, fileName(e.Name)+".log")
	start := time.Now()
	code, killed, err := r.exec(e, dir, res.Log)
	res.Secs = time.Since(start).Seconds()
	if err != nil {
		res.outcome = outcome{Result: resFail, First: "runner: " + err.Error()}
		return res
	}
	out, _ := os.ReadFile(res.Log)
	res.outcome = judge(out, e.Name, code, killed, r.src)
	if res.Result == resPass || !r.keep {
		os.RemoveAll(dir)
	}
	return res
}

// layout makes dir as the test binary expects its surroundings: the
// working directory is tests/e2e, fixtures are found at ../fixtures, the
// example config at ../../etcd.conf.yml.sample; tmp/ is the test's TMPDIR.
// A test that starts a member without --data-dir leaves default.etcd (or
// default.strata) in its working directory, so every test gets new ones.
func (r *runner) layout(dir string) (cwd string, err error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	cwd = filepath.Join(dir, "tests", "e2e")
	for _, d := range []string{cwd, filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	if err := copyTree(filepath.Join(r.srcDir, "fixtures"), filepath.Join(dir, "tests", "fixtures")); err != nil {
		return "", err
	}
	sample := filepath.Join(r.srcDir, "..", "etcd.conf.yml.sample")
	if _, err := os.Stat(sample); err == nil {
		if err := copyFile(sample, filepath.Join(dir, "etcd.conf.yml.sample")); err != nil {
			return "", err
		}
	}
	return cwd, nil
}

// exec runs the test binary for e with its output in logPath, and returns
// its exit code and whether the watchdog had to kill it.
func (r *runner) exec(e entry, dir, logPath string) (code int, killed bool, err error) {
	cwd, err := r.layout(dir)
	if err != nil {
		return 0, false, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return 0, false, err
	}
	defer logf.Close()
	args := []string{"-test.run", e.RunPattern(), "-test.v", "-test.timeout", r.limit.String(), "-bin-dir", r.binDir}
	fmt.Fprintf(logf, "# %s %s (in %s)\n", r.testBin, strings.Join(args, " "), cwd)
	var cmd *exec.Cmd
	if r.isolate {
		self, err := os.Executable()
		if err != nil {
			return 0, false, err
		}
		cmd = exec.Command(self, append([]string{nsExecArg, r.testBin}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNET,
			Pdeathsig:  syscall.SIGKILL,
		}
	} else {
		cmd = exec.Command(r.testBin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	cmd.Dir = cwd
	cmd.Env = testEnv(filepath.Join(dir, "tmp"))
	// The log file itself, not a pipe: a member that outlives the test
	// binary cannot keep Wait from returning.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Stdin = nil

	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return 0, false, errors.New("interrupted")
	}
	if err := cmd.Start(); err != nil {
		r.mu.Unlock()
		return 0, false, err
	}
	r.current = cmd
	r.mu.Unlock()

	var kill sync.Once
	var wasKilled bool
	watchdog := r.watchdog
	if watchdog == nil {
		watchdog = func(d time.Duration, f func()) func() {
			t := time.AfterFunc(d, f)
			return func() { t.Stop() }
		}
	}
	stopWatchdog := watchdog(r.limit+r.grace, func() {
		kill.Do(func() { wasKilled = true; r.killAll(cmd) })
	})
	werr := cmd.Wait()
	stopWatchdog()
	kill.Do(func() {}) // no kill after this point
	left := r.reap()
	r.mu.Lock()
	r.current = nil
	r.mu.Unlock()
	if left > 0 {
		fmt.Fprintf(logf, "# runner: killed %d process(es) left behind by the test\n", left)
	}
	code = 0
	if werr != nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			return 0, false, werr
		}
		code = ee.ExitCode()
	}
	return code, wasKilled, nil
}

// killAll stops a test: in a namespace, killing its first process kills
// the namespace; otherwise every descendant of the runner.
func (r *runner) killAll(cmd *exec.Cmd) {
	if cmd.Process != nil {
		cmd.Process.Kill()
	}
	if !r.isolate {
		killDescendants()
	}
}

// stop kills the running test and makes the next exec fail (SIGINT).
func (r *runner) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.current != nil {
		r.killAll(r.current)
	}
}

func (r *runner) isStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

// reap kills what the test left behind (fallback mode) and collects the
// exit status of every process reparented to the runner; it returns how
// many it had to kill.
func (r *runner) reap() int {
	n := 0
	if !r.isolate {
		n = killDescendants()
	}
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid > 0 {
			continue
		}
		if err == syscall.EINTR {
			continue
		}
		if n > 0 && pid == 0 {
			// Killed processes take a moment to die; wait for them so
			// their ports are free before the next test.
			pid, err = syscall.Wait4(-1, &ws, 0, nil)
			if pid > 0 {
				continue
			}
		}
		return n
	}
}

// testEnv is the runner's environment without the ETCD_* and ETCDCTL_*
// variables (etcd reads them as flags: a user's ETCDCTL_ENDPOINTS would
// change every test) and with TMPDIR in the test's own directory.
func testEnv(tmp string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "ETCD_") || strings.HasPrefix(k, "ETCDCTL_") || k == "TMPDIR" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "TMPDIR="+tmp)
}

// descendants lists every process whose parent chain reaches pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, de := range ents {
		p, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + de.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parens.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// killDescendants SIGKILLs every live descendant of the runner and returns
// how many there were (zombies already dead are not counted).
func killDescendants() int {
	n := 0
	for _, p := range descendants(os.Getpid()) {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat"); err == nil {
			s := string(b)
			if i := strings.LastIndexByte(s, ')'); i >= 0 && strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z") {
				continue
			}
		}
		if syscall.Kill(p, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		return copyFile(p, dst)
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm()|0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
