package e2e

// The peer transport's proof that it does not assume the peer is Strata:
// a Strata raft/transport and etcd 3.7.3's own rafthttp.Transport, in one
// process, each over real loopback HTTP, each with a Raft that records what
// it is given, exchange every kind of traffic the peer protocol carries.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xiang90/probing"
	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/rafthttp"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	stats "go.etcd.io/etcd/server/v3/etcdserver/api/v2stats"
	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/raft/transport"
)

const (
	wireCluster = 0x5eed
	strataID    = 0x1a
	etcdID      = 0x2b
)

// wireRaft records what a transport hands to raft; it serves as both
// etcd's rafthttp.Raft and Strata's transport.Raft.
type wireRaft struct {
	mu          sync.Mutex
	msgs        []*raftpb.Message
	unreachable map[uint64]int
	snaps       []etcdraft.SnapshotStatus
	removed     map[uint64]bool
}

func newWireRaft() *wireRaft {
	return &wireRaft{unreachable: map[uint64]int{}, removed: map[uint64]bool{}}
}

func (r *wireRaft) Process(_ context.Context, m *raftpb.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
	return nil
}

func (r *wireRaft) IsIDRemoved(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.removed[id]
}

func (r *wireRaft) ReportUnreachable(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unreachable[id]++
}

func (r *wireRaft) ReportSnapshot(_ uint64, st etcdraft.SnapshotStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snaps = append(r.snaps, st)
}

func (r *wireRaft) got(typ raftpb.MessageType) []*raftpb.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*raftpb.Message
	for _, m := range r.msgs {
		if m.GetType() == typ {
			out = append(out, m)
		}
	}
	return out
}

func (r *wireRaft) snapReports() []etcdraft.SnapshotStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]etcdraft.SnapshotStatus(nil), r.snaps...)
}

func (r *wireRaft) unreachableCount(id uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unreachable[id]
}

// serve listens on loopback first (a transport needs its own URL) and
// serves whatever handler *h holds once it is set.
type lazyHandler struct {
	mu sync.Mutex
	h  http.Handler
}

