package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/strata-db/strata/server/config"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/internal/testport"
)

// freePort reserves a port for this test process (testport: outside the
// kernel's ephemeral range, never handed to another test process).
func freePort(t *testing.T) int {
	t.Helper()
	return testport.Port(t)
}

type testMember struct {
	s      *Server
	conn   *grpc.ClientConn
	kv     pb.KVClient
	maint  pb.MaintenanceClient
	client string
	args   []string
}

// startMember runs a real server on loopback ports with etcd's flags.
func startMember(t *testing.T, dataDir string, extra ...string) *testMember {
	t.Helper()
	cp, pp := freePort(t), freePort(t)
	client := fmt.Sprintf("http://127.0.0.1:%d", cp)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
	args := append([]string{"--name", "m1", "--data-dir", dataDir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "m1=" + peer}, extra...)
	return startWithArgs(t, args, client)
}

func startWithArgs(t *testing.T, args []string, client string) *testMember {
	t.Helper()
	return startHooked(t, args, client, nil, storageHooks{})
}

// startHooked is startWithArgs with a logger and fault-injecting storage.
func startHooked(t *testing.T, args []string, client string, lg *slog.Logger, hooks storageHooks) *testMember {
	t.Helper()
	cfg, err := config.Parse(args, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServer(cfg, lg, hooks)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("server not ready")
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(client, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return &testMember{s: s, conn: conn, kv: pb.NewKVClient(conn), maint: pb.NewMaintenanceClient(conn), client: client, args: args}
}

func (m *testMember) stop(t *testing.T) {
	m.conn.Close()
	if err := m.s.Stop(); err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, err error, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", want)
	}
	if status.Convert(err).Message() != status.Convert(want).Message() || status.Code(err) != status.Code(want) {
		t.Fatalf("error %v, want %v", err, want)
	}
}

func TestKVValidationAndErrors(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"), "--max-txn-ops", "4")
	defer m.stop(t)
	ctx := context.Background()
	_, err := m.kv.Put(ctx, &pb.PutRequest{Value: []byte("v")})
	wantErr(t, err, rpctypes.ErrGRPCEmptyKey)
	_, err = m.kv.Range(ctx, &pb.RangeRequest{})
	wantErr(t, err, rpctypes.ErrGRPCEmptyKey)
	_, err = m.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v"), IgnoreValue: true})
	wantErr(t, err, rpctypes.ErrGRPCValueProvided)
	big := make([]byte, 1536*1024+1)
	_, err = m.kv.Put(ctx, &pb.PutRequest{Key: []byte("big"), Value: big})
	wantErr(t, err, rpctypes.ErrGRPCRequestTooLarge)
	put := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k)}}}
	}
	_, err = m.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put("a"), put("b"), put("c"), put("d"), put("e")}})
	wantErr(t, err, rpctypes.ErrGRPCTooManyOps)
	_, err = m.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put("a"), put("a")}})
	wantErr(t, err, rpctypes.ErrGRPCDuplicateKey)
	del := &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("z")}}}
	_, err = m.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{del, put("b")}})
	wantErr(t, err, rpctypes.ErrGRPCDuplicateKey)
	_, err = m.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: 42})
	wantErr(t, err, rpctypes.ErrGRPCLeaseNotFound)

	// Header: cluster and member ids, raft term, revision.
	resp, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	h := resp.Header
	if h.ClusterId != m.s.ClusterID() || h.MemberId != m.s.ID() || h.RaftTerm == 0 || h.Revision != 2 {
		t.Fatalf("header %v", h)
	}
	_, err = m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), Revision: 99})
	wantErr(t, err, rpctypes.ErrGRPCFutureRev)
	m.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v2")})
	if _, err := m.kv.Compact(ctx, &pb.CompactionRequest{Revision: 3, Physical: true}); err != nil {
		t.Fatal(err)
	}
	_, err = m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), Revision: 2})
	wantErr(t, err, rpctypes.ErrGRPCCompacted)
	_, err = m.kv.Compact(ctx, &pb.CompactionRequest{Revision: 3})
	wantErr(t, err, rpctypes.ErrGRPCCompacted)
	rr, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), Serializable: true})
	if err != nil || len(rr.Kvs) != 1 || string(rr.Kvs[0].Value) != "v2" || rr.Kvs[0].Version != 2 {
		t.Fatalf("serializable range: %v %v", rr, err)
	}
}

