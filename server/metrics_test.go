package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
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

// TestRequestDurationSeries: the cached series of request_duration and
// range_duration count each request once under its own type and success.
func TestRequestDurationSeries(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"))
	defer m.stop(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	put := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t"), Value: []byte("v")}}}
	for i := 0; i < 2; i++ {
		if _, err := m.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 4; i++ {
		if _, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), Serializable: i%2 == 0}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), Revision: 1 << 40}); err == nil {
		t.Fatal("a range at a future revision succeeded")
	}
	res, err := http.Get(m.client + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for name, want := range map[string]float64{
		`etcd_server_request_duration_seconds_count{success="true",type="Put"}`:    3,
		`etcd_server_request_duration_seconds_count{success="true",type="Txn"}`:    2,
		`etcd_server_request_duration_seconds_count{success="true",type="Range"}`:  4,
		`etcd_server_request_duration_seconds_count{success="false",type="Range"}`: 1,
		`etcd_server_range_duration_seconds_count{success="true"}`:                 4,
		`etcd_server_range_duration_seconds_count{success="false"}`:                1,
	} {
		if got := metricValue(t, string(body), name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if strings.Contains(string(body), `type="Put",success="false"`) || strings.Contains(string(body), `success="false",type="Put"`) {
		t.Error("a Put series with success=false exists although no put failed")
	}
}

// TestClientRequestsByVersion: etcd_server_client_requests_total counts
// each gRPC call under the client API version it declares, also when
// clients of two versions alternate (the interceptor caches the series
// of the version last seen).
func TestClientRequestsByVersion(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"))
	defer m.stop(t)
	conn, err := grpc.NewClient(strings.TrimPrefix(m.client, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv := pb.NewKVClient(conn)
	calls := map[string]int{"3.7": 0, "3.5": 0}
	for i, v := range []string{"3.7", "3.7", "3.5", "3.7", "3.5", "3.5", "3.5", "3.7"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "client-api-version", v)
		if _, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte(fmt.Sprint(i)), Serializable: true}); err != nil {
			t.Fatal(err)
		}
		calls[v]++
	}
	res, err := http.Get(m.client + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for v, n := range calls {
		name := fmt.Sprintf(`etcd_server_client_requests_total{client_api_version=%q,type="unary"}`, v)
		if got := metricValue(t, string(body), name); got != float64(n) {
			t.Errorf("%s = %v, want %d", name, got, n)
		}
	}
}
