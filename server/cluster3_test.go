package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/server/config"
)

// A 3-member cluster in one process: three real servers, each on its own
// loopback client and peer ports, talking etcd's peer protocol through
// raft/transport, driven over gRPC.

type clusterMember struct {
	name, dir      string
	client, peer   string
	args           []string
	s              *Server
	conn           *grpc.ClientConn
	kv             pb.KVClient
	lease          pb.LeaseClient
	cluster        pb.ClusterClient
	maint          pb.MaintenanceClient
	logMu          sync.Mutex
	log            strings.Builder
	stopped        bool
	stoppedByCrash bool
}

func (m *clusterMember) Write(p []byte) (int, error) {
	m.logMu.Lock()
	defer m.logMu.Unlock()
	return m.log.Write(p)
}

func (m *clusterMember) logText() string {
	m.logMu.Lock()
	defer m.logMu.Unlock()
	return m.log.String()
}

type testCluster struct {
	t       *testing.T
	members []*clusterMember
	hooks   storageHooks // every member's
}

// newTestCluster starts n members with a static --initial-cluster and
// waits until each is ready. extra flags go to every member.
func newTestCluster(t *testing.T, n int, extra ...string) *testCluster {
	t.Helper()
	return newTestClusterHooked(t, n, storageHooks{}, extra...)
}

// newTestClusterHooked is newTestCluster with hooks for every member.
func newTestClusterHooked(t *testing.T, n int, hooks storageHooks, extra ...string) *testCluster {
	t.Helper()
	c := &testCluster{t: t, hooks: hooks}
	base := t.TempDir()
	var initial []string
	for i := 0; i < n; i++ {
		m := &clusterMember{name: fmt.Sprintf("m%d", i+1), dir: filepath.Join(base, fmt.Sprintf("m%d", i+1))}
		m.client = fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
		m.peer = fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
		initial = append(initial, m.name+"="+m.peer)
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.args = append([]string{"--name", m.name, "--data-dir", m.dir,
			"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
			"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", "tc",
			"--heartbeat-interval", "50", "--election-timeout", "500", "--disk-probe=false"}, extra...)
	}
	t.Cleanup(c.stopAll)
	// Start every member before waiting for any: none is ready before a
	// quorum runs.
	for _, m := range c.members {
		c.start(m)
	}
	for _, m := range c.members {
		c.waitReady(m)
	}
	return c
}