func (l *lazyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	h := l.h
	l.mu.Unlock()
	if h == nil {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

func serveLoopback(t *testing.T) (string, *lazyHandler) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lh := &lazyHandler{}
	srv := &http.Server{Handler: lh, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), lh
}

// imageStore is the Strata side's Snapshots: it sends image and stores
// received images in dir.
type imageStore struct {
	dir   string
	image []byte
	mu    sync.Mutex
	peers []transport.PeerInfo
}

func (s *imageStore) Open(_ *raftpb.Message, peer transport.PeerInfo) (io.ReadCloser, int64, error) {
	s.mu.Lock()
	s.peers = append(s.peers, peer)
	s.mu.Unlock()
	return io.NopCloser(bytes.NewReader(s.image)), int64(len(s.image)), nil
}

func (s *imageStore) ReceivePath(m *raftpb.Message) (string, error) {
	return filepath.Join(s.dir, transport.FormatID(m.GetSnapshot().GetMetadata().GetIndex())+".img"), nil
}

type strataSide struct {
	tr     *transport.Transport
	raft   *wireRaft
	url    string
	images *imageStore
}

func startStrataSide(t *testing.T, id, cluster uint64, image []byte) *strataSide {
	t.Helper()
	url, lh := serveLoopback(t)
	s := &strataSide{raft: newWireRaft(), url: url, images: &imageStore{dir: t.TempDir(), image: image}}
	tr, err := transport.New(transport.Config{
		ID: id, ClusterID: cluster, URLs: []string{url}, Raft: s.raft, Snapshots: s.images,
		ProbeInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Stop)
	s.tr = tr
	lh.mu.Lock()
	lh.h = transport.NewPeerHandler(transport.PeerHandlerConfig{
		Transport: tr,
		Members: func() []*membership.Member {
			return []*membership.Member{
				{ID: etcdID, Name: "etcd-side", PeerURLs: []string{"http://127.0.0.1:1"}, ClientURLs: []string{"http://127.0.0.1:2"}},
				{ID: id, Name: "strata-side", PeerURLs: []string{url}, IsLearner: true},
			}
		},
		Versions: func() (string, string) { return "3.7.0", "3.7.0" },
	})
	lh.mu.Unlock()
	return s
}

type etcdSide struct {
	tr      *rafthttp.Transport
	raft    *wireRaft
	url     string
	snapDir string
	logs    *observer.ObservedLogs
	errc    chan error
}

func startEtcdSide(t *testing.T, id, cluster uint64) *etcdSide {
	t.Helper()
	url, lh := serveLoopback(t)
	core, logs := observer.New(zapcore.InfoLevel)
	lg := zap.New(core)
	e := &etcdSide{raft: newWireRaft(), url: url, snapDir: t.TempDir(), logs: logs, errc: make(chan error, 1)}
	e.tr = &rafthttp.Transport{
		Logger:      lg,
		DialTimeout: time.Second,
		ID:          types.ID(id),
		URLs:        types.MustNewURLs([]string{url}),
		ClusterID:   types.ID(cluster),
		Raft:        e.raft,
		Snapshotter: snap.New(lg, e.snapDir),
		ServerStats: stats.NewServerStats("etcd-side", types.ID(id).String()),
		LeaderStats: stats.NewLeaderStats(lg, types.ID(id).String()),
		ErrorC:      e.errc,
	}
	if err := e.tr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.tr.Stop)
	lh.mu.Lock()
	lh.h = e.tr.Handler()
	lh.mu.Unlock()
	return e
}

func (e *etcdSide) logged(msg string) bool { return e.logs.FilterMessage(msg).Len() > 0 }

// connectedPair is a Strata member and an etcd member that are peers of
// each other, with all four streams up.
func connectedPair(t *testing.T, image []byte) (*strataSide, *etcdSide) {
	t.Helper()
	s := startStrataSide(t, strataID, wireCluster, image)
	e := startEtcdSide(t, etcdID, wireCluster)
	if err := s.tr.AddPeer(etcdID, []string{e.url}); err != nil {
		t.Fatal(err)
	}
	e.tr.AddPeer(types.ID(strataID), []string{s.url})
	poll.Until(t, "all four streams between Strata and etcd", func() bool {
		st, _ := s.tr.PeerStatus(etcdID)
		return st.WritingMsgApp && st.WritingMessage && st.ReadingMsgApp && st.ReadingMessage
	})
	poll.Until(t, "etcd to see Strata active", func() bool { return !e.tr.ActiveSince(types.ID(strataID)).IsZero() })
	return s, e
}

func wmsg(typ raftpb.MessageType, from, to, term, index uint64) *raftpb.Message {
	return &raftpb.Message{Type: typ.Enum(), From: proto.Uint64(from), To: proto.Uint64(to), Term: proto.Uint64(term), Index: proto.Uint64(index)}
}

// appChain is raft's replication pattern: a full MsgApp then continuations
// (which the MsgApp v2 stream sends in its short form), with entries up to
// 2 MiB (above etcd's 1 MiB codec buffer).
func appChain(from, to uint64, n int) []*raftpb.Message {
	var out []*raftpb.Message
	last := uint64(40)
	for i := range n {
		m := wmsg(raftpb.MsgApp, from, to, 6, last)
		m.LogTerm, m.Commit = proto.Uint64(6), proto.Uint64(last)
		k := 1 + i%4
		for j := range k {
			size := 100
			if j == 0 && i%5 == 0 {
				size = 2<<20 + i
			}
			data := bytes.Repeat([]byte{byte(i + j)}, size)
			m.Entries = append(m.Entries, &raftpb.Entry{Term: proto.Uint64(6), Index: proto.Uint64(last + 1 + uint64(j)), Type: raftpb.EntryNormal.Enum(), Data: data})
		}
		last += uint64(k)
		out = append(out, m)
	}
	return out
}

func sameMessages(t *testing.T, what string, got, want []*raftpb.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d messages, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("%s: message %d differs:\n got %v\nwant %v", what, i, got[i], want[i])
		}
	}
}

