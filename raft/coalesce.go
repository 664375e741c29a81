package raft

import "go.etcd.io/raft/v3/raftpb"

// coalesceHeartbeats drops every heartbeat, and every heartbeat response,
// that a later one of the same term to the same peer in msgs supersedes,
// filtering msgs in place.
//
// Under linearizable reads a leader's Ready often holds several
// heartbeat rounds: raft broadcasts one for each ReadIndex request it
// steps (its own member's batch and each follower's), and a follower
// answers each. The last heartbeat to a peer does everything the earlier
// ones would:
//   - its commit index is at least theirs (raft sends min(match,
//     committed), and neither goes back within a term);
//   - its context is raft's position of the newest read request not yet
//     confirmed when it was sent (none if every request was confirmed),
//     and raft counts a peer's acknowledgement as the highest position
//     it echoed (raft/v3 read_only.go), so the last echo confirms every
//     request the earlier ones would.
//
// The same holds for a follower's responses, which echo the contexts in
// the order the heartbeats came. Dropping a message is always safe in
// raft (the network may); here nothing is lost. In a 3-member cluster
// under 1000 readers this removes up to two of every three heartbeat
// round trips, each a message to encode, send, decode and step on both
// sides.
func coalesceHeartbeats(msgs []*raftpb.Message) []*raftpb.Message {
	out := msgs[:0] // in place, as sendSnapshots
	for i, m := range msgs {
		if t := m.GetType(); (t == raftpb.MsgHeartbeat || t == raftpb.MsgHeartbeatResp) && supersededLater(msgs[i+1:], m) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// supersededLater says whether rest holds a message of m's type and term
// to m's peer.
func supersededLater(rest []*raftpb.Message, m *raftpb.Message) bool {
	for _, l := range rest {
		if l.GetType() == m.GetType() && l.GetTo() == m.GetTo() && l.GetTerm() == m.GetTerm() {
			return true
		}
	}
	return false
}
