package transport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/poll"
)

func key(m *raftpb.Message) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestExchangeAmongMembers: three members over loopback HTTP send each
// other every kind of raft message; each arrives exactly once, equal to
// what was sent, MsgApp on the MsgApp v2 stream, MsgSnap (no snapshot
// store here) through the pipeline, everything else on the message stream.
func TestExchangeAmongMembers(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 3))
	ms := []*member{newMember(t, 1, 100, nil, nil), newMember(t, 2, 100, nil, nil), newMember(t, 3, 100, nil, nil)}
	connect(t, ms...)
	for _, a := range ms {
		for _, b := range ms {
			if a != b {
				waitStreams(t, a, b)
			}
		}
	}
	want := map[uint64]map[string]int{}
	type counts struct{ app, other, snap uint64 }
	sent := map[[2]uint64]*counts{}
	total := map[uint64]int{}
	for _, a := range ms {
		var batch []*raftpb.Message
		for range 400 {
			b := ms[rng.IntN(len(ms))]
			if b == a {
				continue
			}
			m := randomMessage(rng, a.id, b.id)
			batch = append(batch, m)
			if want[b.id] == nil {
				want[b.id] = map[string]int{}
			}
			want[b.id][key(m)]++
			total[b.id]++
			c := sent[[2]uint64{a.id, b.id}]
			if c == nil {
				c = &counts{}
				sent[[2]uint64{a.id, b.id}] = c
			}
			switch m.GetType() {
			case raftpb.MsgApp:
				c.app++
			case raftpb.MsgSnap:
				c.snap++
			default:
				c.other++
			}
			if len(batch) == 16 {
				a.tr.Send(batch)
				batch = nil
			}
		}
		a.tr.Send(batch)
	}
	for _, b := range ms {
		poll.Until(t, fmt.Sprintf("%d messages at member %d", total[b.id], b.id), func() bool {
			return len(b.raft.messages()) >= total[b.id]
		})
		got := map[string]int{}
		for _, m := range b.raft.messages() {
			got[key(m)]++
		}
		for k, n := range want[b.id] {
			if got[k] != n {
				m := &raftpb.Message{}
				_ = proto.Unmarshal([]byte(k), m)
				t.Fatalf("member %d received %v %d times, want %d", b.id, m, got[k], n)
			}
		}
		if len(got) != len(want[b.id]) {
			t.Fatalf("member %d received %d distinct messages, want %d", b.id, len(got), len(want[b.id]))
		}
	}
	for pair, c := range sent {
		a := ms[pair[0]-1]
		// A pipeline send is counted once the 204 is back, which can be
		// after the receiver recorded the message.
		poll.Until(t, "pipeline answers", func() bool {
			st, _ := a.tr.PeerStatus(pair[1])
			return st.SentPipeline >= c.snap
		})
		st, _ := a.tr.PeerStatus(pair[1])
		if st.SentMsgApp != c.app || st.SentMessage != c.other || st.SentPipeline != c.snap || st.Dropped != 0 {
			t.Fatalf("%d->%d sent app/message/pipeline/dropped %d/%d/%d/%d, want %d/%d/%d/0",
				pair[0], pair[1], st.SentMsgApp, st.SentMessage, st.SentPipeline, st.Dropped, c.app, c.other, c.snap)
		}
	}
}