// TestPeerWireStreams: MsgApp on the MsgApp v2 stream and heartbeats and
// votes on the message stream, both directions, byte-compatible.
func TestPeerWireStreams(t *testing.T) {
	s, e := connectedPair(t, nil)

	// Strata -> etcd.
	apps := appChain(strataID, etcdID, 12)
	others := []*raftpb.Message{wmsg(raftpb.MsgHeartbeat, strataID, etcdID, 6, 0), wmsg(raftpb.MsgVote, strataID, etcdID, 7, 52)}
	others[1].LogTerm = proto.Uint64(6)
	s.tr.Send(append(append([]*raftpb.Message(nil), apps...), others...))
	poll.Until(t, "etcd to receive Strata's MsgApps", func() bool { return len(e.raft.got(raftpb.MsgApp)) == len(apps) })
	sameMessages(t, "Strata->etcd MsgApp", e.raft.got(raftpb.MsgApp), apps)
	poll.Until(t, "etcd to receive Strata's heartbeat and vote", func() bool {
		return len(e.raft.got(raftpb.MsgHeartbeat)) == 1 && len(e.raft.got(raftpb.MsgVote)) == 1
	})
	sameMessages(t, "Strata->etcd heartbeat", e.raft.got(raftpb.MsgHeartbeat), others[:1])
	sameMessages(t, "Strata->etcd vote", e.raft.got(raftpb.MsgVote), others[1:])
	st, _ := s.tr.PeerStatus(etcdID)
	if st.SentMsgApp != uint64(len(apps)) || st.SentMessage != 2 || st.SentPipeline != 0 {
		t.Fatalf("Strata sent msgapp/message/pipeline %d/%d/%d, want %d/2/0", st.SentMsgApp, st.SentMessage, st.SentPipeline, len(apps))
	}

	// etcd -> Strata.
	apps = appChain(etcdID, strataID, 12)
	others = []*raftpb.Message{wmsg(raftpb.MsgHeartbeatResp, etcdID, strataID, 6, 0), wmsg(raftpb.MsgPreVote, etcdID, strataID, 8, 60)}
	e.tr.Send(append(append([]*raftpb.Message(nil), apps...), others...))
	poll.Until(t, "Strata to receive etcd's messages", func() bool {
		return len(s.raft.got(raftpb.MsgApp)) == len(apps) && len(s.raft.got(raftpb.MsgHeartbeatResp)) == 1 && len(s.raft.got(raftpb.MsgPreVote)) == 1
	})
	sameMessages(t, "etcd->Strata MsgApp", s.raft.got(raftpb.MsgApp), apps)
	sameMessages(t, "etcd->Strata heartbeat response", s.raft.got(raftpb.MsgHeartbeatResp), others[:1])
	sameMessages(t, "etcd->Strata pre-vote", s.raft.got(raftpb.MsgPreVote), others[1:])
	st, _ = s.tr.PeerStatus(etcdID)
	if st.ReceivedMsgApp != uint64(len(apps)) || st.ReceivedMessage != 2 || st.ReceivedPipeline != 0 {
		t.Fatalf("Strata received msgapp/message/pipeline %d/%d/%d, want %d/2/0", st.ReceivedMsgApp, st.ReceivedMessage, st.ReceivedPipeline, len(apps))
	}
	if st.Strata || st.ServerVersion != "3.7.3" {
		t.Fatalf("Strata's view of the etcd peer: %+v", st.PeerInfo)
	}
}

// TestPeerWirePipeline: POST /raft both ways. etcd sends MsgSnap through
// its pipeline; a Strata member etcd does not know is answered through the
// remote etcd makes from its X-PeerURLs, and talks to etcd by pipeline.
func TestPeerWirePipeline(t *testing.T) {
	s, e := connectedPair(t, nil)
	m := wmsg(raftpb.MsgSnap, etcdID, strataID, 6, 0)
	m.Snapshot = &raftpb.Snapshot{Data: []byte("v2 store"), Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(99), Term: proto.Uint64(6), ConfState: &raftpb.ConfState{Voters: []uint64{strataID, etcdID}},
	}}
	e.tr.Send([]*raftpb.Message{m})
	poll.Until(t, "Strata to receive etcd's pipelined MsgSnap", func() bool { return len(s.raft.got(raftpb.MsgSnap)) == 1 })
	sameMessages(t, "etcd->Strata pipeline", s.raft.got(raftpb.MsgSnap), []*raftpb.Message{m})
	poll.Until(t, "etcd's raft to hear SnapshotFinish", func() bool {
		r := e.raft.snapReports()
		return len(r) == 1 && r[0] == etcdraft.SnapshotFinish
	})
	if st, _ := s.tr.PeerStatus(etcdID); st.ReceivedPipeline != 1 {
		t.Fatalf("Strata counted %d pipeline messages from etcd", st.ReceivedPipeline)
	}

	// A second Strata member that etcd has no peer entry for: etcd
	// refuses its stream dials (404), so it uses the pipeline, and etcd
	// answers through a remote.
	const strangerID = 0x3c
	s2 := startStrataSide(t, strangerID, wireCluster, nil)
	if err := s2.tr.AddPeer(etcdID, []string{e.url}); err != nil {
		t.Fatal(err)
	}
	vote := wmsg(raftpb.MsgVote, strangerID, etcdID, 9, 70)
	vote.LogTerm = proto.Uint64(8)
	s2.tr.Send([]*raftpb.Message{vote})
	poll.Until(t, "etcd to receive the stranger's pipelined vote", func() bool { return len(e.raft.got(raftpb.MsgVote)) == 1 })
	sameMessages(t, "Strata->etcd pipeline", e.raft.got(raftpb.MsgVote), []*raftpb.Message{vote})
	// The sender counts the message once etcd's 204 is back, which may be
	// after etcd's raft has it.
	poll.Until(t, "the stranger to count one message sent by pipeline", func() bool {
		st, _ := s2.tr.PeerStatus(etcdID)
		return st.SentPipeline == 1
	})
	resp := wmsg(raftpb.MsgVoteResp, etcdID, strangerID, 9, 0)
	e.tr.Send([]*raftpb.Message{resp})
	poll.Until(t, "the stranger to receive etcd's answer", func() bool { return len(s2.raft.got(raftpb.MsgVoteResp)) == 1 })
	sameMessages(t, "etcd->Strata remote", s2.raft.got(raftpb.MsgVoteResp), []*raftpb.Message{resp})
	if !e.logged("added new remote peer") {
		t.Fatal("etcd did not add a remote from Strata's X-PeerURLs")
	}
}

