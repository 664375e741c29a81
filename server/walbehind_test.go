package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/server/config"
	"github.com/strata-db/strata/wal"
)

// TestRefusesWALBehindPageStore runs a real member, writes through gRPC,
// stops it, takes records away from its WAL, and starts it again on the
// same data dir: the start must fail, naming both indexes and both paths
// and how to recover, instead of serving a member whose writes all time
// out (what etcd 3.7 does, and what Strata did).
func TestRefusesWALBehindPageStore(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, walDir string)
	}{
		{"truncated", func(t *testing.T, walDir string) {
			// Cut the log at the 20th entry from its end.
			var last []wal.Position
			if _, err := wal.Iterate(nil, walDir, func(p wal.Position, rec wal.Record) error {
				if rec.Type == wal.TypeEntry {
					last = append(last, p)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			p := last[len(last)-20]
			if err := os.Truncate(p.File, p.Offset); err != nil {
				t.Fatal(err)
			}
		}},
		{"deleted", func(t *testing.T, walDir string) {
			if err := os.RemoveAll(walDir); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			m := startMember(t, dir, "--disk-probe=false")
			ctx := context.Background()
			for i := 0; i < 50; i++ {
				if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("k%02d", i)), Value: []byte("v")}); err != nil {
					t.Fatal(err)
				}
			}
			args := m.args
			m.stop(t)
			cfg, err := config.Parse(args, nil, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			tc.break_(t, cfg.WALDir())

			s, err := New(cfg, nil)
			if err == nil {
				s.Stop()
				t.Fatal("a member whose WAL lost applied entries started")
			}
			var wb *raft.WALBehindError
			if !errors.As(err, &wb) || wb.ConsistentIndex < 50 || wb.WALLastIndex >= wb.ConsistentIndex {
				t.Fatalf("New: %v, want a WALBehindError", err)
			}
			msg := err.Error()
			for _, want := range []string{
				cfg.WALDir(), cfg.BackendPath(), fmt.Sprintf("up to index %d", wb.ConsistentIndex),
				"stratautl snapshot restore " + cfg.BackendPath() + " --skip-hash-check",
			} {
				if !strings.Contains(msg, want) {
					t.Fatalf("refusal lacks %q:\n%s", want, msg)
				}
			}
			if tc.name == "truncated" && !strings.Contains(msg, fmt.Sprintf("ends at index %d", wb.WALLastIndex)) {
				t.Fatalf("refusal does not name the WAL's last index:\n%s", msg)
			}
			// The refusal released everything: the next attempt gets the
			// same answer, not a lock error.
			if _, err := New(cfg, nil); !errors.Is(err, raft.ErrWALBehind) {
				t.Fatalf("second start: %v", err)
			}
		})
	}
}