func (c *testCluster) start(m *clusterMember) {
	c.t.Helper()
	cfg, err := config.Parse(m.args, nil, io.Discard)
	if err != nil {
		c.t.Fatal(err)
	}
	lg := slog.New(slog.NewTextHandler(m, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s, err := newServer(cfg, lg, c.hooks)
	if err != nil {
		c.t.Fatalf("%s: %v", m.name, err)
	}
	c.serve(m, s)
}

// serve serves s, created for m, and connects m's clients to it.
func (c *testCluster) serve(m *clusterMember, s *Server) {
	c.t.Helper()
	if err := s.Serve(); err != nil {
		c.t.Fatalf("%s: %v", m.name, err)
	}
	m.s, m.stopped = s, false
	var err error
	m.conn, err = grpc.NewClient(strings.TrimPrefix(m.client, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.t.Fatal(err)
	}
	m.kv, m.lease, m.cluster, m.maint = pb.NewKVClient(m.conn), pb.NewLeaseClient(m.conn), pb.NewClusterClient(m.conn), pb.NewMaintenanceClient(m.conn)
}

func (c *testCluster) waitReady(m *clusterMember) {
	c.t.Helper()
	select {
	case <-m.s.Ready():
	case <-time.After(poll.Deadline):
		c.t.Fatalf("%s not ready after %v; its log:\n%s", m.name, poll.Deadline, m.logText())
	}
}

func (c *testCluster) stop(m *clusterMember) {
	c.t.Helper()
	if m.stopped {
		return
	}
	m.stopped = true
	m.conn.Close()
	if err := m.s.Stop(); err != nil {
		c.t.Errorf("%s: stop: %v", m.name, err)
	}
}

func (c *testCluster) stopAll() {
	for _, m := range c.members {
		c.stop(m)
	}
	if c.t.Failed() {
		for _, m := range c.members {
			c.t.Logf("log of %s:\n%s", m.name, m.logText())
		}
	}
}

// restart starts a stopped member again on its data dir.
func (c *testCluster) restart(m *clusterMember) {
	c.t.Helper()
	c.start(m)
	c.waitReady(m)
}

// leader waits until the running members agree on a leader and returns it.
func (c *testCluster) leader() *clusterMember {
	c.t.Helper()
	var lead *clusterMember
	poll.Until(c.t, "the running members to agree on a leader", func() bool {
		var id uint64
		for _, m := range c.members {
			if m.stopped {
				continue
			}
			l := m.s.node.Status().Leader
			if l == 0 || (id != 0 && l != id) {
				return false
			}
			id = l
		}
		for _, m := range c.members {
			if !m.stopped && m.s.id == id {
				lead = m
				return true
			}
		}
		return false
	})
	return lead
}

func (c *testCluster) followers() []*clusterMember {
	l := c.leader()
	var out []*clusterMember
	for _, m := range c.members {
		if m != l && !m.stopped {
			out = append(out, m)
		}
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
	t.Cleanup(cancel)
	return ctx
}

func mustPut(t *testing.T, m *clusterMember, k, v string) *pb.PutResponse {
	t.Helper()
	resp, err := m.kv.Put(ctxT(t), &pb.PutRequest{Key: []byte(k), Value: []byte(v)})
	if err != nil {
		t.Fatalf("put %s on %s: %v", k, m.name, err)
	}
	return resp
}

func getValue(t *testing.T, m *clusterMember, k string, serializable bool) string {
	t.Helper()
	resp, err := m.kv.Range(ctxT(t), &pb.RangeRequest{Key: []byte(k), Serializable: serializable})
	if err != nil {
		t.Fatalf("get %s on %s: %v", k, m.name, err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func TestClusterBootstrapAndReplication(t *testing.T) {
	c := newTestCluster(t, 3)
	lead := c.leader()
	fs := c.followers()
	if len(fs) != 2 {
		t.Fatalf("%d followers, want 2", len(fs))
	}
	// Ids as etcd derives them, the same on every member.
	for _, m := range c.members {
		if m.s.ClusterID() != c.members[0].s.ClusterID() {
			t.Fatalf("%s has cluster id %x, %s %x", m.name, m.s.ClusterID(), c.members[0].name, c.members[0].s.ClusterID())
		}
	}
	// Every member lists every member with the name and client URLs it
	// published through raft.
	for _, m := range c.members {
		poll.Until(t, m.name+" to list every member as started", func() bool {
			resp, err := m.cluster.MemberList(ctxT(t), &pb.MemberListRequest{})
			if err != nil || len(resp.Members) != 3 {
				return false
			}
			for _, pm := range resp.Members {
				if pm.Name == "" || len(pm.ClientURLs) != 1 {
					return false
				}
			}
			return true
		})
	}
	// A put on a follower is answered once applied there, and the other
	// members read it, linearizably and (once applied) serializably.
	put := mustPut(t, fs[0], "k1", "v1")
	if got := getValue(t, fs[0], "k1", true); got != "v1" {
		t.Fatalf("serializable get on the follower that took the put: %q, want v1", got)
	}
	for _, m := range []*clusterMember{lead, fs[1]} {
		if got := getValue(t, m, "k1", false); got != "v1" {
			t.Fatalf("linearizable get on %s: %q, want v1", m.name, got)
		}
	}
	poll.Until(t, "every member to apply the put", func() bool {
		for _, m := range c.members {
			if m.s.kv.Rev() < put.Header.Revision {
				return false
			}
		}
		return true
	})
	for _, m := range c.members {
		if got := getValue(t, m, "k1", true); got != "v1" {
			t.Fatalf("serializable get on %s: %q, want v1", m.name, got)
		}
	}
	// HashKV agrees.
	var hashes []uint32
	for _, m := range c.members {
		h, err := m.maint.HashKV(ctxT(t), &pb.HashKVRequest{Revision: put.Header.Revision})
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h.Hash)
	}
	if hashes[0] != hashes[1] || hashes[1] != hashes[2] {
		t.Fatalf("HashKV differs between members: %v", hashes)
	}
}

func TestClusterLeasesOnFollower(t *testing.T) {
	c := newTestCluster(t, 3)
	f := c.followers()[0]
	ctx := ctxT(t)
	g, err := f.lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 30})
	if err != nil {
		t.Fatal(err)
	}
	// Time-to-live and keep-alive on a follower are answered by the
	// leader's lessor, forwarded over the peer port.
	ttl, err := f.lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: g.ID})
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL != 30 || ttl.TTL <= 0 || ttl.TTL > 30 || ttl.Header.MemberId != f.s.id {
		t.Fatalf("time-to-live on a follower: %+v", ttl)
	}
	ka, err := f.lease.LeaseKeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ka.Send(&pb.LeaseKeepAliveRequest{ID: g.ID}); err != nil {
		t.Fatal(err)
	}
	r, err := ka.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != g.ID || r.TTL != 30 {
		t.Fatalf("keep-alive on a follower: %+v, want TTL 30", r)
	}
	// An unknown lease: TTL -1 from time-to-live, 0 from keep-alive.
	ttl, err = f.lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 12345})
	if err != nil || ttl.TTL != -1 {
		t.Fatalf("time-to-live of an unknown lease on a follower: %+v, %v", ttl, err)
	}
	if err := ka.Send(&pb.LeaseKeepAliveRequest{ID: 12345}); err != nil {
		t.Fatal(err)
	}
	if r, err = ka.Recv(); err != nil || r.TTL != 0 {
		t.Fatalf("keep-alive of an unknown lease on a follower: %+v, %v", r, err)
	}
	ka.CloseSend()
	// Every member lists the lease.
	for _, m := range c.members {
		ls, err := m.lease.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
		if err != nil || len(ls.Leases) != 1 || ls.Leases[0].ID != g.ID {
			t.Fatalf("leases on %s: %+v, %v", m.name, ls, err)
		}
	}
	// Only the leader expires leases: a short lease granted on a
	// follower is revoked (through raft) on every member.
	short, err := f.lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.kv.Put(ctx, &pb.PutRequest{Key: []byte("leased"), Value: []byte("v"), Lease: short.ID}); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.members {
		poll.Until(t, "the leased key to expire on "+m.name, func() bool {
			resp, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("leased"), Serializable: true})
			return err == nil && len(resp.Kvs) == 0
		})
	}
}