// TestLargeMsgAppBatches: MsgApps of tens of MiB, with entries larger
// than etcd's 1 MiB codec buffer, arrive intact over the MsgApp v2 stream.
func TestLargeMsgAppBatches(t *testing.T) {
	a, b := newMember(t, 1, 100, nil, nil), newMember(t, 2, 100, nil, nil)
	connect(t, a, b)
	waitStreams(t, a, b)
	var sent []*raftpb.Message
	last := uint64(10)
	for i := range 6 {
		m := msg(raftpb.MsgApp, 1, 2, 3, last)
		m.LogTerm, m.Commit = proto.Uint64(3), proto.Uint64(last)
		m.Entries = entries(last+1, 6, (2<<20)+i*4099, 3)
		last += 6
		sent = append(sent, m)
	}
	a.tr.Send(sent)
	poll.Until(t, "6 large MsgApps", func() bool { return b.raft.count(raftpb.MsgApp) == len(sent) })
	got := b.raft.messages()
	for i := range sent {
		if !proto.Equal(got[i], sent[i]) {
			t.Fatalf("MsgApp %d differs after transfer", i)
		}
	}
	// The sender counts a message once its write returns, which can be
	// after the receiver has it.
	poll.Until(t, "the sender to count 6 MsgApps", func() bool {
		st, _ := a.tr.PeerStatus(2)
		return st.SentMsgApp >= 6
	})
	st, _ := a.tr.PeerStatus(2)
	if st.SentMsgApp != 6 || st.SentMessage != 0 || st.SentPipeline != 0 {
		t.Fatalf("sent %d MsgApps on the MsgApp v2 stream (and %d messages, %d pipeline), want 6 (status %+v)", st.SentMsgApp, st.SentMessage, st.SentPipeline, st)
	}
}

// TestSlowAppendProcessingDoesNotHoldHeartbeats: while the receiver's raft
// is stuck on a MsgApp, heartbeats from the same peer still reach it.
func TestSlowAppendProcessingDoesNotHoldHeartbeats(t *testing.T) {
	a, b := newMember(t, 1, 100, nil, nil), newMember(t, 2, 100, nil, nil)
	gate := make(chan struct{})
	defer close(gate)
	b.raft.setHook(func(ctx context.Context, m *raftpb.Message) error {
		if m.GetType() == raftpb.MsgApp {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
		return nil
	})
	connect(t, a, b)
	waitStreams(t, a, b)
	for i := range uint64(20) {
		m := msg(raftpb.MsgApp, 1, 2, 2, 100+i)
		m.Entries = entries(101+i, 1, 100, 2)
		a.tr.Send([]*raftpb.Message{m})
	}
	for range 50 {
		a.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 1, 2, 2, 0)})
	}
	poll.Until(t, "50 heartbeats while MsgApp is blocked", func() bool { return b.raft.count(raftpb.MsgHeartbeat) == 50 })
	if n := b.raft.count(raftpb.MsgApp); n != 0 {
		t.Fatalf("%d MsgApps processed through a closed gate", n)
	}
}