func TestRestartKeepsDataAndIDs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	m := startMember(t, dir)
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("k%02d", i)), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	id, cid := m.s.ID(), m.s.ClusterID()
	args, client := m.args, m.client
	m.stop(t)
	m = startWithArgs(t, args, client)
	defer m.stop(t)
	if m.s.ID() != id || m.s.ClusterID() != cid {
		t.Fatalf("ids changed across restart")
	}
	rr, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l")})
	if err != nil || rr.Count != 50 || rr.Header.Revision != 51 {
		t.Fatalf("after restart: count %d rev %d err %v", rr.GetCount(), rr.GetHeader().GetRevision(), err)
	}
	st, err := m.maint.Status(ctx, &pb.StatusRequest{})
	if err != nil || st.Version != EtcdVersion || st.Leader != id || st.RaftAppliedIndex < 51 {
		t.Fatalf("status %v %v", st, err)
	}
	res, err := http.Get(m.client + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), `"health":"true"`) {
		t.Fatalf("/health: %d %s", res.StatusCode, body)
	}
}

func TestRefusesEtcdDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	cfg, err := config.Parse([]string{"--data-dir", dir}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// The first meta page of a bbolt file: a 16-byte page header, then
	// the meta magic.
	page := make([]byte, 4096)
	binary.LittleEndian.PutUint32(page[16:], 0xED0CDAED)
	if err := os.MkdirAll(filepath.Dir(cfg.BackendPath()), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.BackendPath(), page, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "etcd (bbolt) database") || !strings.Contains(err.Error(), "stratautl snapshot restore") {
		t.Fatalf("New on an etcd data dir: %v", err)
	}
}

func TestAutoCompactionPeriodic(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"), "--auto-compaction-mode=periodic", "--auto-compaction-retention=1s")
	defer m.stop(t)
	ctx := context.Background()
	// Writes keep coming (each poll puts one) until a compaction ran.
	poll.Until(t, "an automatic compaction with a 1s periodic retention", func() bool {
		if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
		return m.s.kv.CompactRev() > 0
	})
	// It compacts to the revision of about one period ago, not the head.
	if m.s.kv.CompactRev() >= m.s.kv.Rev() {
		t.Fatalf("compacted to %d, the current revision is %d", m.s.kv.CompactRev(), m.s.kv.Rev())
	}
}

func TestAutoCompactionRevision(t *testing.T) {
	old := revisionCompactInterval
	revisionCompactInterval = 200 * time.Millisecond
	defer func() { revisionCompactInterval = old }()
	m := startMember(t, filepath.Join(t.TempDir(), "d"), "--auto-compaction-mode=revision", "--auto-compaction-retention=10")
	defer m.stop(t)
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "the compaction to the current revision minus the retention", func() bool {
		return m.s.kv.CompactRev() == m.s.kv.Rev()-10
	})
}

// incompressible returns n random bytes (seed picks which), for tests that
// need the page store to hold a value at its full size: it stores values
// that compress well compressed.
func incompressible(n int, seed byte) []byte {
	v := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(v)
	return v
}

// TestDefragmentOutlivesItsClient: etcdctl gives up on a defrag after its
// --command-timeout (5 s by default); as with etcd, the defrag must still
// run to the end rather than stop where the client left.
func TestDefragmentOutlivesItsClient(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"))
	defer m.stop(t)
	ctx := context.Background()
	val := incompressible(4096, 1)
	for i := 0; i < 4000; i++ {
		if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("k%05d", i)), Value: val}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := m.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("k"), RangeEnd: []byte("k03000")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.kv.Compact(ctx, &pb.CompactionRequest{Revision: resp.Header.Revision, Physical: true}); err != nil {
		t.Fatal(err)
	}
	if err := m.s.be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	before := m.s.db.Stats()
	// The client goes away once the server has started the defrag (a
	// deadline alone may expire before the request reaches the server,
	// which then never defrags: that is not what this test is about).
	started := make(chan struct{})
	defragStarted = func() { close(started) }
	defer func() { defragStarted = nil }()
	short, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { <-started; cancel() }()
	if _, err := m.maint.Defragment(short, &pb.DefragmentRequest{}); status.Code(err) != codes.Canceled {
		t.Fatalf("Defragment whose client went away: %v, want Canceled", err)
	}
	poll.Until(t, "the defrag to finish without its client", func() bool {
		st := m.s.db.Stats()
		return float64(st.FileSize) <= 1.2*float64(st.InUseBytes)
	})
	st := m.s.db.Stats()
	t.Logf("file %d -> %d bytes, %d in use", before.FileSize, st.FileSize, st.InUseBytes)
	// Data is intact.
	r, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), CountOnly: true})
	if err != nil || r.Count != 1000 {
		t.Fatalf("range after defrag: %v, count %d", err, r.GetCount())
	}
}
