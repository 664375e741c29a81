package e2e

// The differential test: the same etcdctl 3.7 commands run against two
// servers started with identical flags, side A (always real etcd 3.7) and
// side B ($STRATA_E2E_TARGET, default etcd as well, so the harness proves its
// own normalization). Every step's normalized stdout, stderr and exit code
// must match. Scenarios are tables of steps in scenarios_*_test.go.
//
//	STRATA_E2E_TARGET=../bin/strata go test -run TestDiff -v .
//	STRATA_E2E_OUT=/tmp/out   also writes each side's transcript there
//	STRATA_E2E_BIN=DIR        where build-etcd.sh put the binaries

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-db/strata/e2e/harness"
)

var (
	binsOnce sync.Once
	bins     *harness.Bins
	binsErr  error
	binsLog  bytes.Buffer
)

// needBins returns the reference binaries, building them once if needed
// (unless STRATA_E2E_NOBUILD is set). When they cannot be had (no
// toolchain, no module proxy) the test fails with the reason: a missing
// prerequisite is a failure, never a skip.
func needBins(t testing.TB) *harness.Bins {
	t.Helper()
	binsOnce.Do(func() {
		bins, binsErr = harness.FindBinaries(os.Getenv("STRATA_E2E_NOBUILD") == "", &binsLog)
	})
	if binsErr != nil {
		t.Fatalf("etcd reference binaries unavailable (run e2e/build-etcd.sh, or make e2e-bin, and see its output): %v\n%s", binsErr, tail(binsLog.String(), 20))
	}
	return bins
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// targetBin is side B's server binary.
func targetBin(t testing.TB, b *harness.Bins) string {
	p := os.Getenv("STRATA_E2E_TARGET")
	if p == "" {
		return b.Etcd
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("STRATA_E2E_TARGET: %v", err)
	}
	return abs
}

// step is one row of a scenario. Exactly one of ctl, run, bg, stop or sleep
// says what it does.
type step struct {
	name string
	// ctl is an etcdctl command; ${var} is expanded per side (see vars).
	ctl   []string
	stdin string
	// ids are extra patterns whose group 1 is a hex id to mask, e.g. the
	// lease suffix of a lock key.
	ids []*regexp.Regexp
	// capture stores group 1 of the regexp's first match in stdout under
	// the name (per side), for later ${name} expansion.
	capture map[string]*regexp.Regexp
	// after, if set, turns the captured stdout into more vars.
	after func(stdout string, vars map[string]string)
	// bg starts ctl in the background under this name; nothing is
	// recorded until stop.
	bg string
	// stop ends the background command of that name once until holds for
	// its stdout (or after 10s) and records its output. Without until it
	// waits up to 10s for the command to exit by itself. The exit status is
	// recorded only with exit set: an interrupted tool's status says little.
	stop  string
	until func(stdout string) bool
	exit  bool
	// wait blocks until until holds for the background command's stdout,
	// recording nothing (the output is recorded at stop).
	wait string
	// run is a custom action; its result is recorded like a command's.
	run func(t *testing.T, s *side) harness.Result
	// show is the command line recorded for run steps.
	show string
	// quiet records only the exit code, for outputs that legitimately
	// differ (revisions after a timing-dependent number of writes).
	quiet bool
	// refusal is for connections a server must refuse (TLS): the transport
	// error text depends on when the peer's alert or reset arrives, so only
	// stdout, etcdctl's final "Error:" line and whether the exit status is
	// zero are recorded.
	refusal bool
	// sleep pauses once for both sides (for TTLs to expire).
	sleep time.Duration
	// retryOn reruns ctl while its output contains this text: a refusal
	// that lasts a known while, the same on both sides (a member add is
	// "unhealthy cluster" until the member has been connected to its
	// peers for etcd's 5 s health interval), so that what is compared is
	// the answer after it.
	retryOn string
}

type scenario struct {
	name  string
	flags []string // extra server flags, the same on both sides; ${vars} from prepare
	// scheme of the client URL: "http" (default) or "https".
	scheme string
	// prepare runs once before the servers start, in a directory both
	// sides share (certificates); the vars it returns expand in flags and
	// steps, and the directory is masked as <shared>.
	prepare func(t *testing.T, dir string) map[string]string
	steps   []step
}

// side is one server and everything the steps know about it.
type side struct {
	label string
	srv   *harness.Server
	ctl   *harness.Ctl
	bins  *harness.Bins
	dir   string
	norm  *harness.Normalizer
	vars  map[string]string
	bg    map[string]*harness.Proc
	bgCmd map[string]string // command line of each background command
	out   strings.Builder   // the normalized transcript
}

var reVar = regexp.MustCompile(`\$\{(\w+)\}`)

func (s *side) expand(a string) string {
	return reVar.ReplaceAllStringFunc(a, func(m string) string {
		k := m[2 : len(m)-1]
		if v, ok := s.vars[k]; ok {
			return v
		}
		return m
	})
}

func startSide(t *testing.T, label, bin string, b *harness.Bins, sc scenario, shared string, pvars map[string]string, extra []string) *side {
	dir := filepath.Join(t.TempDir(), label)
	flags := make([]string, 0, len(sc.flags)+len(extra))
	for _, f := range append(sc.flags[:len(sc.flags):len(sc.flags)], extra...) {
		flags = append(flags, reVar.ReplaceAllStringFunc(f, func(m string) string {
			if v, ok := pvars[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		}))
	}
	srv, err := harness.NewServer(harness.ServerConfig{Bin: bin, Dir: dir, Flags: flags, Scheme: sc.scheme})
	if err != nil {
		t.Fatal(err)
	}
	s := &side{
		label: label, srv: srv, bins: b, dir: dir,
		norm:  harness.NewNormalizer(),
		vars:  map[string]string{},
		bg:    map[string]*harness.Proc{},
		bgCmd: map[string]string{},
	}
	for k, v := range pvars {
		s.vars[k] = v
	}
	s.norm.Literal(dir, "<dir>")
	s.norm.Literal(shared, "<shared>")
	return s
}

// started fills in what depends on the server's final ports (Start may
// have moved them).
func (s *side) started() {
	srv := s.srv
	s.ctl = &harness.Ctl{Bin: s.bins.Etcdctl, Endpoints: []string{srv.ClientURL}}
	s.vars["dir"] = s.dir
	s.vars["client"] = srv.ClientURL
	s.vars["metrics"] = srv.MetricsURL
	s.vars["plainclient"] = "http://" + srv.ClientAddr
	s.norm.Literal(srv.ClientURL, "<client>")
	s.norm.Literal(srv.PeerURL, "<peer>")
	s.norm.Literal(srv.MetricsURL, "<metrics>")
	s.norm.Literal(srv.ClientAddr, "<client-addr>")
}

// record appends one step's normalized result to the transcript and returns
// the text added.
func (s *side) record(st step, cmdline string, r harness.Result, withExit bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n$ %s\n", st.name, cmdline)
	if st.quiet {
		r.Stdout, r.Stderr = "(output not compared)\n", ""
	}
	if st.refusal {
		var keep []string
		for _, l := range strings.Split(r.Stderr, "\n") {
			if strings.HasPrefix(l, "Error:") {
				keep = append(keep, l)
			}
		}
		r.Stderr = strings.Join(keep, "\n")
		if r.Code != 0 {
			r.Code, r.Signal = 1, "(nonzero)"
		}
	}
	if out := s.norm.Normalize(r.Stdout, st.ids...); out != "" {
		b.WriteString(strings.TrimRight(out, "\n"))
		b.WriteByte('\n')
	}
	if errs := s.norm.Normalize(r.Stderr, st.ids...); errs != "" {
		for _, l := range strings.Split(strings.TrimRight(errs, "\n"), "\n") {
			b.WriteString("! " + l + "\n")
		}
	}
	if r.TimedOut {
		b.WriteString("timed out\n")
	}
	if withExit {
		fmt.Fprintf(&b, "exit %d %s\n", r.Code, r.Signal)
	}
	s.out.WriteString(b.String())
	return b.String()
}

// exec runs one step on one side; it returns the recorded text ("" when the
// step records nothing).
func (s *side) exec(t *testing.T, st step) string {
	switch {
	case st.bg != "":
		args := make([]string, len(st.ctl))
		for i, a := range st.ctl {
			args[i] = s.expand(a)
		}
		p, err := s.ctl.Start(s.expand(st.stdin), args...)
		if err != nil {
			t.Fatalf("%s: start %s: %v", s.label, st.name, err)
		}
		s.bg[st.bg] = p
		s.bgCmd[st.bg] = "etcdctl " + shellJoin(st.ctl) + " &"
		return ""
	case st.stop != "":
		p := s.bg[st.stop]
		if p == nil {
			t.Fatalf("%s: %s: no background command %q", s.label, st.name, st.stop)
		}
		delete(s.bg, st.stop)
		until := st.until
		if until == nil {
			until = func(string) bool { return false } // wait for exit
		}
		met := p.WaitOutput(until, 10*time.Second)
		r := p.Stop(3 * time.Second)
		if !met && st.until != nil {
			t.Logf("%s: %s: condition not met after 10s", s.label, st.name)
			r.Stdout += "(gave up waiting after 10s)\n"
		}
		return s.record(st, s.bgCmd[st.stop]+" (then stopped)", r, st.exit)
	case st.wait != "":
		p := s.bg[st.wait]
		if p == nil {
			t.Fatalf("%s: %s: no background command %q", s.label, st.name, st.wait)
		}
		if !p.WaitOutput(st.until, 10*time.Second) {
			t.Logf("%s: %s: condition not met after 10s; output so far %q", s.label, st.name, p.Stdout())
		}
		return ""
	case st.run != nil:
		r := st.run(t, s)
		return s.record(st, st.show, r, true)
	case len(st.ctl) > 0:
		args := make([]string, len(st.ctl))
		for i, a := range st.ctl {
			args[i] = s.expand(a)
		}
		run := func() harness.Result { return s.ctl.Run(s.expand(st.stdin), args...) }
		var r harness.Result
		if st.retryOn != "" {
			r = retryWhile(t, s.label+": "+st.name, st.retryOn, run)
		} else {
			r = run()
		}
		for k, re := range st.capture {
			if m := re.FindStringSubmatch(r.Stdout); m != nil {
				s.vars[k] = m[1]
			} else {
				t.Logf("%s: %s: capture %s: no match in %q", s.label, st.name, k, r.Stdout)
			}
		}
		if st.after != nil {
			st.after(r.Stdout, s.vars)
		}
		return s.record(st, "etcdctl "+shellJoin(st.ctl), r, true)
	}
	return ""
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\"$*?") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// runScenario starts a server pair, runs every step on A then on B, and
// reports each step whose normalized results differ.
func runScenario(t *testing.T, sc scenario) {
	b := needBins(t)
	start := time.Now()
	res := diffScenario(t, b, sc, targetBin(t, b), nil)
	for _, d := range res.diffs {
		t.Errorf("step %q differs (A=%s, B=%s):\n%s", d.step, res.a.srv.Bin(), res.b.srv.Bin(), d.diff)
	}
	if dir := os.Getenv("STRATA_E2E_OUT"); dir != "" {
		writeTranscripts(t, dir, sc.name, res.a, res.b)
	}
	if len(res.diffs) > 0 {
		t.Errorf("%s: %d of %d steps differ; the first is %q (later ones may follow from it)",
			sc.name, len(res.diffs), len(sc.steps), res.diffs[0].step)
		t.Logf("server logs: %s, %s", res.a.srv.LogPath, res.b.srv.LogPath)
		t.Logf("A transcript:\n%s", res.a.out.String())
	}
	t.Logf("%s: %d steps, %d mismatches, %v", sc.name, len(sc.steps), len(res.diffs), time.Since(start).Round(time.Millisecond))
}

type stepDiff struct{ step, diff string }

type scenarioResult struct {
	a, b  *side
	diffs []stepDiff
}

// diffScenario runs sc on etcd (A) and binB (B, with extraB appended to its
// flags; ${vars} from prepare expand in both) and returns the steps whose
// records differ.
func diffScenario(t *testing.T, b *harness.Bins, sc scenario, binB string, extraB []string) scenarioResult {
	shared := t.TempDir()
	var pvars map[string]string
	if sc.prepare != nil {
		pvars = sc.prepare(t, shared)
	}
	a := startSide(t, "A", b.Etcd, b, sc, shared, pvars, nil)
	bb := startSide(t, "B", binB, b, sc, shared, pvars, extraB)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range []*side{a, bb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.srv.Start()
		}()
	}
	wg.Wait()
	for i, s := range []*side{a, bb} {
		t.Cleanup(func() {
			for _, p := range s.bg {
				p.Stop(time.Second)
			}
			if err := s.srv.Stop(); err != nil {
				t.Logf("%s: stop: %v", s.label, err)
			}
		})
		if errs[i] != nil {
			t.Fatalf("side %s (%s): %v", s.label, s.srv.Bin(), errs[i])
		}
		s.started()
	}
	res := scenarioResult{a: a, b: bb}
	for _, st := range sc.steps {
		if st.sleep > 0 {
			time.Sleep(st.sleep)
			continue
		}
		ra := a.exec(t, st)
		rb := bb.exec(t, st)
		if ra != rb {
			res.diffs = append(res.diffs, stepDiff{st.name, harness.UnifiedDiff("A", "B", ra, rb)})
		}
	}
	return res
}

// TestDiffDetectsDifferences is the harness's negative control: side B runs
// etcd with a larger --max-txn-ops, so the 129-op txn succeeds there, and
// the comparison must catch exactly that step and what follows from it.
func TestDiffDetectsDifferences(t *testing.T) {
	b := needBins(t)
	sc := scenario{name: "negative-control", steps: []step{
		c("put", "put", "k", "v"),
		in("txn over op limit (129 ops)", txnOps(129), "txn"),
		c("get", "get", "k", "-w", "json"),
	}}
	res := diffScenario(t, b, sc, b.Etcd, []string{"--max-txn-ops=200"})
	var got []string
	for _, d := range res.diffs {
		got = append(got, d.step)
	}
	want := []string{"txn over op limit (129 ops)", "get"} // get: header revision moved
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("differing steps = %q, want %q\nA:\n%s\nB:\n%s", got, want, res.a.out.String(), res.b.out.String())
	}
	head := strings.SplitN(res.diffs[0].diff, "\n", 12)
	t.Logf("detected as expected:\n%s\n...", strings.Join(head[:len(head)-1], "\n"))
}