// rawStream opens one of a's streams as peer `from` would, without a
// transport behind it: the test decides whether to read it.
func rawStream(t *testing.T, a *member, from uint64, typ streamType) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, a.url+typ.endpoint()+"/"+FormatID(from), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(hdrFrom, FormatID(from))
	req.Header.Set(hdrServerVersion, "3.7.3")
	req.Header.Set(hdrMinClusterVersion, "3.0.0")
	req.Header.Set(hdrClusterID, FormatID(a.cid))
	req.Header.Set(hdrRaftTo, FormatID(a.id))
	resp, err := (&http.Transport{}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream %s: %s", typ, resp.Status)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestSaturatedAppendStream: a peer that stops reading its MsgApp stream
// fills member a's queue for it. Send never blocks; the overflow is
// dropped and reported unreachable; and heartbeats still go out on the
// message stream, in full, the whole time.
func TestSaturatedAppendStream(t *testing.T) {
	peerSrv := httptest.NewServer(http.NotFoundHandler()) // the peer's own port: refuses a's dials
	defer peerSrv.Close()
	a := newMember(t, 1, 100, nil, func(c *Config) {
		c.StreamQueue = 64
		c.ConnWriteTimeout = poll.Deadline // a blocked write must stay blocked
	})
	if err := a.tr.AddPeer(2, []string{peerSrv.URL}); err != nil {
		t.Fatal(err)
	}
	rawStream(t, a, 2, streamMsgApp) // never read
	msgResp := rawStream(t, a, 2, streamMessage)
	var heartbeats atomic.Int64
	go func() {
		dec := &messageDecoder{r: msgResp.Body, limit: maxStreamMessage}
		for {
			m, _, err := dec.decode()
			if err != nil {
				return // closed at cleanup
			}
			if m.GetType() == raftpb.MsgHeartbeat && !isLinkHeartbeat(m) {
				heartbeats.Add(1)
			}
		}
	}()
	poll.Until(t, "both streams attached", func() bool {
		st, _ := a.tr.PeerStatus(2)
		return st.WritingMsgApp && st.WritingMessage
	})

	// 300 MsgApps of 4 MiB: far more than any socket buffers hold, so
	// the writer is blocked for good with MsgApps still queued, and most
	// of them are dropped on a full queue.
	big := entries(1, 1, 4<<20, 2)
	const sends = 300
	for i := range sends {
		m := msg(raftpb.MsgApp, 1, 2, 2, uint64(i))
		m.Entries = big
		a.tr.Send([]*raftpb.Message{m})
	}
	poll.Until(t, "the drops reported unreachable", func() bool { return a.raft.unreachableCount(2) > 0 })
	st, _ := a.tr.PeerStatus(2)
	if st.Dropped == 0 {
		t.Fatalf("unreachable reported but nothing counted as dropped: %+v", st)
	}
	t.Logf("%d MsgApps of 4 MiB offered: %d written before the stream blocked, %d dropped", sends, st.SentMsgApp, st.Dropped)

	for range 50 { // within the message stream's queue of 64
		a.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 1, 2, 2, 0)})
	}
	poll.Until(t, "50 heartbeats past the stuck MsgApp stream", func() bool { return heartbeats.Load() == 50 })
	after, _ := a.tr.PeerStatus(2)
	if after.QueuedMsgApp == 0 {
		t.Fatalf("MsgApp queue drained into a stream nobody reads: %+v", after)
	}
	if after.Dropped != st.Dropped {
		t.Fatalf("%d heartbeats dropped", after.Dropped-st.Dropped)
	}
}

// TestReconnectAfterPeerRestart: when a peer restarts on the same address,
// both of its streams come back and messages flow on them again.
func TestReconnectAfterPeerRestart(t *testing.T) {
	fast := func(c *Config) { c.DialRetryMax = c.DialRetryMin }
	a, b := newMember(t, 1, 100, nil, fast), newMember(t, 2, 100, nil, fast)
	connect(t, a, b)
	waitStreams(t, a, b)
	a.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 1, 2, 1, 0)})
	poll.Until(t, "first heartbeat", func() bool { return b.raft.count(raftpb.MsgHeartbeat) == 1 })

	b.stop()
	poll.Until(t, "a to see b go", func() bool {
		st, _ := a.tr.PeerStatus(2)
		return !st.ReadingMessage && !st.ReadingMsgApp && !st.WritingMessage && !st.WritingMsgApp
	})
	b.restart()
	if err := b.tr.AddPeer(1, []string{a.url}); err != nil {
		t.Fatal(err)
	}
	waitStreams(t, a, b)
	waitStreams(t, b, a)
	app := msg(raftpb.MsgApp, 1, 2, 1, 5)
	app.Entries = entries(6, 2, 10, 1)
	a.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 1, 2, 1, 0), app})
	b.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeatResp, 2, 1, 1, 0)})
	poll.Until(t, "messages after the restart", func() bool {
		return b.raft.count(raftpb.MsgHeartbeat) == 1 && b.raft.count(raftpb.MsgApp) == 1 && a.raft.count(raftpb.MsgHeartbeatResp) == 1
	})
	st, _ := a.tr.PeerStatus(2)
	if st.SentPipeline != 0 || st.SentMessage != 2 || st.SentMsgApp != 1 {
		t.Fatalf("after the restart a sent pipeline/message/msgapp %d/%d/%d, want 0/2/1", st.SentPipeline, st.SentMessage, st.SentMsgApp)
	}
}

