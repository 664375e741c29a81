package e2e

// The grpc-proxy differential test: the single-member
// differential scenarios that are pure etcdctl sessions (no server flags,
// no restarts, no custom actions) run through `etcd grpc-proxy start` in
// front of a 3-member etcd 3.7.3 cluster (side A) and through `strata
// grpc-proxy start` in front of a 3-member Strata cluster (side B); the
// normalized transcripts must be identical. Member list through the
// proxy is one of the steps: both list the proxy itself.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// proxyScenarios are the scenarios a proxy can run: no server flags, no
// prepared files, plain http, and at most two custom steps (actions on the
// server itself: its metrics, its data dir), which are skipped on both
// sides.
func proxyScenarios() []scenario {
	var out []scenario
	for _, sc := range scenarios() {
		if len(sc.flags) > 0 || sc.prepare != nil || sc.scheme != "" {
			continue
		}
		custom := 0
		for _, st := range sc.steps {
			if serverStep(st) {
				custom++
			}
		}
		if custom <= 2 {
			out = append(out, sc)
		}
	}
	return out
}

// serverStep reports whether st acts on the server process itself (a
// restart, its metrics port) rather than through the client API.
func serverStep(st step) bool {
	if st.run != nil && !strings.HasPrefix(st.show, "(poll ") && st.show != "stat snap.db" {
		return true
	}
	for _, a := range st.ctl {
		if strings.Contains(a, "${metrics}") {
			return true
		}
	}
	return false
}

func TestProxyDiff(t *testing.T) {
	b := needBins(t)
	binB := strataTarget(t)
	scs := proxyScenarios()
	if len(scs) < 3 {
		t.Fatalf("only %d scenarios run through a proxy", len(scs))
	}
	var names []string
	for _, sc := range scs {
		names = append(names, sc.name)
	}
	t.Logf("scenarios through the proxies: %s", strings.Join(names, ", "))
	type run struct {
		sc    scenario
		name  string
		flags []string
	}
	// make test runs the scenarios where etcd's side is deterministic;
	// auth (whose simple tokens etcd's round-robin proxy sometimes takes to
	// a member that did not issue them) and the namespaced watch and lease
	// runs are in make proxy-diff (STRATA_PROXY_DIFF=all).
	all := os.Getenv("STRATA_PROXY_DIFF") == "all"
	var runs []run
	for _, sc := range scs {
		if all || sc.name != "auth" {
			runs = append(runs, run{sc, sc.name, nil})
		}
	}
	// The client-data scenarios once more with --namespace on both
	// proxies: keys go in with the prefix and come back without it.
	for _, sc := range scs {
		if sc.name == "kv" || all && (sc.name == "watch" || sc.name == "lease") {
			runs = append(runs, run{sc, sc.name + "-namespace", []string{"--namespace=/tenant-a/"}})
		}
	}
	for _, r := range runs {
		sc := r.sc
		t.Run(r.name, func(t *testing.T) {
			start := time.Now()
			var a, bb *side
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); a = proxySide(t, "A", b.Etcd, b, r.flags) }()
			go func() { defer wg.Done(); bb = proxySide(t, "B", binB, b, r.flags) }()
			wg.Wait()
			if a == nil || bb == nil {
				t.FailNow()
			}
			diffs, known := 0, 0
			skipped := 0
			for _, st := range sc.steps {
				if serverStep(st) {
					skipped++
					continue
				}
				if st.sleep > 0 {
					time.Sleep(st.sleep)
					continue
				}
				ra, rb := proxyNorm(a.exec(t, st)), proxyNorm(bb.exec(t, st))
				if proxySortLines[st.name] || listsLeases(st) {
					ra, rb = sortedLines(sortedJSONLeases(ra)), sortedLines(sortedJSONLeases(rb))
				}
				why, ok := proxyKnownDiffs[st.name]
				if strings.Contains(ra, "invalid auth token") && !strings.Contains(rb, "invalid auth token") {
					// etcd's proxy sent the call to a member that did not
					// issue the caller's simple token (see reRetriedToken).
					why, ok = "etcd's proxy reached a member that did not issue the caller's simple token", true
				}
				if strings.HasPrefix(st.name, "endpoint status") {
					why, ok = proxyKnownDiffs["endpoint status"], true
				}
				if ok && ra != rb {
					known++
					t.Logf("step %q differs as documented: %s", st.name, why)
					continue
				}
				if ra != rb {
					diffs++
					t.Errorf("step %q differs:\n%s", st.name, harness.UnifiedDiff("A (etcd grpc-proxy)", "B (strata grpc-proxy)", ra, rb))
				}
			}
			if len(r.flags) > 0 {
				// The keys are in the cluster under the namespace, the
				// same number on both sides.
				counts := [2]string{}
				for i, sd := range []*side{a, bb} {
					direct := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{sd.vars["member"]}}
					res := direct.Run("", "get", "--prefix", "/tenant-a/", "--count-only", "-w", "fields")
					m := regexp.MustCompile(`"Count" : (\d+)`).FindStringSubmatch(res.Stdout)
					if res.Code != 0 || m == nil {
						t.Fatalf("side %s: get --prefix /tenant-a/ on a member: %s", sd.label, res)
					}
					counts[i] = m[1]
				}
				// (The lease scenario ends with its keys expired or revoked.)
				if counts[0] != counts[1] || counts[1] == "0" && sc.name != "lease" {
					t.Errorf("keys under the namespace in the cluster: etcd %s, strata %s", counts[0], counts[1])
				}
				t.Logf("%s keys under /tenant-a/ in each cluster", counts[1])
			}
			t.Logf("PROXY-DIFF %s: %d steps through the proxies (%d on the server itself skipped), %d mismatches, %d documented differences, %v",
				r.name, len(sc.steps)-skipped, skipped, diffs, known, time.Since(start).Round(time.Millisecond))
		})
	}
}

