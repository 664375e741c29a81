package e2e

// A 3-member cluster of real server processes ($STRATA_E2E_TARGET, etcd by
// default), driven with the real clientv3 and etcdctl: static bootstrap,
// a put on one member read on the others, SIGKILL of the leader and a new
// leader with writes continuing, the killed member restarting and catching
// up, a member catching up by snapshot after more than --snapshot-count
// entries, and the bootstrap refusal of a member that lost its data dir.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// clusterFlags are the seeds' local-cluster timings, shortened so a test
// does not wait out etcd's default election timeout, plus a small
// snapshot count so a stopped member falls behind the leader's log.
var clusterFlags = []string{
	"--heartbeat-interval=50", "--election-timeout=500",
	"--snapshot-count=100", "--snapshot-catchup-entries=20",
}

func startCluster(t *testing.T, bin string, flags []string) *harness.Cluster {
	t.Helper()
	c, err := harness.NewCluster(bin, t.TempDir(), 3, flags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
		if t.Failed() {
			for _, m := range c.Members {
				t.Logf("log of %s:\n%s", m.Name(), m.LogTail(60))
			}
		}
	})
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

func memberClient(t *testing.T, m *harness.Server) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// clusterLeader asks each running member for its status and returns the
// member all of them name as leader.
func clusterLeader(t *testing.T, c *harness.Cluster) *harness.Server {
	t.Helper()
	var lead *harness.Server
	poll.Until(t, "the running members to agree on a leader", func() bool {
		var id uint64
		byID := map[uint64]*harness.Server{}
		for _, m := range c.Members {
			if !m.Running() {
				continue
			}
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: time.Second, Logger: zap.NewNop()})
			if err != nil {
				return false
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cli.Status(ctx, m.ClientURL)
			cancel()
			cli.Close()
			if err != nil || st.Leader == 0 || (id != 0 && st.Leader != id) {
				return false
			}
			id = st.Leader
			byID[st.Header.MemberId] = m
		}
		lead = byID[id]
		return lead != nil
	})
	return lead
}

func putN(t *testing.T, cli *clientv3.Client, prefix string, n int) int64 {
	t.Helper()
	var rev int64
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
		resp, err := cli.Put(ctx, fmt.Sprintf("%s/%04d", prefix, i), fmt.Sprint(i))
		cancel()
		if err != nil {
			t.Fatalf("put %s/%04d: %v", prefix, i, err)
		}
		rev = resp.Header.Revision
	}
	return rev
}

func waitRev(t *testing.T, m *harness.Server, rev int64) {
	t.Helper()
	cli := memberClient(t, m)
	poll.Until(t, fmt.Sprintf("%s to reach revision %d", m.Name(), rev), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, "nothing", clientv3.WithSerializable())
		return err == nil && resp.Header.Revision >= rev
	})
}

func TestClusterLifecycle(t *testing.T) {
	b := needBins(t)
	c := startCluster(t, targetBin(t, b), clusterFlags)
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: c.ClientURLs()}

	// Static bootstrap: three started members, one leader.
	r := ctl.Run("", "member", "list")
	if r.Code != 0 || strings.Count(r.Stdout, ", started, ") != 3 {
		t.Fatalf("member list:\n%s", r)
	}
	for _, cmd := range [][]string{{"endpoint", "health", "--cluster"}, {"endpoint", "status", "--cluster"}} {
		if r := ctl.Run("", cmd...); r.Code != 0 {
			t.Fatalf("%v:\n%s", cmd, r)
		}
	}

	// A put on one member, read on the others (linearizable and, once
	// applied, serializable).
	m1 := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{c.Members[0].ClientURL}}
	if r := m1.Run("", "put", "k", "v1"); r.Code != 0 {
		t.Fatalf("put:\n%s", r)
	}
	for _, m := range c.Members[1:] {
		one := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{m.ClientURL}}
		if r := one.Run("", "get", "k", "--print-value-only"); r.Code != 0 || r.Stdout != "v1\n" {
			t.Fatalf("linearizable get on %s:\n%s", m.Name(), r)
		}
		poll.Until(t, "a serializable read of k on "+m.Name(), func() bool {
			r := one.Run("", "get", "k", "--print-value-only", "--consistency=s")
			return r.Code == 0 && r.Stdout == "v1\n"
		})
	}

	// SIGKILL the leader: the others elect a new one and writes continue
	// through them.
	old := clusterLeader(t, c)
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	lead := clusterLeader(t, c)
	if lead == old {
		t.Fatal("the killed member is still the leader")
	}
	var survivor *harness.Server
	for _, m := range c.Members {
		if m != old && m != lead {
			survivor = m
		}
	}
	rev := putN(t, memberClient(t, survivor), "after-kill", 20)

	// The killed member restarts and catches up from the leader's log.
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	waitRev(t, old, rev)

	// A member stopped while more than --snapshot-count entries are
	// written catches up by snapshot.
	lagging := survivor
	if err := lagging.Stop(); err != nil {
		t.Fatal(err)
	}
	rev = putN(t, memberClient(t, lead), "while-stopped", 250)
	if err := lagging.Start(); err != nil {
		t.Fatal(err)
	}
	waitRev(t, lagging, rev)

	// Every member holds the same data.
	hr := ctl.Run("", "endpoint", "hashkv", "--cluster", "-w", "json")
	if hr.Code != 0 {
		t.Fatalf("hashkv:\n%s", hr)
	}
	hashes := regexpAll(`"hash":(\d+)`, hr.Stdout)
	if len(hashes) != 3 || hashes[0] != hashes[1] || hashes[1] != hashes[2] {
		t.Fatalf("hashkv differs between members:\n%s", hr.Stdout)
	}
}

