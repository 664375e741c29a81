package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// TestMetricsMatchEtcd runs one sequence of client operations (puts,
// gets, txns, deletes, a lease's life, a watch, compaction, maintenance,
// auth, the health endpoints) through clientv3 against real etcd and
// then the target, scrapes /metrics from each, and compares:
//
//   - the metric families: every family etcd exports exists on the
//     target with the same type and the same label names, and the target
//     exports nothing etcd does not, except its own strata_* families;
//   - the series of the gRPC server metrics etcd preinitialises (every
//     method of the services it registers, every code), so dashboards that
//     select on them find the same series;
//   - the values of the counters and gauges that the sequence determines
//     (listed in deterministicFamilies), and the observation counts of the
//     histograms it determines (deterministicCounts);
//   - the series that carry the member's id, with the id masked.
//
// Durations, sizes on disk, byte counts of responses (they hold ids) and
// process figures differ between two correct servers and are compared by
// name, type and labels only.
func TestMetricsMatchEtcd(t *testing.T) {
	b := needBins(t)
	sides := []struct{ label, bin string }{{"etcd", b.Etcd}, {"target", targetBin(t, b)}}
	var scraped [2]map[string]*harness.Family
	var ids [2]string
	for i, side := range sides {
		srv, err := harness.NewServer(harness.ServerConfig{Bin: side.bin, Dir: t.TempDir(), Flags: []string{"--metrics=extensive", "--snapshot-count=10"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		ids[i] = metricsWorkload(t, srv)
		scraped[i], err = harness.ScrapeMetrics(srv.ClientURL + "/metrics")
		srv.Stop()
		if err != nil {
			t.Fatalf("%s: %v", side.label, err)
		}
		if t.Failed() {
			return
		}
	}
	compareMetrics(t, scraped[0], scraped[1], ids)
}

// Families whose every sample must have the same value on both sides
// after the workload (member ids masked).
var deterministicFamilies = []string{
	"etcd_mvcc_put_total", "etcd_mvcc_delete_total", "etcd_mvcc_range_total", "etcd_mvcc_txn_total",
	"etcd_debugging_mvcc_total_put_size_in_bytes", "etcd_debugging_mvcc_keys_total",
	"etcd_debugging_mvcc_current_revision", "etcd_debugging_mvcc_compact_revision",
	"etcd_debugging_mvcc_db_compaction_keys_total",
	"etcd_debugging_mvcc_watcher_total", "etcd_debugging_mvcc_watch_stream_total",
	"etcd_debugging_mvcc_slow_watcher_total", "etcd_debugging_mvcc_pending_events_total",
	"etcd_debugging_mvcc_events_total",
	"etcd_debugging_lease_granted_total", "etcd_debugging_lease_revoked_total",
	"etcd_debugging_lease_renewed_total", "etcd_debugging_lease_ttl_total",
	"etcd_debugging_server_lease_expired_total",
	"etcd_debugging_auth_revision",
	"etcd_server_client_requests_total",
	"grpc_server_started_total", "grpc_server_handled_total",
	"grpc_server_msg_received_total", "grpc_server_msg_sent_total",
	"etcd_server_has_leader", "etcd_server_is_leader", "etcd_server_is_learner",
	"etcd_server_leader_changes_seen_total", "etcd_server_version", "etcd_cluster_version",
	"etcd_server_quota_backend_bytes", "etcd_server_feature_enabled",
	"etcd_server_health_success", "etcd_server_health_failures",
	"etcd_server_healthcheck", "etcd_server_healthchecks_total",
	"etcd_server_learner_promote_successes", "etcd_server_heartbeat_send_failures_total",
	"etcd_server_read_indexes_failed_total", "etcd_server_snapshot_apply_in_progress_total",
	"etcd_server_proposals_failed_total", "etcd_server_proposals_pending",
	"etcd_debugging_store_expires_total", "etcd_debugging_store_watch_requests_total",
	"etcd_debugging_store_watchers",
	// One recursive get, a create per member and a set per published
	// member and for the cluster version, for every snapshot: the
	// workload's entries take both servers through the same snapshots
	// (--snapshot-count=10).
	"etcd_debugging_store_reads_total", "etcd_debugging_store_writes_total",
	"etcd_grpc_proxy_cache_hits_total", "etcd_grpc_proxy_cache_keys_total",
	"etcd_grpc_proxy_cache_misses_total", "etcd_grpc_proxy_events_coalescing_total",
	"etcd_grpc_proxy_watchers_coalescing_total",
	"etcd_disk_defrag_inflight",
}

// Histograms whose observation counts (per label set) the workload
// determines. Series of requests only etcd makes internally (publishing
// its attributes and the cluster version through raft) are left out.
var deterministicCounts = []string{
	"etcd_server_apply_duration_seconds", "etcd_server_request_duration_seconds",
	"etcd_server_range_duration_seconds",
	"etcd_disk_backend_defrag_duration_seconds", "etcd_disk_backend_snapshot_duration_seconds",
	"etcd_mvcc_hash_rev_duration_seconds",
	"etcd_debugging_mvcc_db_compaction_total_duration_milliseconds",
	"etcd_debugging_mvcc_index_compaction_pause_duration_milliseconds",
	"grpc_server_handling_seconds",
}

// etcdInternalOps are raft requests etcd proposes for itself at start;
// Strata keeps the same facts without proposing them.
var etcdInternalOps = map[string]bool{"ClusterMemberAttrSet": true, "ClusterVersionSet": true, "DowngradeInfoSet": true}

// metricsWorkload runs the sequence and returns the member id (hex) as
// the metrics spell it.
func metricsWorkload(t *testing.T, srv *harness.Server) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", srv.Bin(), err)
		}
	}
	st, err := cli.Status(ctx, srv.ClientURL)
	must(st, err)
	id := strconv.FormatUint(st.Header.MemberId, 16)

	must(cli.Put(ctx, "k1", "v1"))
	must(cli.Put(ctx, "k2", "value-2", clientv3.WithPrevKV()))
	must(cli.Put(ctx, "k1", "v1b"))
	must(cli.Put(ctx, "k6", ""))
	must(cli.Get(ctx, "k1"))
	must(cli.Get(ctx, "k", clientv3.WithPrefix()))
	must(cli.Get(ctx, "k1", clientv3.WithSerializable()))
	must(cli.Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithCountOnly()))
	// RangeStream: one whose limit stops it short of the range (a chunk,
	// then the count of the rest: two reads, one message), a count-only
	// one, and a refused one.
	for _, opts := range [][]clientv3.OpOption{
		{clientv3.WithPrefix(), clientv3.WithLimit(2)},
		{clientv3.WithPrefix(), clientv3.WithCountOnly()},
		{clientv3.WithPrefix(), clientv3.WithMinModRev(2)},
	} {
		ch, err := cli.GetStream(ctx, "k", opts...)
		must(ch, err)
		if _, err := clientv3.GetStreamToGetResponse(ch); err != nil && !strings.Contains(err.Error(), "revision filters") {
			t.Fatalf("%s: get --stream: %v", srv.Bin(), err)
		}
	}
	must(cli.Delete(ctx, "k2", clientv3.WithPrevKV()))
	must(cli.Delete(ctx, "absent"))
	must(cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("k1"), "=", "v1b")).
		Then(clientv3.OpPut("k3", "v3"), clientv3.OpGet("k1")).Else(clientv3.OpGet("k2")).Commit())
	must(cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("k1"), ">", 0), clientv3.Compare(clientv3.Version("k3"), ">", 0)).
		Then(clientv3.OpGet("k1")).Commit())
	must(cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("k1"), "=", "nope")).
		Then(clientv3.OpPut("k3", "x")).Else(clientv3.OpDelete("k3"), clientv3.OpPut("k7", "seven")).Commit())
	// A failing request: a put on a lease that does not exist.
	if _, err := cli.Put(ctx, "k8", "v", clientv3.WithLease(0x1234)); err == nil {
		t.Fatalf("%s: put with a missing lease succeeded", srv.Bin())
	}

	lg, err := cli.Grant(ctx, 60)
	must(lg, err)
	must(cli.Grant(ctx, 3600))
	must(cli.Put(ctx, "k4", "leased", clientv3.WithLease(lg.ID)))
	must(cli.Put(ctx, "k5", "leased too", clientv3.WithLease(lg.ID)))
	must(cli.KeepAliveOnce(ctx, lg.ID))
	must(cli.TimeToLive(ctx, lg.ID, clientv3.WithAttachedKeys()))
	must(cli.Leases(ctx))
	must(cli.Revoke(ctx, lg.ID))

	// A watch from revision 1 over every k* key, read up to the current
	// revision, then canceled by the client.
	cur, err := cli.Get(ctx, "k1")
	must(cur, err)
	last := cur.Header.Revision
	wctx, wcancel := context.WithCancel(ctx)
	wch := cli.Watch(wctx, "k", clientv3.WithPrefix(), clientv3.WithRev(1), clientv3.WithPrevKV())
	seen := 0
	for wr := range wch {
		must(nil, wr.Err())
		seen += len(wr.Events)
		if n := len(wr.Events); n > 0 && wr.Events[n-1].Kv.ModRevision >= last {
			break
		}
	}
	wcancel()
	waitMetric(t, srv, "the canceled watch stream's end", func(m map[string]*harness.Family) bool {
		return sumWhere(m["grpc_server_handled_total"], map[string]string{"grpc_method": "Watch", "grpc_service": "etcdserverpb.Watch"}) == 1
	})

	must(cli.Compact(ctx, last, clientv3.WithCompactPhysical()))
	must(cli.HashKV(ctx, srv.ClientURL, 0))
	must(cli.Defragment(ctx, srv.ClientURL))
	must(cli.AlarmList(ctx))
	must(cli.MemberList(ctx))
	rc, err := cli.Snapshot(ctx)
	must(rc, err)
	if _, err := io.Copy(io.Discard, rc); err != nil {
		t.Fatalf("%s: snapshot: %v", srv.Bin(), err)
	}
	rc.Close()
	for _, path := range []string{"/health", "/health?serializable=true", "/livez", "/readyz"} {
		resp, err := http.Get(srv.ClientURL + path)
		must(resp, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	must(cli.RoleAdd(ctx, "root"))
	must(cli.UserAdd(ctx, "root", "rootpw"))
	must(cli.UserGrantRole(ctx, "root", "root"))
	must(cli.RoleAdd(ctx, "reader"))
	must(cli.RoleGrantPermission(ctx, "reader", "k", "l", clientv3.PermissionType(clientv3.PermRead)))
	must(cli.AuthEnable(ctx))
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), Username: "root", Password: "rootpw"})
	if err != nil {
		t.Fatal(err)
	}
	must(root.Put(ctx, "ka", "va"))
	must(root.Get(ctx, "ka"))
	must(root.AuthDisable(ctx))
	root.Close()

	waitMetric(t, srv, "the keep-alive stream's end", func(m map[string]*harness.Family) bool {
		return sumWhere(m["grpc_server_handled_total"], map[string]string{"grpc_method": "LeaseKeepAlive"}) == 1 &&
			sumWhere(m["grpc_server_handled_total"], map[string]string{"grpc_method": "Snapshot"}) == 1
	})
	t.Logf("%s: watch saw %d events up to revision %d", srv.Bin(), seen, last)
	return id
}