func TestClusterFailoverAndCatchUp(t *testing.T) {
	c := newTestCluster(t, 3)
	old := c.leader()
	mustPut(t, old, "before", "1")
	c.stop(old)
	// A new leader among the two others; writes continue through them.
	lead := c.leader()
	if lead == old {
		t.Fatal("the stopped member is still the leader")
	}
	for i := 0; i < 20; i++ {
		mustPut(t, c.followers()[0], fmt.Sprintf("after/%02d", i), "x")
	}
	last := mustPut(t, lead, "last", "y")
	// The stopped member restarts and catches up from the leader's log.
	c.restart(old)
	poll.Until(t, "the restarted member to catch up", func() bool { return old.s.kv.Rev() >= last.Header.Revision })
	if got := getValue(t, old, "last", false); got != "y" {
		t.Fatalf("the restarted member reads %q, want y", got)
	}
}

func TestClusterQuorumLoss(t *testing.T) {
	c := newTestCluster(t, 3)
	mustPut(t, c.leader(), "k", "v")
	fs := c.followers()
	c.stop(fs[0])
	c.stop(fs[1])
	survivor := c.members[0]
	for _, m := range c.members {
		if !m.stopped {
			survivor = m
		}
	}
	// The lone member steps down (CheckQuorum) and has no leader.
	poll.Until(t, "the lone member to step down", func() bool { return survivor.s.node.Status().Leader == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
	defer cancel()
	// As etcd: a write waits for a leader until the request times out
	// (with the context's error), a linearizable read until its read
	// index times out.
	_, err := survivor.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("w")})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("put without quorum: %v, want DeadlineExceeded", err)
	}
	_, err = survivor.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k")})
	wantErr(t, err, rpctypes.ErrGRPCTimeout)
	st, err := survivor.maint.Status(ctx, &pb.StatusRequest{})
	if err != nil || len(st.Errors) != 1 || st.Errors[0] != "etcdserver: no leader" {
		t.Fatalf("status without quorum: %v, %v; want the error etcdserver: no leader", st, err)
	}
	// Serializable reads are still served.
	if got := getValue(t, survivor, "k", true); got != "v" {
		t.Fatalf("serializable read without quorum: %q, want v", got)
	}
	// A write sent while there is no quorum succeeds once the quorum
	// returns in time.
	done := make(chan error, 1)
	go func() {
		_, err := survivor.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("w")})
		done <- err
	}()
	for _, m := range c.members {
		if m.stopped {
			c.start(m)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("a put waiting for a leader when the quorum returned: %v", err)
	}
	if got := getValue(t, survivor, "k", false); got != "w" {
		t.Fatalf("after recovery: %q, want w", got)
	}
}