// reAnswering finds the id of the member that answered, in response
// headers: etcd's proxy spreads requests over the members (clientv3's
// round robin), Strata's sends them to one and moves on when it fails,
// so which member answers is not compared.
var reAnswering = regexp.MustCompile(`((?i)"?member_?id"?\s*[:=]\s*"?)<id[123]>`)

// reRetriedToken is clientv3's log line when a member refused the
// caller's simple token and it authenticated again: etcd's proxy spreads
// requests over the members and a simple token is valid on the member
// that issued it only, so whether it appears depends on the spreading.
var reRetriedToken = regexp.MustCompile(`(?m)^! \{"error":"rpc error: code = \w+ desc = etcdserver: invalid auth token".*"msg":"retrying of unary invoker failed"\}\n`)

// reLeaseKey finds lock and election keys, named after the lease of
// their session: through etcd's proxy lease ids come from whichever
// member granted them, so their order (and so their <idN> labels) is
// not compared, only that such a key is there.
var reLeaseKey = regexp.MustCompile(`\b(my\w*/)<id\d+>`)

func proxyNorm(s string) string {
	s = reLeaseKey.ReplaceAllString(s, "${1}<lease>")
	s = reAnswering.ReplaceAllString(s, "${1}<member>")
	return reRetriedToken.ReplaceAllString(s, "")
}

// proxyKnownDiffs are the steps where the two proxies differ by design,
// not compared (each is logged). Status answers for whichever member the
// proxy reached. And etcd's proxy renews a client's lease through its own clientv3 lessor,
// with the proxy's identity, so the caller's permission to the lease's
// keys is never checked and the TTL it answers is what is left on the
// lessor's last renewal; Strata's proxy forwards the caller's keep-alive,
// which the member checks and renews to the full TTL, as without a proxy.
var proxyKnownDiffs = map[string]string{
	"endpoint status":                            "which member answers Status through the proxy (its id, whether it leads): etcd's proxy spreads requests, Strata's uses one member",
	"endpoint status --cluster":                  "the same: the proxy's own endpoint answered by whichever member",
	"alice keep-alive --once (denied: no write)": "keep-alive through etcd's proxy skips the caller's permission check",
	"alice keep-alive --once (denied)":           "keep-alive through etcd's proxy skips the caller's permission check",
	"move-leader to a non-member":                "the refusal depends on whether the member the proxy reached leads (\"not leader\" or \"bad leader transferee\")",
	"root keep-alive --once":                     "etcd's proxy answers the TTL left since its lessor's last renewal",
	"member promote an unsynced learner":         "etcd 3.7's proxy answers MemberPromote \"not implemented\" (a TODO in its source); Strata's forwards it to the members",
}