func writeTranscripts(t *testing.T, dir, name string, a, b *side) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Log(err)
		return
	}
	for _, s := range []*side{a, b} {
		p := filepath.Join(dir, name+"."+s.label+".txt")
		if err := os.WriteFile(p, []byte(s.out.String()), 0o644); err != nil {
			t.Log(err)
		}
	}
}

// curl makes an HTTP request with net/http (harness.HTTPRequest; no curl
// binary is needed) and returns what `curl -sS -w '\nHTTP %{http_code}\n'`
// prints: the body plus the HTTP status on a last line. Method POST when
// body != "". The steps keep curl's name and record the equivalent curl
// command line, so a reader can repeat a step by hand.
func curl(url, body string) harness.Result {
	r, err := harness.HTTPRequest{URL: url, Body: body}.Do()
	if err != nil {
		// Without TLS files only a malformed URL gets here: a mistake in
		// the step table, not something to record on both sides.
		panic(err)
	}
	return r
}

// curlArgs is curl with curl's TLS flags: --cacert FILE, --cert FILE and
// --key FILE. Any other flag fails the test (it would not be emulated).
func curlArgs(t *testing.T, url, body string, flags ...string) harness.Result {
	t.Helper()
	req := harness.HTTPRequest{URL: url, Body: body}
	if len(flags)%2 != 0 {
		t.Fatalf("curl flags %q: want pairs of flag and file", flags)
	}
	for i := 0; i < len(flags); i += 2 {
		switch flags[i] {
		case "--cacert":
			req.CACert = flags[i+1]
		case "--cert":
			req.Cert = flags[i+1]
		case "--key":
			req.Key = flags[i+1]
		default:
			t.Fatalf("curl flag %q is not emulated (only --cacert, --cert, --key)", flags[i])
		}
	}
	r, err := req.Do()
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return r
}

// curlStep is a run step for an HTTP request on the client port; path may
// use ${vars}.
func curlStep(name, path, body string) step {
	return step{
		name: name,
		show: "curl " + path + map[bool]string{true: " -d " + body, false: ""}[body != ""],
		run: func(t *testing.T, s *side) harness.Result {
			return curl(s.expand("${client}"+path), body)
		},
	}
}

// TestDiff runs every scenario.
func TestDiff(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) { runScenario(t, sc) })
	}
}