// A member stopped while more than --snapshot-count entries are written
// (and the leader compacted its log past them) catches up by snapshot:
// the leader streams its page-store image over the peer port, the member
// installs it in place, and then follows the log again.
func TestClusterSnapshotCatchUp(t *testing.T) {
	c := newTestCluster(t, 3, "--snapshot-count", "50", "--snapshot-catchup-entries", "10")
	lead := c.leader()
	lagging := c.followers()[0]
	g, err := lead.lease.LeaseGrant(ctxT(t), &pb.LeaseGrantRequest{TTL: 600})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, lead, "gone", "x")
	c.stop(lagging)
	for i := 0; i < 200; i++ {
		mustPut(t, lead, fmt.Sprintf("k/%03d", i), fmt.Sprint(i))
	}
	if _, err := lead.kv.DeleteRange(ctxT(t), &pb.DeleteRangeRequest{Key: []byte("gone")}); err != nil {
		t.Fatal(err)
	}
	if _, err := lead.kv.Put(ctxT(t), &pb.PutRequest{Key: []byte("leased"), Value: []byte("v"), Lease: g.ID}); err != nil {
		t.Fatal(err)
	}
	last := mustPut(t, lead, "last", "y")
	c.restart(lagging)
	poll.Until(t, "the lagging member to catch up", func() bool { return lagging.s.kv.Rev() >= last.Header.Revision })
	if !strings.Contains(lagging.logText(), "restored the state from a leader's snapshot") {
		t.Fatalf("the lagging member caught up without a snapshot; its log:\n%s", lagging.logText())
	}
	// The leader logs the send once the follower has answered it, which
	// may be after the follower already installed the image.
	poll.Until(t, "the leader's log to show the snapshot it sent", func() bool {
		return strings.Contains(lead.logText(), "sent database snapshot")
	})
	// The restored member has the leader's data, leases and members, and
	// keeps following the log.
	after := mustPut(t, lead, "after", "z")
	poll.Until(t, "the restored member to apply a later put", func() bool { return lagging.s.kv.Rev() >= after.Header.Revision })
	for _, k := range []string{"k/000", "k/199", "last", "after", "leased"} {
		if got := getValue(t, lagging, k, true); got == "" {
			t.Fatalf("key %s missing on the restored member", k)
		}
	}
	if got := getValue(t, lagging, "gone", true); got != "" {
		t.Fatalf("deleted key still on the restored member: %q", got)
	}
	if ids := lagging.s.lessor.Leases(); len(ids) != 1 || ids[0] != g.ID {
		t.Fatalf("leases on the restored member: %v, want [%x]", ids, g.ID)
	}
	if n := len(lagging.s.members.List()); n != 3 {
		t.Fatalf("%d members on the restored member, want 3", n)
	}
	h := func(m *clusterMember) uint32 {
		r, err := m.maint.HashKV(ctxT(t), &pb.HashKVRequest{Revision: after.Header.Revision})
		if err != nil {
			t.Fatal(err)
		}
		return r.Hash
	}
	if a, b := h(lead), h(lagging); a != b {
		t.Fatalf("HashKV: leader %d, restored member %d", a, b)
	}
}

// A leader that stops gracefully hands its leadership to another member
// first, as etcd's does: when Stop returns, the others already follow a
// new leader (no election timeout to wait out, no proposal forwarded to a
// member that is gone), and a write through a follower goes through.
func TestClusterLeaderHandsOffOnStop(t *testing.T) {
	c := newTestCluster(t, 3)
	old := c.leader()
	mustPut(t, old, "k", "v")
	c.stop(old)
	// Without the hand-off the others would need an election timeout
	// (500 ms and more) to notice the leader is gone and elect another.
	var lead *clusterMember
	for _, m := range c.members {
		if m != old && m.s.node.IsLeader() {
			lead = m
		}
	}
	if lead == nil {
		t.Fatal("right after the leader stopped, no other member leads")
	}
	if !strings.Contains(old.logText(), "leadership transfer finished") {
		t.Fatalf("the stopping leader did not log its transfer:\n%s", old.logText())
	}
	mustPut(t, c.followers()[0], "k", "w")
}