// waitMetric scrapes until cond holds (a stream's end is recorded when
// the server's handler returns, after the client has moved on).
func waitMetric(t *testing.T, srv *harness.Server, what string, cond func(map[string]*harness.Family) bool) {
	t.Helper()
	poll.UntilNil(t, fmt.Sprintf("%s: %s in /metrics", srv.Bin(), what), func() error {
		m, err := harness.ScrapeMetrics(srv.ClientURL + "/metrics")
		if err == nil && !cond(m) {
			err = errors.New("not there yet")
		}
		return err
	})
}

func sumWhere(f *harness.Family, match map[string]string) float64 {
	if f == nil {
		return 0
	}
	var sum float64
	for _, s := range f.Samples {
		ok := true
		for k, v := range match {
			if s.Labels[k] != v {
				ok = false
			}
		}
		if ok {
			sum += s.Value
		}
	}
	return sum
}

// sampleKey is a sample's name and labels, with the member's own id
// replaced by <self>.
func sampleKey(s harness.Sample, self string) string {
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(s.Name)
	for _, k := range keys {
		v := s.Labels[k]
		if v == self {
			v = "<self>"
		}
		fmt.Fprintf(&b, " %s=%q", k, v)
	}
	return b.String()
}

func sampleMap(f *harness.Family, self string, keep func(harness.Sample) bool) map[string]float64 {
	m := map[string]float64{}
	if f == nil {
		return m
	}
	for _, s := range f.Samples {
		if keep == nil || keep(s) {
			m[sampleKey(s, self)] = s.Value
		}
	}
	return m
}

