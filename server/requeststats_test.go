package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// lockedBuffer is a log sink the server's goroutines share with the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// records returns the JSON records whose msg is msg.
func (l *lockedBuffer) records(t *testing.T, msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

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
			var buf lockedBuffer
			lg := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
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