// TestClusterSnapshotCatchUpLogged checks what the operator sees when a
// member catches up by snapshot: the leader logs the snapshot it sent (the
// same line as etcd's) and the member the one it installed (etcd: "applied
// snapshot").
func TestClusterSnapshotCatchUpLogged(t *testing.T) {
	b := needBins(t)
	bin := targetBin(t, b)
	installed := "restored the state from a leader's snapshot"
	if bin == b.Etcd {
		installed = "applied snapshot"
	}
	c := startCluster(t, bin, clusterFlags)
	lead := clusterLeader(t, c)
	var lagging *harness.Server
	for _, m := range c.Members {
		if m != lead {
			lagging = m
			break
		}
	}
	if err := lagging.Stop(); err != nil {
		t.Fatal(err)
	}
	rev := putN(t, memberClient(t, lead), "k", 250)
	if err := lagging.Start(); err != nil {
		t.Fatal(err)
	}
	waitRev(t, lagging, rev)
	if !harnessLogHas(lagging, installed) {
		t.Fatalf("%s caught up without installing a snapshot; log:\n%s", lagging.Name(), lagging.LogTail(60))
	}
	if !harnessLogHas(lead, "sent database snapshot") {
		t.Fatalf("the leader's log shows no snapshot sent:\n%s", lead.LogTail(60))
	}
	// And etcd's metrics count it on both sides.
	if n := metricSum(t, lead, "etcd_network_snapshot_send_success"); n < 1 {
		t.Fatalf("the leader counts %v snapshots sent", n)
	}
	if n := metricSum(t, lagging, "etcd_network_snapshot_receive_success"); n < 1 {
		t.Fatalf("the lagging member counts %v snapshots received", n)
	}
}