// Members stopped one right after the other, the leader last (as etcd's
// e2e framework and a shell loop stop a cluster): the leader's peers are
// gone, so its hand-off has nobody to go to. It must not ask a member that
// just stopped to lead and wait the request timeout (7 s here) for it:
// the transport finds a lost peer unreachable at once (redialing its
// streams without backoff), and a hand-off gives up when its transferee
// becomes unreachable.
func TestClusterLastLeaderStopsWithoutWaiting(t *testing.T) {
	c := newTestCluster(t, 3)
	lead := c.leader()
	mustPut(t, lead, "k", "v")
	for _, f := range c.followers() {
		c.stop(f)
	}
	c.stop(lead)
	if log := lead.logText(); strings.Contains(log, "leader transfer took too long") {
		t.Fatalf("the last member waited out a leadership transfer to a member that had stopped:\n%s", log)
	}
}

// MoveLeader hands leadership to the member named; on a follower it is
// refused with etcd's error.
func TestClusterMoveLeader(t *testing.T) {
	c := newTestCluster(t, 3)
	lead := c.leader()
	to := c.followers()[0]
	if _, err := to.maint.MoveLeader(ctxT(t), &pb.MoveLeaderRequest{TargetID: lead.s.id}); err == nil {
		t.Fatal("MoveLeader on a follower succeeded")
	} else {
		wantErr(t, err, rpctypes.ErrGRPCNotLeader)
	}
	if _, err := lead.maint.MoveLeader(ctxT(t), &pb.MoveLeaderRequest{TargetID: to.s.id}); err != nil {
		t.Fatal(err)
	}
	if l := c.leader(); l != to {
		t.Fatalf("%s leads after moving the leadership to %s", l.name, to.name)
	}
	if _, err := to.maint.MoveLeader(ctxT(t), &pb.MoveLeaderRequest{TargetID: 12345}); err == nil {
		t.Fatal("MoveLeader to an unknown member succeeded")
	} else {
		wantErr(t, err, rpctypes.ErrGRPCBadLeaderTransferee)
	}
}

// TestClusterLeaseCheckpointGate: with the LeaseCheckpoint gate the
// leader checkpoints each long lease's remaining TTL through raft, so a
// new leader (and a restarted cluster) restarts the lease's clock from
// what was left, not from the granted TTL; without it (etcd's default) the
// new leader starts the full TTL over, as etcd's does.
func TestClusterLeaseCheckpointGate(t *testing.T) {
	t.Run("on", testLeaseCheckpointOn)
	t.Run("off", func(t *testing.T) {
		const granted = 20
		c := newTestClusterHooked(t, 3, storageHooks{leaseCheckpointInterval: time.Second})
		lead := c.leader()
		g, err := lead.lease.LeaseGrant(ctxT(t), &pb.LeaseGrantRequest{TTL: granted})
		if err != nil {
			t.Fatal(err)
		}
		// Three checkpoint intervals of the lease's clock on the leader.
		poll.Until(t, "the lease's TTL to fall by 3 s on the leader", func() bool {
			ttl, err := lead.lease.LeaseTimeToLive(ctxT(t), &pb.LeaseTimeToLiveRequest{ID: g.ID})
			return err == nil && ttl.TTL <= granted-3
		})
		for _, m := range c.members {
			if info, ok := m.s.lessor.Lookup(g.ID); !ok || info.RemainingTTL != 0 {
				t.Fatalf("%s: the lease has a checkpoint (%d s) without the gate", m.name, info.RemainingTTL)
			}
		}
		to := c.followers()[0]
		if _, err := lead.maint.MoveLeader(ctxT(t), &pb.MoveLeaderRequest{TargetID: to.s.id}); err != nil {
			t.Fatal(err)
		}
		ttl, err := to.lease.LeaseTimeToLive(ctxT(t), &pb.LeaseTimeToLiveRequest{ID: g.ID})
		if err != nil {
			t.Fatal(err)
		}
		// The new leader's clock starts from the granted TTL plus the
		// election timeout (0.5 s), truncated to whole seconds.
		if ttl.TTL < granted-1 {
			t.Fatalf("after the leader change without checkpoints: TTL %d, want the granted %d s again", ttl.TTL, granted)
		}
		t.Logf("remaining TTL after the leader change without checkpoints: %d s (granted %d s)", ttl.TTL, granted)
	})
}

