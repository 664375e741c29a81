package raft

import (
	"encoding/binary"
	"log/slog"
	"testing"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func hb(typ raftpb.MessageType, to, term, commit uint64, ctx uint64) *raftpb.Message {
	m := &raftpb.Message{Type: typ.Enum(), To: proto.Uint64(to), Term: proto.Uint64(term), Commit: proto.Uint64(commit)}
	if ctx > 0 {
		m.Context = binary.LittleEndian.AppendUint64(nil, ctx)
	}
	return m
}

// TestCoalesceHeartbeatsKeepsLast: of the heartbeats (and of the
// responses) of one term to one peer only the last is sent; every other
// message, and heartbeats of another term, pass in their order.
func TestCoalesceHeartbeatsKeepsLast(t *testing.T) {
	app := &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: proto.Uint64(2), Term: proto.Uint64(5)}
	in := []*raftpb.Message{
		hb(raftpb.MsgHeartbeat, 2, 5, 10, 1), // superseded by #4
		hb(raftpb.MsgHeartbeat, 3, 5, 10, 1), // superseded by #5
		app,
		hb(raftpb.MsgHeartbeat, 2, 4, 9, 0),  // another term: kept
		hb(raftpb.MsgHeartbeat, 2, 5, 11, 2), // kept
		hb(raftpb.MsgHeartbeat, 3, 5, 11, 2), // kept
		hb(raftpb.MsgHeartbeatResp, 1, 5, 0, 1),
		hb(raftpb.MsgHeartbeatResp, 1, 5, 0, 2), // kept
	}
	want := []*raftpb.Message{app, in[3], in[4], in[5], in[7]}
	first, fifth := in[0], in[4]
	out := coalesceHeartbeats(in)
	if len(out) != len(want) {
		t.Fatalf("kept %d messages, want %d: %v", len(out), len(want), out)
	}
	for i := range want {
		if out[i] != want[i] {
			t.Fatalf("message %d = %v, want %v", i, out[i], want[i])
		}
	}
	if first.GetTo() != 2 || fifth.GetCommit() != 11 {
		t.Fatal("coalescing changed a message")
	}
	one := []*raftpb.Message{hb(raftpb.MsgHeartbeat, 2, 5, 10, 1), app}
	if got := coalesceHeartbeats(one); len(got) != 2 {
		t.Fatalf("a lone heartbeat was dropped: %v", got)
	}
}

// TestCoalescedReadRoundConfirmsAll drives three raft nodes by hand: the
// leader steps two reads of its own and one forwarded by each follower in
// one Ready. With coalescing it sends one heartbeat to each follower
// instead of four, and every read is still confirmed, at the leader's
// commit index, by that one round.
func TestCoalescedReadRoundConfirmsAll(t *testing.T) {
	nodes := map[uint64]*etcdraft.RawNode{}
	stores := map[uint64]*etcdraft.MemoryStorage{}
	for id := uint64(1); id <= 3; id++ {
		st := etcdraft.NewMemoryStorage()
		snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
			Index: proto.Uint64(1), Term: proto.Uint64(1),
			ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}},
		}}
		if err := st.ApplySnapshot(snap); err != nil {
			t.Fatal(err)
		}
		rn, err := etcdraft.NewRawNode(&etcdraft.Config{
			ID: id, ElectionTick: 10, HeartbeatTick: 1, Storage: st,
			MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, CheckQuorum: true, PreVote: true,
			Logger: raftLogger{l: slog.New(slog.DiscardHandler)},
		})
		if err != nil {
			t.Fatal(err)
		}
		nodes[id], stores[id] = rn, st
	}
	var (
		heartbeats int
		readStates []etcdraft.ReadState
		readResps  = map[uint64]uint64{} // follower: index answered
	)
	// pump handles every node's Ready until none has one, sending each
	// Ready's messages coalesced.
	pump := func() {
		for progress := true; progress; {
			progress = false
			for id := uint64(1); id <= 3; id++ {
				rn := nodes[id]
				if !rn.HasReady() {
					continue
				}
				progress = true
				rd := rn.Ready()
				if rd.HardState != nil {
					if err := stores[id].SetHardState(rd.HardState); err != nil {
						t.Fatal(err)
					}
				}
				if err := stores[id].Append(rd.Entries); err != nil {
					t.Fatal(err)
				}
				readStates = append(readStates, rd.ReadStates...)
				for _, m := range coalesceHeartbeats(rd.Messages) {
					switch m.GetType() {
					case raftpb.MsgHeartbeat:
						heartbeats++
					case raftpb.MsgReadIndexResp:
						readResps[m.GetTo()] = m.GetIndex()
					}
					if err := nodes[m.GetTo()].Step(m); err != nil {
						t.Fatalf("step %v on %d: %v", m.GetType(), m.GetTo(), err)
					}
				}
				rn.Advance(rd)
			}
		}
	}
	if err := nodes[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	pump()
	if nodes[1].BasicStatus().RaftState != etcdraft.StateLeader {
		t.Fatalf("node 1 is %v, want leader", nodes[1].BasicStatus().RaftState)
	}
	// The leader's empty entry is committed; a read must see it.
	commit := nodes[1].BasicStatus().GetCommit()

	heartbeats = 0
	leader := nodes[1]
	leader.ReadIndex([]byte("a"))
	leader.ReadIndex([]byte("b"))
	for _, f := range []uint64{2, 3} {
		m := &raftpb.Message{Type: raftpb.MsgReadIndex.Enum(), From: proto.Uint64(f), To: proto.Uint64(1),
			Term: proto.Uint64(leader.BasicStatus().GetTerm()), Entries: []*raftpb.Entry{{Data: []byte{byte(f)}}}}
		if err := leader.Step(m); err != nil {
			t.Fatal(err)
		}
	}
	pump()
	if heartbeats != 2 {
		t.Errorf("the leader sent %d heartbeats for four reads in one Ready; want 2 (one to each follower)", heartbeats)
	}
	got := map[string]uint64{}
	for _, rs := range readStates {
		got[string(rs.RequestCtx)] = rs.Index
	}
	for _, ctx := range []string{"a", "b"} {
		if idx, ok := got[ctx]; !ok || idx != commit {
			t.Errorf("leader's read %q: index %d, answered %v; want index %d", ctx, idx, ok, commit)
		}
	}
	for _, f := range []uint64{2, 3} {
		if idx, ok := readResps[f]; !ok || idx != commit {
			t.Errorf("follower %d's read: index %d, answered %v; want index %d", f, idx, ok, commit)
		}
	}
}
