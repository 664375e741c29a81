package server

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// TestMetricsNames scrapes /metrics after some traffic and checks that
// every metric the etcd-mixin dashboards read is exported by its etcd name.
func TestMetricsNames(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"))
	defer m.stop(t)
	ctx := context.Background()
	if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	if err := m.s.be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(m.client + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	names := map[string]bool{}
	for _, ln := range strings.Split(string(body), "\n") {
		if ln == "" || strings.HasPrefix(ln, "#") {
			continue
		}
		name := ln
		if i := strings.IndexAny(ln, "{ "); i >= 0 {
			name = ln[:i]
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			name = strings.TrimSuffix(name, suf)
		}
		names[name] = true
	}
	want := []string{
		"etcd_server_has_leader", "etcd_server_is_leader", "etcd_server_leader_changes_seen_total",
		"etcd_server_proposals_committed_total", "etcd_server_proposals_applied_total",
		"etcd_server_proposals_pending", "etcd_server_proposals_failed_total", "etcd_server_slow_apply_total",
		"etcd_server_quota_backend_bytes", "etcd_server_version", "etcd_server_id", "etcd_cluster_version",
		"etcd_disk_wal_fsync_duration_seconds", "etcd_disk_backend_commit_duration_seconds",
		"etcd_mvcc_db_total_size_in_bytes", "etcd_mvcc_db_total_size_in_use_in_bytes",
		"etcd_mvcc_range_total", "etcd_mvcc_put_total", "etcd_mvcc_delete_total", "etcd_mvcc_txn_total",
		"etcd_debugging_mvcc_keys_total", "etcd_debugging_mvcc_watcher_total", "etcd_debugging_mvcc_slow_watcher_total",
		"etcd_network_client_grpc_sent_bytes_total", "etcd_network_client_grpc_received_bytes_total",
		"grpc_server_started_total", "grpc_server_handled_total",
		"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
	}
	var missing []string
	for _, w := range want {
		if !names[w] {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("missing metrics: %v", missing)
	}
	if !strings.Contains(string(body), `grpc_server_handled_total{grpc_code="OK",grpc_method="Put",grpc_service="etcdserverpb.KV",grpc_type="unary"}`) {
		t.Fatal("grpc_server_handled_total lacks etcd's labels for KV.Put")
	}
}

// TestClientPayloadBytes checks etcd_network_client_grpc_{received,sent}_bytes_total
// against the messages themselves: as etcd's codec counts them, each
// request's and response's marshaled size, so one Put and one Range move
// the counters by exactly their sizes.
func TestClientPayloadBytes(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"))
	defer m.stop(t)
	ctx := context.Background()
	const recvName, sentName = "etcd_network_client_grpc_received_bytes_total", "etcd_network_client_grpc_sent_bytes_total"
	before := scrape(t, m)
	put := &pb.PutRequest{Key: []byte("payload-key"), Value: []byte(strings.Repeat("v", 300))}
	pr, err := m.kv.Put(ctx, put)
	if err != nil {
		t.Fatal(err)
	}
	get := &pb.RangeRequest{Key: []byte("payload-key")}
	rr, err := m.kv.Range(ctx, get)
	if err != nil {
		t.Fatal(err)
	}
	after := scrape(t, m)
	wantRecv := proto.Size(put) + proto.Size(get)
	wantSent := proto.Size(pr) + proto.Size(rr)
	if got := metricValue(t, after, recvName) - metricValue(t, before, recvName); got != float64(wantRecv) {
		t.Errorf("%s moved by %v, want %d (the Put and Range requests' sizes)", recvName, got, wantRecv)
	}
	if got := metricValue(t, after, sentName) - metricValue(t, before, sentName); got != float64(wantSent) {
		t.Errorf("%s moved by %v, want %d (the Put and Range responses' sizes)", sentName, got, wantSent)
	}
}