func compareMetrics(t *testing.T, etcd, target map[string]*harness.Family, ids [2]string) {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	names := make([]string, 0, len(etcd))
	for n := range etcd {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e, g := etcd[n], target[n]
		switch {
		case g == nil:
			bad("missing family %s (%s, labels %v)", n, e.Type, e.LabelNames())
		case g.Type != e.Type:
			bad("family %s: type %s, etcd's is %s", n, g.Type, e.Type)
		case strings.Join(g.LabelNames(), ",") != strings.Join(e.LabelNames(), ","):
			bad("family %s: labels %v, etcd's are %v", n, g.LabelNames(), e.LabelNames())
		}
	}
	for n := range target {
		if etcd[n] == nil && !strings.HasPrefix(n, "strata_") {
			bad("extra family %s (%s): etcd has no such metric", n, target[n].Type)
		}
	}

	diffSamples := func(what string, e, g map[string]float64) {
		keys := map[string]bool{}
		for k := range e {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			ev, eok := e[k]
			gv, gok := g[k]
			switch {
			case !gok:
				bad("%s: series %s missing (etcd: %v)", what, k, ev)
			case !eok:
				bad("%s: extra series %s = %v", what, k, gv)
			case ev != gv:
				bad("%s: %s = %v, etcd: %v", what, k, gv, ev)
			}
		}
	}
	// A keep-alive stream ends with OK or Canceled depending on whether
	// the client's half-close or its cancel reaches the server first (it
	// varies between two runs of etcd): its codes are compared as a sum.
	settled := func(s harness.Sample) bool {
		return s.Name != "grpc_server_handled_total" || s.Labels["grpc_method"] != "LeaseKeepAlive"
	}
	for _, n := range deterministicFamilies {
		diffSamples("value", sampleMap(etcd[n], ids[0], settled), sampleMap(target[n], ids[1], settled))
	}
	keepAlive := map[string]string{"grpc_method": "LeaseKeepAlive"}
	if e, g := sumWhere(etcd["grpc_server_handled_total"], keepAlive), sumWhere(target["grpc_server_handled_total"], keepAlive); e != g {
		bad("value: grpc_server_handled_total of LeaseKeepAlive, all codes: %v, etcd: %v", g, e)
	}
	counts := func(s harness.Sample) bool {
		return strings.HasSuffix(s.Name, "_count") && !etcdInternalOps[s.Labels["op"]] && !etcdInternalOps[s.Labels["type"]]
	}
	for _, n := range deterministicCounts {
		diffSamples("count", sampleMap(etcd[n], ids[0], counts), sampleMap(target[n], ids[1], counts))
	}
	// The member's id, and the one known peer a single member has: itself.
	for _, n := range []string{"etcd_server_id", "etcd_network_known_peers"} {
		diffSamples("id", sampleMap(etcd[n], ids[0], nil), sampleMap(target[n], ids[1], nil))
	}

	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("etcd exports %d families, the target %d; %d differences", len(etcd), len(target), len(problems))
}
