package raft

import (
	"fmt"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/wal"
)

// CreateRestoredWAL writes a new WAL for member id of cluster, for a data
// dir restored from a snapshot (stratautl snapshot restore), laid out as
// etcdutl's restore lays out etcd's: one ConfChangeAddNode entry per peer
// at term 1 (indexes 1..len(peers), the peer's Context as the change's
// context), a hard state that commits them with a vote for the first
// peer, and a snapshot marker at the last of them whose ConfState lists
// every peer as a voter.
//
// It returns the index and term of that marker; the state machine must
// record them as its consistent index, so that Start restarts the member
// from the marker (no entry is replayed) with the peers as voters.
func CreateRestoredWAL(walDir string, id, cluster uint64, peers []etcdraft.Peer, opts *wal.Options) (index, term uint64, err error) {
	if len(peers) == 0 {
		return 0, 0, fmt.Errorf("raft: a restored WAL needs at least one peer")
	}
	w, err := wal.Create(walDir, encodeMetadata(id, cluster), opts)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}()
	term = 1
	ents := make([]*raftpb.Entry, len(peers))
	voters := make([]uint64, len(peers))
	for i, p := range peers {
		cc, err := proto.Marshal(&raftpb.ConfChange{
			Type: raftpb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(p.ID), Context: p.Context,
		})
		if err != nil {
			return 0, 0, err
		}
		ents[i] = &raftpb.Entry{Type: raftpb.EntryConfChange.Enum(), Term: proto.Uint64(term),
			Index: proto.Uint64(uint64(i + 1)), Data: cc}
		voters[i] = p.ID
	}
	index = uint64(len(ents))
	hs := &raftpb.HardState{Term: proto.Uint64(term), Vote: proto.Uint64(peers[0].ID), Commit: proto.Uint64(index)}
	if err := w.Save(hs, ents); err != nil {
		return 0, 0, err
	}
	if err := w.SaveSnapshot(wal.Snapshot{Index: index, Term: term, ConfState: &raftpb.ConfState{Voters: voters}}); err != nil {
		return 0, 0, err
	}
	return index, term, nil
}