// proxySortLines are steps that list keys named after lease ids: their
// order follows the ids, which through etcd's proxy come from whichever
// member granted each lease (ids carry the member), so only the set of
// lines is compared.
var proxySortLines = map[string]bool{"lock waiter blocked": true, "election keys": true}

// listsLeases reports whether st is `lease list`: leases come out in id
// order, and through etcd's proxy the ids carry whichever member granted
// each, so only the set of lines is compared.
func listsLeases(st step) bool {
	for i := 0; i+1 < len(st.ctl); i++ {
		if st.ctl[i] == "lease" && st.ctl[i+1] == "list" {
			return true
		}
	}
	return false
}

var reJSONLeases = regexp.MustCompile(`"leases":\[([^\]]*)\]`)

// sortedJSONLeases sorts the entries of `lease list -w json`'s leases
// array, the one-line form of what sortedLines does for the table.
func sortedJSONLeases(s string) string {
	return reJSONLeases.ReplaceAllStringFunc(s, func(m string) string {
		inner := reJSONLeases.FindStringSubmatch(m)[1]
		if inner == "" {
			return m
		}
		entries := strings.Split(inner, "},{")
		for i := range entries {
			entries[i] = strings.Trim(entries[i], "{}")
		}
		sort.Strings(entries)
		return `"leases":[{` + strings.Join(entries, "},{") + `}]`
	})
}

func sortedLines(s string) string {
	l := strings.Split(s, "\n")
	sort.Strings(l)
	return strings.Join(l, "\n")
}

// proxySide starts a 3-member cluster of bin and bin's grpc-proxy in
// front of it, and returns the side that talks to the proxy. It reports
// failures with t.Error (it runs beside the other side) and returns nil.
func proxySide(t *testing.T, label, bin string, b *harness.Bins, flags []string) *side {
	dir := filepath.Join(t.TempDir(), label)
	c, err := harness.NewCluster(bin, dir, 3, clusterFlags)
	if err != nil {
		t.Error(err)
		return nil
	}
	t.Cleanup(func() { _ = c.Stop() })
	if err := c.Start(); err != nil {
		t.Errorf("side %s: %v", label, err)
		return nil
	}
	ports, err := harness.FreePorts(1)
	if err != nil {
		t.Error(err)
		return nil
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, strings.TrimPrefix(m.ClientURL, "http://"))
	}
	var out syncBuffer
	px := exec.Command(bin, append([]string{"grpc-proxy", "start", "--endpoints=" + strings.Join(eps, ","),
		"--listen-addr=" + addr, "--advertise-client-url=" + addr}, flags...)...)
	px.Stdout, px.Stderr = &out, &out
	if err := px.Start(); err != nil {
		t.Error(err)
		return nil
	}
	exited := make(chan struct{})
	go func() { _ = px.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = px.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("side %s grpc-proxy output:\n%s", label, tail(out.String(), 30))
		}
	})
	if err := poll.Check(func() bool { return strings.Contains(out.String(), "started gRPC proxy") }); err != nil {
		t.Errorf("side %s: the proxy did not start: %v\n%s", label, err, out.String())
		return nil
	}
	s := &side{
		label: label, bins: b, dir: dir, norm: harness.NewNormalizer(),
		vars: map[string]string{}, bg: map[string]*harness.Proc{}, bgCmd: map[string]string{},
	}
	// Member ids are numbered by member name (<id1> is m1 on both
	// sides), then the cluster id: which member answers through the
	// proxy is then compared too.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Members[0].ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Error(err)
		return nil
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Errorf("side %s: member list: %v", label, err)
		return nil
	}
	byName := map[string]uint64{}
	for _, m := range ml.Members {
		byName[m.Name] = m.ID
	}
	var ids []uint64
	for _, m := range c.Members {
		ids = append(ids, byName[m.Name()])
	}
	s.norm.AssignIDs(append(ids, ml.Header.ClusterId)...)
	s.ctl = &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{addr}}
	s.vars["dir"] = dir
	s.vars["member"] = c.Members[0].ClientURL
	s.vars["client"] = "http://" + addr
	s.vars["plainclient"] = "http://" + addr
	s.norm.Literal("http://"+addr, "<client>")
	s.norm.Literal(addr, "<client-addr>")
	s.norm.Literal(dir, "<dir>")
	if h, err := os.Hostname(); err == nil && h != "" {
		s.norm.Literal(h, "<hostname>")
	}
	return s
}