// TestPeerWireSnapshot: a MsgSnap with a 24 MiB image through
// /raft/snapshot, both ways: etcd's snapshotter stores what Strata sends
// (raw, as etcd expects), and Strata stores what etcd's snapshot sender
// sends; each raft sees the MsgSnap and each sender's raft hears
// SnapshotFinish.
func TestPeerWireSnapshot(t *testing.T) {
	image := make([]byte, 24<<20)
	for i := range image {
		image[i] = byte(i*7 + i/4096)
	}
	s, e := connectedPair(t, image)

	m := wmsg(raftpb.MsgSnap, strataID, etcdID, 6, 0)
	m.Snapshot = &raftpb.Snapshot{Data: []byte("membership"), Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(0x4d), Term: proto.Uint64(6), ConfState: &raftpb.ConfState{Voters: []uint64{strataID, etcdID}},
	}}
	s.tr.Send([]*raftpb.Message{m})
	poll.Until(t, "Strata's raft to hear SnapshotFinish", func() bool {
		r := s.raft.snapReports()
		return len(r) == 1 && r[0] == etcdraft.SnapshotFinish
	})
	sameMessages(t, "Strata->etcd MsgSnap", e.raft.got(raftpb.MsgSnap), []*raftpb.Message{m})
	got, err := os.ReadFile(filepath.Join(e.snapDir, "000000000000004d.snap.db"))
	if err != nil || !bytes.Equal(got, image) {
		t.Fatalf("etcd stored %d bytes (%v), want the %d byte image", len(got), err, len(image))
	}
	if len(s.images.peers) != 1 || s.images.peers[0].Strata {
		t.Fatalf("image opened for %+v, want once, for a peer known not to be Strata", s.images.peers)
	}

	back := wmsg(raftpb.MsgSnap, etcdID, strataID, 7, 0)
	back.Snapshot = &raftpb.Snapshot{Data: []byte("membership 2"), Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(0x5e), Term: proto.Uint64(7), ConfState: &raftpb.ConfState{Voters: []uint64{strataID, etcdID}},
	}}
	sm := snap.NewMessage(back, io.NopCloser(bytes.NewReader(image[:20<<20])), 20<<20)
	e.tr.SendSnapshot(sm)
	select {
	case ok := <-sm.CloseNotify():
		if !ok {
			t.Fatal("etcd's snapshot sender reports failure")
		}
	case <-time.After(poll.Deadline):
		t.Fatal("etcd's snapshot sender never finished")
	}
	sameMessages(t, "etcd->Strata MsgSnap", s.raft.got(raftpb.MsgSnap), []*raftpb.Message{back})
	path, _ := s.images.ReceivePath(back)
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, image[:20<<20]) {
		t.Fatalf("Strata stored %d bytes (%v), want etcd's 20 MiB image", len(got), err)
	}
	poll.Until(t, "etcd's raft to hear SnapshotFinish", func() bool {
		r := e.raft.snapReports()
		return len(r) == 1 && r[0] == etcdraft.SnapshotFinish
	})
}

// TestPeerWireProbing: each side's prober reads the other's /raft/probing.
func TestPeerWireProbing(t *testing.T) {
	s, e := connectedPair(t, nil)
	poll.Until(t, "Strata's probes of etcd", func() bool {
		st, _ := s.tr.PeerStatus(etcdID)
		return st.Probes >= 3 && st.RTT > 0
	})
	p := probing.NewProber(http.DefaultTransport)
	if err := p.AddHTTP("strata", 20*time.Millisecond, []string{s.url + rafthttp.ProbingPrefix}); err != nil {
		t.Fatal(err)
	}
	defer p.RemoveAll()
	st, err := p.Status("strata")
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "etcd's prober to find Strata healthy", func() bool { return st.Total() >= 3 && st.Health() })
	if st.Loss() != 0 {
		t.Fatalf("etcd's prober lost %d of %d probes: %v", st.Loss(), st.Total(), st.Err())
	}
	_ = e
}