func testLeaseCheckpointOn(t *testing.T) {
	const granted = 20
	c := newTestClusterHooked(t, 3, storageHooks{leaseCheckpointInterval: time.Second}, "--feature-gates=LeaseCheckpoint=true")
	lead := c.leader()
	g, err := lead.lease.LeaseGrant(ctxT(t), &pb.LeaseGrantRequest{TTL: granted})
	if err != nil {
		t.Fatal(err)
	}
	// checkpointed waits until every running member has applied a
	// checkpoint of at most below seconds and returns the largest one.
	checkpointed := func(below int64) int64 {
		var most int64
		poll.Until(t, fmt.Sprintf("a checkpoint of at most %d s on every member", below), func() bool {
			most = 0
			for _, m := range c.members {
				if m.stopped {
					continue
				}
				info, ok := m.s.lessor.Lookup(g.ID)
				if !ok || info.RemainingTTL <= 0 || info.RemainingTTL > below {
					return false
				}
				most = max(most, info.RemainingTTL)
			}
			return true
		})
		return most
	}
	cp := checkpointed(granted - 3)
	to := c.followers()[0]
	if _, err := lead.maint.MoveLeader(ctxT(t), &pb.MoveLeaderRequest{TargetID: to.s.id}); err != nil {
		t.Fatal(err)
	}
	if l := c.leader(); l != to {
		t.Fatalf("%s leads after moving the leadership to %s", l.name, to.name)
	}
	ttl, err := to.lease.LeaseTimeToLive(ctxT(t), &pb.LeaseTimeToLiveRequest{ID: g.ID})
	if err != nil {
		t.Fatal(err)
	}
	// The new leader's clock starts from the checkpoint plus the election
	// timeout (0.5 s), truncated to whole seconds.
	if ttl.GrantedTTL != granted || ttl.TTL <= 0 || ttl.TTL > cp {
		t.Fatalf("after the leader change: TTL %d (granted %d), want 1..%d (the last checkpoint)", ttl.TTL, ttl.GrantedTTL, cp)
	}
	t.Logf("remaining TTL after the leader change: %d s (checkpoint %d s, granted %d s)", ttl.TTL, cp, granted)

	// Checkpoints are persisted: a full restart keeps them too.
	cp = checkpointed(ttl.TTL - 2)
	for _, m := range c.members {
		c.stop(m)
	}
	for _, m := range c.members {
		c.start(m)
	}
	for _, m := range c.members {
		c.waitReady(m)
	}
	lead = c.leader()
	ttl, err = lead.lease.LeaseTimeToLive(ctxT(t), &pb.LeaseTimeToLiveRequest{ID: g.ID})
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL <= 0 || ttl.TTL > cp {
		t.Fatalf("after a restart of every member: TTL %d, want 1..%d (the last checkpoint)", ttl.TTL, cp)
	}
	t.Logf("remaining TTL after a full restart: %d s (checkpoint %d s)", ttl.TTL, cp)
}

