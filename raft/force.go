package raft

import (
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/wal"
)

// --force-new-cluster, as etcd does it (restartAsStandaloneNode): on a
// restart, the member drops the uncommitted tail of its log and appends,
// already committed, one conf change removing every other member (voters
// and learners alike, as the snapshot and the committed entries name
// them). The entries are written to the WAL before raft starts, at the
// indexes after the commit index, which replace the dropped tail there
// (wal.ReadAll keeps the later record at an index). Applying them leaves
// this member as the only voter, so it elects itself and serves alone.
// The state machine applies them like any removal (the membership
// forgets the others).

// forceNewCluster rewrites ents and hs as above and appends the removals
// to the WAL. commit is the restored commit index.
func (n *Node) forceNewCluster(snap wal.Snapshot, ents []*raftpb.Entry, hs *raftpb.HardState, commit uint64) ([]*raftpb.Entry, *raftpb.HardState, error) {
	kept := ents[:0:0]
	for _, e := range ents {
		if e.GetIndex() <= commit {
			kept = append(kept, e)
		}
	}
	ids := map[uint64]bool{}
	if cs := snap.ConfState; cs != nil {
		for _, id := range cs.GetVoters() {
			ids[id] = true
		}
		for _, id := range cs.GetLearners() {
			ids[id] = true
		}
	}
	for _, e := range kept {
		if e.GetType() != raftpb.EntryConfChange {
			continue
		}
		var cc raftpb.ConfChange
		if proto.Unmarshal(e.GetData(), &cc) != nil {
			continue
		}
		switch cc.GetType() {
		case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
			ids[cc.GetNodeId()] = true
		case raftpb.ConfChangeRemoveNode:
			delete(ids, cc.GetNodeId())
		}
	}
	var others []uint64
	for id := range ids {
		if id != n.cfg.ID {
			others = append(others, id)
		}
	}
	slices.Sort(others)
	if !ids[n.cfg.ID] {
		return nil, nil, fmt.Errorf("raft: --force-new-cluster: member %x is not in its own log's membership %v", n.cfg.ID, others)
	}
	term := hs.GetTerm()
	next := commit + 1
	var added []*raftpb.Entry
	for _, id := range others {
		data, err := proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(id)})
		if err != nil {
			return nil, nil, err
		}
		added = append(added, &raftpb.Entry{Type: raftpb.EntryConfChange.Enum(), Term: proto.Uint64(term), Index: proto.Uint64(next), Data: data})
		next++
	}
	hs = &raftpb.HardState{Term: proto.Uint64(term), Vote: proto.Uint64(hs.GetVote()), Commit: proto.Uint64(next - 1)}
	if err := n.wal.Save(hs, added); err != nil {
		return nil, nil, err
	}
	n.log.Warn("forcing a new cluster: this member is now the only one; the others are removed from its membership",
		"local-member-id", fmt.Sprintf("%x", n.cfg.ID), "removed-members", fmt.Sprint(formatIDs(others)),
		"discarded-uncommitted-entries", len(ents)-len(kept), "commit-index", next-1)
	return append(kept, added...), hs, nil
}

func formatIDs(ids []uint64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmt.Sprintf("%x", id)
	}
	return out
}