// TestPeerWireClusterIDRefusal: members of different clusters refuse each
// other, and each side reads the other's refusal as etcd means it.
func TestPeerWireClusterIDRefusal(t *testing.T) {
	s := startStrataSide(t, strataID, wireCluster, nil)
	e := startEtcdSide(t, etcdID, wireCluster+1)
	if err := s.tr.AddPeer(etcdID, []string{e.url}); err != nil {
		t.Fatal(err)
	}
	e.tr.AddPeer(types.ID(strataID), []string{s.url})
	poll.Until(t, "etcd to read Strata's stream refusal as a cluster ID mismatch", func() bool {
		return e.logged("request sent was ignored by remote peer due to cluster ID mismatch")
	})
	poll.Until(t, "Strata to read etcd's refusal as a cluster ID mismatch", func() bool {
		st, _ := s.tr.PeerStatus(etcdID)
		return strings.Contains(st.LastError, "cluster ID mismatch")
	})
	// No stream is up, so both send by pipeline, and both are refused.
	e.tr.Send([]*raftpb.Message{wmsg(raftpb.MsgHeartbeat, etcdID, strataID, 1, 0)})
	poll.Until(t, "etcd's pipeline to read Strata's refusal", func() bool {
		return e.logged("request sent was ignored due to cluster ID mismatch") && e.raft.unreachableCount(strataID) > 0
	})
	s.tr.Send([]*raftpb.Message{wmsg(raftpb.MsgHeartbeat, strataID, etcdID, 1, 0)})
	poll.Until(t, "Strata's pipeline post refused", func() bool { return s.raft.unreachableCount(etcdID) > 0 })
	if len(s.raft.msgs)+len(e.raft.msgs) != 0 {
		t.Fatal("a message crossed between clusters")
	}
}

// TestPeerWireRemovedMember: a member the other side removed is told so
// with 410 on its stream, and stops as etcd does (etcd: ErrorC; Strata:
// Removed()).
func TestPeerWireRemovedMember(t *testing.T) {
	s := startStrataSide(t, strataID, wireCluster, nil)
	e := startEtcdSide(t, etcdID, wireCluster)
	s.raft.removed[etcdID] = true
	e.raft.removed[strataID] = true
	if err := s.tr.AddPeer(etcdID, []string{e.url}); err != nil {
		t.Fatal(err)
	}
	e.tr.AddPeer(types.ID(strataID), []string{s.url})
	select {
	case err := <-e.errc:
		if !strings.Contains(err.Error(), "permanently removed") {
			t.Fatalf("etcd's critical error: %v", err)
		}
	case <-time.After(poll.Deadline):
		t.Fatal("etcd never learned from Strata that it was removed")
	}
	select {
	case <-s.tr.Removed():
	case <-time.After(poll.Deadline):
		t.Fatal("Strata never learned from etcd that it was removed")
	}
}

// TestPeerWireMembersAndVersion: etcd's own client code reads Strata's
// /members (etcdserver.GetClusterFromRemotePeers, what a joining etcd
// member runs) and /version (decoded as etcd's version.Versions).
func TestPeerWireMembersAndVersion(t *testing.T) {
	s := startStrataSide(t, strataID, wireCluster, nil)
	cl, err := etcdserver.GetClusterFromRemotePeers(zap.NewNop(), []string{s.url}, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	if cl.ID() != types.ID(wireCluster) {
		t.Fatalf("cluster id %s, want %s", cl.ID(), types.ID(wireCluster))
	}
	ms := cl.Members()
	if len(ms) != 2 {
		t.Fatalf("members %v", ms)
	}
	byID := map[types.ID]int{}
	for i, m := range ms {
		byID[m.ID] = i
	}
	st, et := ms[byID[strataID]], ms[byID[etcdID]]
	if st.Name != "strata-side" || !st.IsLearner || len(st.PeerURLs) != 1 || st.PeerURLs[0] != s.url ||
		et.Name != "etcd-side" || et.IsLearner || len(et.ClientURLs) != 1 || et.ClientURLs[0] != "http://127.0.0.1:2" {
		t.Fatalf("members as etcd reads them: %+v %+v", st, et)
	}
	resp, err := http.Get(s.url + "/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v version.Versions
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v.Server != version.Version || v.Cluster != "3.7.0" || v.Storage != "3.7.0" {
		t.Fatalf("/version as etcd reads it: %+v", v)
	}
}