// metricSum adds up every sample of family name on member m's metrics.
func metricSum(t *testing.T, m *harness.Server, name string) float64 {
	t.Helper()
	fams, err := harness.ScrapeMetrics(m.MetricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	f := fams[name]
	if f == nil {
		return 0
	}
	sum := 0.0
	for _, smp := range f.Samples {
		sum += smp.Value
	}
	return sum
}

// TestClusterBootstrapRefusesBootstrappedMember: a member whose data dir
// was lost, started again with --initial-cluster-state new while the
// others run, is refused with etcd's message.
func TestClusterBootstrapRefusesBootstrappedMember(t *testing.T) {
	b := needBins(t)
	c := startCluster(t, targetBin(t, b), clusterFlags)
	m := c.Members[2]
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := removeAll(m.DataDir); err != nil {
		t.Fatal(err)
	}
	err := m.Start()
	if err == nil {
		t.Fatal("a member with a lost data dir bootstrapped again")
	}
	if !harnessLogHas(m, "has already been bootstrapped") {
		t.Fatalf("no etcd refusal in the log:\n%s", m.LogTail(30))
	}
}

func regexpAll(expr, s string) []string {
	var out []string
	for _, m := range regexp.MustCompile(expr).FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

func harnessLogHas(m *harness.Server, text string) bool {
	b, err := os.ReadFile(m.LogPath)
	return err == nil && strings.Contains(string(b), text)
}

func removeAll(dir string) error { return os.RemoveAll(dir) }

// TestClusterPeerTLS: the cluster over mutual TLS on the peer port; a
// client presenting a certificate from another CA is refused by the peer
// listener; --peer-auto-tls forms a cluster too.
func TestClusterPeerTLS(t *testing.T) {
	b := needBins(t)
	bin := targetBin(t, b)
	dir := t.TempDir()
	ca, err := harness.NewCA(dir, "peer")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue("member", "member")
	if err != nil {
		t.Fatal(err)
	}
	flags := append([]string{"--peer-cert-file=" + cert, "--peer-key-file=" + key,
		"--peer-trusted-ca-file=" + ca.CertPath, "--peer-client-cert-auth"}, clusterFlags...)
	c, err := harness.NewClusterScheme(bin, filepath.Join(dir, "mtls"), 3, flags, "https")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{c.Members[0].ClientURL}}
	if r := ctl.Run("", "put", "k", "over-mtls"); r.Code != 0 {
		t.Fatalf("put:\n%s", r)
	}
	m3 := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{c.Members[2].ClientURL}}
	if r := m3.Run("", "get", "k", "--print-value-only"); r.Code != 0 || r.Stdout != "over-mtls\n" {
		t.Fatalf("get on m3:\n%s", r)
	}

	// A peer with a certificate from another CA: the handshake fails.
	other, err := harness.NewCA(dir, "other")
	if err != nil {
		t.Fatal(err)
	}
	ocert, okey, err := other.Issue("intruder", "member")
	if err != nil {
		t.Fatal(err)
	}
	if code, err := getMembers(c.Members[0].PeerURL, ca.CertPath, ocert, okey); err == nil {
		t.Fatalf("a peer certificate from another CA was accepted (HTTP %d)", code)
	}
	// The member's own certificate is accepted.
	if code, err := getMembers(c.Members[0].PeerURL, ca.CertPath, cert, key); err != nil || code != 200 {
		t.Fatalf("the cluster's own peer certificate: HTTP %d, %v", code, err)
	}

	// --peer-auto-tls: self-signed peer certificates, no verification.
	auto, err := harness.NewClusterScheme(bin, filepath.Join(dir, "auto"), 3, append([]string{"--peer-auto-tls"}, clusterFlags...), "https")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auto.Stop() })
	if err := auto.Start(); err != nil {
		t.Fatal(err)
	}
	actl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: auto.ClientURLs()}
	if r := actl.Run("", "endpoint", "health", "--cluster"); r.Code != 0 {
		t.Fatalf("endpoint health on the auto-tls cluster:\n%s", r)
	}
}

// getMembers GETs a peer port's /members over HTTP/1.1 (what members
// speak to each other) with a client certificate, and returns the status.
func getMembers(peerURL, caFile, certFile, keyFile string) (int, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return 0, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return 0, err
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{kp}, NextProtos: []string{"http/1.1"}}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(peerURL + "/members")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestClusterBootstrapMisconfig: the static-bootstrap mistakes a member
// refuses to start with, each with etcd's message, checked on etcd and on
// the target alike.
func TestClusterBootstrapMisconfig(t *testing.T) {
	b := needBins(t)
	ports, err := harness.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	other := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	cases := []struct {
		name  string
		flags []string
		want  func(s *harness.Server) string
	}{
		{"name missing from --initial-cluster", []string{"--initial-cluster=other=" + other},
			func(s *harness.Server) string {
				return `couldn't find local name "m1" in the initial cluster configuration`
			}},
		{"advertise URLs that do not match --initial-cluster", []string{"--initial-advertise-peer-urls=" + other},
			func(s *harness.Server) string {
				return "--initial-cluster has m1=" + s.PeerURL + " but missing from --initial-advertise-peer-urls=" + other
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, bin := range []string{b.Etcd, targetBin(t, b)} {
				s, err := harness.NewServer(harness.ServerConfig{Bin: bin, Dir: t.TempDir(), Flags: tc.flags})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Start(); err == nil {
					s.Stop()
					t.Fatalf("%s started", bin)
				}
				// etcd's JSON log escapes the quotes.
				log, _ := os.ReadFile(s.LogPath)
				if want := tc.want(s); !strings.Contains(strings.ReplaceAll(string(log), `\"`, `"`), want) {
					t.Fatalf("%s: no %q in its log:\n%s", bin, want, log)
				}
			}
		})
	}
}