// TestClusterReadsWaitForSnapshotInstall: serializable reads on a member
// installing a leader's snapshot never see the page store of the image
// with the key index of the state it replaces. The leader compacted away
// the revision the old index holds for "k", so a read in between would
// fail or come back empty; reads must instead wait for the install and
// see "k" before or after it. The install holds its window open until
// reads sent during it are known (readBlocked) to be waiting inside the
// server, so every run tests the window.
func TestClusterReadsWaitForSnapshotInstall(t *testing.T) {
	const readers = 4
	type result struct {
		val    string
		err    error
		during bool
	}
	var (
		mu        sync.Mutex
		results   []result
		hookErr   error
		lagClient string // the lagging member's client address, set before it restarts
		once      sync.Once
		inside    sync.WaitGroup
	)
	record := func(r result) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}
	read := func(kv pb.KVClient, during bool, opts ...grpc.CallOption) {
		ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
		defer cancel()
		resp, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), Serializable: true}, opts...)
		res := result{err: err, during: during}
		if err == nil && len(resp.Kvs) == 1 {
			res.val = string(resp.Kvs[0].Value)
		}
		record(res)
	}
	blocked := make(chan struct{}, 1024)
	answered := make(chan struct{}, readers)
	windowEntered := make(chan struct{})
	hooks := storageHooks{
		readBlocked: func() {
			select {
			case blocked <- struct{}{}:
			default:
			}
		},
		restoreWindow: func() {
			once.Do(func() {
				defer close(windowEntered)
				// The image is in place and the state not yet rebuilt:
				// send reads on a connection of their own and keep the
				// window open until each is waiting in the server (or,
				// were the window not guarded, has its answer).
				conn, err := grpc.NewClient(lagClient, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					hookErr = err
					return
				}
				kv := pb.NewKVClient(conn)
				for r := 0; r < readers; r++ {
					inside.Add(1)
					go func() {
						defer inside.Done()
						read(kv, true, grpc.WaitForReady(true))
						answered <- struct{}{}
					}()
				}
				go func() { inside.Wait(); conn.Close() }()
				timeout := time.After(poll.Deadline)
				for r := 0; r < readers; r++ {
					select {
					case <-blocked:
					case <-answered:
					case <-timeout:
						hookErr = fmt.Errorf("only %d of %d reads sent during the install were seen waiting in the server within %v", r, readers, poll.Deadline)
						return
					}
				}
			})
		},
	}
	c := newTestClusterHooked(t, 3, hooks, "--snapshot-count", "50", "--snapshot-catchup-entries", "10")
	lead := c.leader()
	lagging := c.followers()[0]
	lagClient = strings.TrimPrefix(lagging.client, "http://")
	mustPut(t, lead, "k", "v1")
	// Enough keys that the member's index is worth rebuilding.
	for i := 0; i < 20; i++ {
		txn := &pb.TxnRequest{}
		for j := 0; j < 100; j++ {
			txn.Success = append(txn.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{
				Key: []byte(fmt.Sprintf("r/%02d/%03d", i, j)), Value: []byte("x")}}})
		}
		if _, err := lead.kv.Txn(ctxT(t), txn); err != nil {
			t.Fatal(err)
		}
	}
	waitApplied := func(m *clusterMember, rev int64) {
		poll.Until(t, m.name+" to reach revision "+fmt.Sprint(rev), func() bool { return m.s.kv.Rev() >= rev })
	}
	waitApplied(lagging, lead.s.kv.Rev())
	c.stop(lagging)
	var last *pb.PutResponse
	for i := 0; i < 100; i++ {
		last = mustPut(t, lead, "k", fmt.Sprintf("v2-%d", i))
	}
	if _, err := lead.kv.Compact(ctxT(t), &pb.CompactionRequest{Revision: last.Header.Revision, Physical: true}); err != nil {
		t.Fatal(err)
	}
	final := mustPut(t, lead, "after", "z")

	c.start(lagging)
	// Reads around the install, too: before it, after it, or waiting.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				read(lagging.kv, false)
			}
		}()
	}
	c.waitReady(lagging)
	select {
	case <-windowEntered:
	case <-time.After(poll.Deadline):
		t.Fatalf("the member never installed a snapshot; its log:\n%s", lagging.logText())
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	waitApplied(lagging, final.Header.Revision)
	close(stop)
	wg.Wait()
	inside.Wait()
	served, during := 0, 0
	for _, r := range results {
		if r.err != nil && status.Code(r.err) == codes.Unavailable && !r.during {
			continue // the member was not serving yet
		}
		if r.err != nil {
			t.Fatalf("a serializable read around the snapshot install (sent during it: %v) failed: %v", r.during, r.err)
		}
		if r.val != "v1" && !strings.HasPrefix(r.val, "v2-") {
			t.Fatalf("a serializable read around the snapshot install (sent during it: %v) saw k = %q, want v1 or a later value", r.during, r.val)
		}
		if r.during {
			during++
		}
		served++
	}
	t.Logf("%d reads served around the install, %d of them sent during it and waiting for it", served, during)
	if during != readers {
		t.Fatalf("%d reads sent during the install were served, want %d", during, readers)
	}
}

// nestedTxn is a txn nested depth levels deep that puts key at its top
// level, the innermost txn with a compare that holds.
func nestedTxn(key string, depth int) *pb.TxnRequest {
	r := &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte(key), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER,
		TargetUnion: &pb.Compare_Version{Version: -1}}}}
	for i := 1; i < depth; i++ {
		r = &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: r}}}}
	}
	r.Success = append(r.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte("deep")}}})
	return r
}