// TestPipelineWithoutStreams: a member that does not know us never dials
// our streams, so messages to it go through the pipeline, and it answers
// through a remote made from our X-PeerURLs; MsgSnap without a snapshot
// store is reported finished once the peer's raft has it.
func TestPipelineWithoutStreams(t *testing.T) {
	a, b := newMember(t, 1, 100, nil, nil), newMember(t, 2, 100, nil, nil)
	if err := a.tr.AddPeer(2, []string{b.url}); err != nil {
		t.Fatal(err)
	}
	snap := msg(raftpb.MsgSnap, 1, 2, 4, 0)
	snap.Snapshot = &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(50), Term: proto.Uint64(4)}}
	a.tr.Send([]*raftpb.Message{msg(raftpb.MsgVote, 1, 2, 4, 9), msg(raftpb.MsgHeartbeat, 1, 2, 4, 0), snap})
	poll.Until(t, "three messages through the pipeline", func() bool { return len(b.raft.messages()) == 3 })
	poll.Until(t, "the MsgSnap reported finished", func() bool {
		r := a.raft.snapReports()
		return len(r) == 1 && r[0] == snapReport{2, etcdraft.SnapshotFinish}
	})
	// The sender counts a message once the peer's answer is back, which
	// can be after the peer has stepped it.
	poll.UntilNil(t, "a to count three messages sent through the pipeline", func() error {
		if st, _ := a.tr.PeerStatus(2); st.SentPipeline != 3 {
			return fmt.Errorf("%d counted", st.SentPipeline)
		}
		return nil
	})
	b.tr.Send([]*raftpb.Message{msg(raftpb.MsgVoteResp, 2, 1, 4, 0)})
	poll.Until(t, "the answer through b's remote for a", func() bool { return a.raft.count(raftpb.MsgVoteResp) == 1 })
}

// TestStreamsDialedOnceThePeerIsUp: members of a new cluster start one
// after another, so a member's first dials to a peer that is not up yet
// fail and back off. Once the peer is up and dials our streams, ours to
// it are dialed at once, not after the backoff (an hour here: waiting it
// out would time out). Without that, a member reported ready with its
// messages still going through the pipeline, around a peer proxy that
// blackholed its streams (etcd's TestHTTPLivezReadyzHandler).
func TestStreamsDialedOnceThePeerIsUp(t *testing.T) {
	slow := func(c *Config) { c.DialRetryMin, c.DialRetryMax = time.Hour, time.Hour }
	a, b := newMember(t, 1, 100, nil, slow), newMember(t, 2, 100, nil, slow)
	b.stop() // not up yet; its address is kept
	if err := a.tr.AddPeer(2, []string{b.url}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "a's first dials to b to fail", func() bool {
		st, _ := a.tr.PeerStatus(2)
		return st.LastError != ""
	})
	b.restart()
	if err := b.tr.AddPeer(1, []string{a.url}); err != nil {
		t.Fatal(err)
	}
	waitStreams(t, a, b)
	waitStreams(t, b, a)
}

// TestLostStreamRedialedAtOnce: as etcd's stream readers, a stream that
// was up is redialed as soon as it is lost instead of after the dial
// backoff, so a peer that went away is found unreachable (inactive) at
// once. The backoff here is an hour: waiting it out would time out.
func TestLostStreamRedialedAtOnce(t *testing.T) {
	slow := func(c *Config) { c.DialRetryMin, c.DialRetryMax = time.Hour, time.Hour }
	a, b := newMember(t, 1, 100, nil, slow), newMember(t, 2, 100, nil, slow)
	connect(t, a, b)
	waitStreams(t, a, b)
	// As the server stops: the transport first, which ends b's streams
	// cleanly (a's readers see io.EOF, which is no failure), then the
	// peer port.
	b.tr.Stop()
	b.srv.Close()
	poll.Until(t, "a to find b inactive", func() bool {
		st, _ := a.tr.PeerStatus(2)
		return !st.Active && st.LastError != ""
	})
	if !a.tr.ActiveSince(2).IsZero() {
		t.Fatal("b still counts as connected")
	}
}