// TestClusterDisasterRecovery: the seeds' recovery walk-through. A
// snapshot saved from a running cluster is restored into three new data
// dirs with a 3-member --initial-cluster (stratautl for Strata, etcdutl
// for etcd, with the same flags), and the three members form a working
// cluster holding the data.
func TestClusterDisasterRecovery(t *testing.T) {
	b := needBins(t)
	bin := targetBin(t, b)
	restoreTool := b.Etcdutl
	if bin != b.Etcd {
		var err error
		if restoreTool, err = harness.Stratautl(bin); err != nil {
			t.Fatal(err)
		}
	}
	old := startCluster(t, bin, clusterFlags)
	rev := putN(t, memberClient(t, old.Members[0]), "dr", 30)
	snap := filepath.Join(t.TempDir(), "snap.db")
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{old.Members[1].ClientURL}}
	if r := ctl.Run("", "snapshot", "save", snap); r.Code != 0 {
		t.Fatalf("snapshot save:\n%s", r)
	}
	if err := old.Stop(); err != nil {
		t.Fatal(err)
	}

	c, err := harness.NewCluster(bin, t.TempDir(), 3, clusterFlags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	for _, m := range c.Members {
		cmd := exec.Command(restoreTool, "snapshot", "restore", snap, "--data-dir", m.DataDir, "--name", m.Name(),
			"--initial-cluster", c.InitialCluster(), "--initial-cluster-token", "strata-e2e",
			"--initial-advertise-peer-urls", m.PeerURL)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	all := &harness.Ctl{Bin: b.Etcdctl, Endpoints: c.ClientURLs()}
	if r := all.Run("", "member", "list"); r.Code != 0 || strings.Count(r.Stdout, ", started, ") != 3 {
		t.Fatalf("member list of the restored cluster:\n%s", r)
	}
	for _, m := range c.Members {
		one := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{m.ClientURL}}
		r := one.Run("", "get", "dr/", "--prefix", "--limit=1", "-w", "json")
		if r.Code != 0 || !strings.Contains(r.Stdout, `"count":30`) || !strings.Contains(r.Stdout, fmt.Sprintf(`"revision":%d`, rev)) {
			t.Fatalf("the restored data on %s:\n%s", m.Name(), r)
		}
	}
	rev = putN(t, memberClient(t, c.Members[2]), "after-restore", 5)
	for _, m := range c.Members {
		waitRev(t, m, rev)
	}
}

// TestClusterForeignMemberRefused: a member bootstrapped with another set
// of members (so another cluster id) that reaches a running cluster's
// peers is refused by them with etcd's "cluster ID mismatch", never
// becomes ready, and both sides log why. On etcd and the target alike.
func TestClusterForeignMemberRefused(t *testing.T) {
	b := needBins(t)
	bin := targetBin(t, b)
	c := startCluster(t, bin, clusterFlags)
	outsider, err := harness.NewServer(harness.ServerConfig{Bin: bin, Name: "m4", Dir: t.TempDir(), ReadyTimeout: poll.Deadline,
		Flags: clusterFlags})
	if err != nil {
		t.Fatal(err)
	}
	// m1 and m2 of the running cluster, and itself: another cluster id.
	outsider = harness.WithInitialCluster(outsider, "m1="+c.Members[0].PeerURL+",m2="+c.Members[1].PeerURL+",m4="+outsider.PeerURL)
	started := make(chan error, 1)
	go func() { started <- outsider.Start() }()
	poll.Until(t, "both sides to log the cluster ID mismatch", func() bool {
		return harnessLogHas(outsider, "cluster ID mismatch") && harnessLogHas(c.Members[0], "cluster ID mismatch")
	})
	if err := outsider.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-started; err == nil {
		t.Fatal("the member of another cluster became ready before it was killed")
	}
	// The running cluster is unaffected.
	if rev := putN(t, memberClient(t, c.Members[0]), "still", 3); rev == 0 {
		t.Fatal("no revision")
	}
}