// TestClusterDeepTxnAppliedEverywhere: a txn nested as deep as a member's
// gRPC decoding accepts is applied on every member. Wrapped for raft it
// is one level deeper than protobuf's default decoding limit, so a
// follower that decoded entries with that limit skipped it while the
// leader applied it from its proposer's copy (server/apply.go,
// entryDecoding).
func TestClusterDeepTxnAppliedEverywhere(t *testing.T) {
	// The deepest txn that decodes as a client request.
	depth := 0
	for d := 4990; d < 5010; d++ {
		b, err := proto.Marshal(nestedTxn("deep", d))
		if err != nil {
			t.Fatal(err)
		}
		if proto.Unmarshal(b, &pb.TxnRequest{}) != nil {
			break
		}
		depth = d
	}
	if depth == 0 {
		t.Fatal("no depth between 4990 and 5010 is protobuf's limit")
	}
	wrapped, err := proto.Marshal(&pb.InternalRaftRequest{Header: &pb.RequestHeader{ID: 1}, Txn: nestedTxn("deep", depth)})
	if err != nil {
		t.Fatal(err)
	}
	if proto.Unmarshal(wrapped, &pb.InternalRaftRequest{}) == nil {
		t.Fatalf("a txn %d deep, wrapped, decodes with the default limit; the test no longer covers the case", depth)
	}
	// etcd's --max-txn-ops budget shrinks by each level's ops.
	c := newTestCluster(t, 3, "--max-txn-ops", "20000")
	lead := c.leader()
	resp, err := lead.kv.Txn(ctxT(t), nestedTxn("deep", depth))
	if err != nil {
		t.Fatalf("a txn %d deep: %v", depth, err)
	}
	rev := resp.Header.Revision
	poll.Until(t, "every member to apply the txn", func() bool {
		for _, m := range c.members {
			if m.s.kv.Rev() < rev {
				return false
			}
		}
		return true
	})
	var hashes []uint32
	for _, m := range c.members {
		if got := getValue(t, m, "deep", true); got != "deep" {
			t.Fatalf("%s: deep = %q after the txn %d deep, want \"deep\"", m.name, got, depth)
		}
		h, err := m.maint.HashKV(ctxT(t), &pb.HashKVRequest{Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h.Hash)
	}
	if hashes[0] != hashes[1] || hashes[1] != hashes[2] {
		t.Fatalf("HashKV differs between members: %v", hashes)
	}
}

// TestClusterFastLeaseKeepAliveGate: a keep-alive on the leader waits
// for everything committed to be applied, as etcd's (for up to a second,
// then etcd's "waiting for the applied index took too long"), unless the
// FastLeaseKeepAlive gate (on by default) lets a lease the leader has be
// renewed at once. Apply is held back (beforeApply) while a put is
// committed.
func TestClusterFastLeaseKeepAliveGate(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("FastLeaseKeepAlive=%v", on), func(t *testing.T) {
			var hold atomic.Bool
			release := make(chan struct{})
			c := newTestClusterHooked(t, 3, storageHooks{beforeApply: func() {
				if hold.Load() {
					<-release
				}
			}}, fmt.Sprintf("--feature-gates=FastLeaseKeepAlive=%v", on))
			released := false
			defer func() {
				if !released {
					close(release)
				}
			}()
			lead := c.leader()
			g, err := lead.lease.LeaseGrant(ctxT(t), &pb.LeaseGrantRequest{TTL: 60})
			if err != nil {
				t.Fatal(err)
			}
			hold.Store(true)
			go lead.kv.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
			poll.Until(t, "a put committed and not applied on the leader", func() bool {
				return lead.s.node.Committed() > lead.s.node.Applied()
			})
			start := time.Now()
			ttl, err := lead.s.renewLease(ctxT(t), g.ID)
			took := time.Since(start)
			switch {
			case on && (err != nil || ttl != 60):
				t.Fatalf("with the gate, a keep-alive while apply is behind: TTL %d, %v; want 60 at once", ttl, err)
			case !on:
				wantErr(t, err, rpctypes.ErrGRPCTimeoutWaitAppliedIndex)
			}
			close(release)
			released = true
			t.Logf("FastLeaseKeepAlive=%v: keep-alive while apply is behind: TTL %d, error %v, after %v", on, ttl, err, took.Round(time.Millisecond))
		})
	}
}
