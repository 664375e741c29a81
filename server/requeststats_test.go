package server

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestRequestStats: with --warning-unary-request-duration below every
// request's time, each unary request is logged as etcd's "request stats"
// warning with its fields (put values redacted to their sizes); with the
// default threshold and info level a fast request is not logged. The line
// is written before the response leaves, so the checks need no wait.
func TestRequestStats(t *testing.T) {
	for _, tc := range []struct {
		threshold string
		want      bool
	}{{"1us", true}, {"5m", false}} {
		t.Run(tc.threshold, func(t *testing.T) {
			var buf jsonLog
			lg := buf.logger()
			cp, pp := freePort(t), freePort(t)
			client, peer := fmt.Sprintf("http://127.0.0.1:%d", cp), fmt.Sprintf("http://127.0.0.1:%d", pp)
			args := []string{"--name", "m1", "--data-dir", filepath.Join(t.TempDir(), "d"),
				"--listen-client-urls", client, "--advertise-client-urls", client,
				"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
				"--initial-cluster", "m1=" + peer, "--warning-unary-request-duration", tc.threshold}
			m := startHooked(t, args, client, lg, storageHooks{})
			defer m.stop(t)
			if _, err := m.kv.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("secret-value")}); err != nil {
				t.Fatal(err)
			}
			recs := buf.records(t, "request stats")
			if !tc.want {
				if len(recs) != 0 {
					t.Fatalf("logged below the threshold: %v", recs)
				}
				return
			}
			if len(recs) != 1 {
				t.Fatalf("%d request stats records, want 1 (the put)", len(recs))
			}
			r := recs[0]
			if r["level"] != "WARN" || r["response type"] != "/etcdserverpb.KV/Put" || r["request count"] != 1.0 ||
				r["response count"] != 0.0 || r["request size"].(float64) <= 0 || r["remote"] == "" {
				t.Errorf("record %v", r)
			}
			content, _ := r["request content"].(string)
			if strings.Contains(content, "secret") || !strings.Contains(content, "value_size:12") {
				t.Errorf("request content %q: want the value redacted to value_size:12", content)
			}
		})
	}
}
