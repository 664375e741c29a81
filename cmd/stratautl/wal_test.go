package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/wal"
)

const secret = "hunter2-very-secret"

// writeWAL writes a WAL under dataDir/member/wal holding the requests a
// server would propose, in order.
func writeWAL(t *testing.T, dataDir string, segSize int64) []*pb.InternalRaftRequest {
	t.Helper()
	reqs := []*pb.InternalRaftRequest{
		{ID: 1, Put: &pb.PutRequest{Key: []byte("/app/a"), Value: []byte("1")}},
		{ID: 2, Put: &pb.PutRequest{Key: []byte("/other/x"), Value: []byte("2")}},
		{ID: 3, DeleteRange: &pb.DeleteRangeRequest{Key: []byte("/app/"), RangeEnd: []byte("/app0")}},
		{ID: 4, Txn: &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte("/app/b"), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("/app/b"), Value: []byte("v")}}}},
		}},
		{ID: 5, LeaseGrant: &pb.LeaseGrantRequest{ID: 0x1234, TTL: 60}},
		{ID: 6, AuthUserAdd: &pb.AuthUserAddRequest{Name: "alice", Password: secret}},
		{ID: 7, Compaction: &pb.CompactionRequest{Revision: 3}},
	}
	w, err := wal.Create(filepath.Join(dataDir, "member", "wal"), nil, &wal.Options{SegmentSize: segSize})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		data, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		idx := uint64(i + 1)
		e := &raftpb.Entry{Index: proto.Uint64(idx), Term: proto.Uint64(2), Type: raftpb.EntryNormal.Enum(), Data: data}
		st := &raftpb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(1), Commit: proto.Uint64(idx)}
		if err := w.Save(st, []*raftpb.Entry{e}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return reqs
}

func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestWALDumpTable(t *testing.T) {
	data := t.TempDir()
	writeWAL(t, data, 1<<20)
	out, stderr, code := runCLI(t, "wal", "dump", "--dir", data)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// Requests appear in log order with their keys.
	want := []string{`key="/app/a"`, `key="/other/x"`, `range=["/app/", "/app0")`, `put "/app/b"`, "lease_grant", "auth_user_add", "revision=3"}
	pos := 0
	for _, w := range want {
		i := strings.Index(out[pos:], w)
		if i < 0 {
			t.Fatalf("dump lacks %q after offset %d:\n%s", w, pos, out)
		}
		pos += i
	}
	if strings.Contains(out, secret) {
		t.Fatal("dump prints the password")
	}
	if !strings.Contains(out, "term=2 vote=1 commit=7") {
		t.Fatalf("dump lacks the hard state:\n%s", out)
	}
}

func TestWALDumpFiltersAndJSON(t *testing.T) {
	data := t.TempDir()
	writeWAL(t, data, 1<<20)
	out, stderr, code := runCLI(t, "wal", "dump", "--dir", data, "--type", "entry", "--key-prefix", "/app/", "--from-index", "2", "-w", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var idx []uint64
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var row struct {
			Index   uint64 `json:"index"`
			Type    string `json:"type"`
			Decoded struct {
				Request string   `json:"request"`
				Keys    []string `json:"keys"`
			} `json:"decoded"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if row.Type != "entry" {
			t.Fatalf("type filter let %q through", row.Type)
		}
		idx = append(idx, row.Index)
	}
	if fmt.Sprint(idx) != "[3 4]" {
		t.Fatalf("indexes %v, want [3 4] (delete of /app/ and the txn on /app/b)", idx)
	}
	if _, _, code := runCLI(t, "wal", "dump", "--dir", data, "--type", "bogus"); code == 0 {
		t.Fatal("bad --type accepted")
	}
}

func TestWALVerify(t *testing.T) {
	data := t.TempDir()
	writeWAL(t, data, 256) // tiny segments: several files
	out, stderr, code := runCLI(t, "wal", "verify", "--dir", data)
	if code != 0 || !strings.Contains(out, "WAL OK") || !strings.Contains(out, "7 entries") {
		t.Fatalf("healthy WAL: exit %d\n%s%s", code, out, stderr)
	}
	segs, _ := filepath.Glob(filepath.Join(data, "member", "wal", "*.wal"))
	if len(segs) < 3 {
		t.Fatalf("want several segments, got %d", len(segs))
	}
	// Corrupt the first segment (not the last, so it cannot be a torn tail).
	b, _ := os.ReadFile(segs[0])
	off := 200
	b[off] ^= 0x10
	os.WriteFile(segs[0], b, 0o600)
	out, stderr, code = runCLI(t, "wal", "verify", "--dir", data)
	if code == 0 {
		t.Fatalf("corrupt WAL verified OK:\n%s", out)
	}
	if !strings.Contains(stderr, segs[0]) || !strings.Contains(stderr, "at offset ") {
		t.Fatalf("error does not name file and offset: %s", stderr)
	}
	if _, _, code := runCLI(t, "wal", "verify"); code != 2 {
		t.Fatalf("missing --dir: exit %d, want 2", code)
	}
}
