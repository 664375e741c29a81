package raft

import (
	"context"
	"time"

	etcdraft "go.etcd.io/raft/v3"
)

// The transport's side of the Node: what it learns about peers flows back
// to raft through these calls, which only queue the report; the raft
// goroutine applies it to the RawNode (which is not safe for concurrent
// use) on its next turn.

// report is one queued transport report.
type report struct {
	id       uint64
	snapshot bool // false: unreachable
	status   etcdraft.SnapshotStatus
}

// ReportUnreachable tells raft that the last message to peer id was not
// delivered (a full queue, a broken stream), so the leader stops
// optimistic replication to it and probes instead. It never blocks: a
// report that finds the queue full is dropped, which is harmless, as the
// transport reports the peer again on its next failure.
func (n *Node) ReportUnreachable(id uint64) {
	select {
	case n.reportc <- report{id: id}:
	default:
	}
}

// ReportSnapshot tells raft how sending a snapshot to peer id ended
// (etcdraft.SnapshotFinish or SnapshotFailure). Every snapshot handed to
// the transport must be reported exactly once: until it is, the leader
// sends the peer nothing else. It blocks only until the raft goroutine
// takes the report, or the node stops.
func (n *Node) ReportSnapshot(id uint64, status etcdraft.SnapshotStatus) {
	select {
	case n.reportc <- report{id: id, snapshot: true, status: status}:
	case <-n.done:
	}
}

// applyReport applies a queued report. Called from the raft goroutine.
func (n *Node) applyReport(r report) {
	if r.snapshot {
		n.rn.ReportSnapshot(r.id, r.status)
		return
	}
	n.rn.ReportUnreachable(r.id)
}

// LeaderChanged returns a channel that is closed the next time the leader
// this member knows of changes (including to "no leader"). Read
// Status().Leader or IsLeader after it fires, and call LeaderChanged again
// before reading, so no change is missed:
//
//	for {
//		ch := n.LeaderChanged()
//		act(n.IsLeader())
//		<-ch
//	}
func (n *Node) LeaderChanged() <-chan struct{} {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	return n.leaderNotify
}

// publishLeader records a new leader and wakes LeaderChanged waiters.
// Called from the raft goroutine.
func (n *Node) publishLeader(lead uint64) bool {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	if n.lead.Swap(lead) == lead {
		return false
	}
	n.leaderChanges.Add(1)
	if lead != 0 {
		n.leaderElected.Store(time.Now().UnixNano())
	}
	close(n.leaderNotify)
	n.leaderNotify = make(chan struct{})
	return true
}

// TransferLeadership asks raft, on the leader, to hand leadership to
// member to (etcd's MoveLeader): the leader brings it up to date and
// tells it to campaign at once. It returns once raft has the request;
// watch LeaderChanged for the outcome. A transfer raft cannot start (not
// the leader, an unknown or learner target) changes nothing.
func (n *Node) TransferLeadership(ctx context.Context, to uint64) error {
	select {
	case n.transferc <- to:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.done:
		return n.stopErr()
	}
}

// LeaderElected is when this member last learned of a new leader (the
// zero time before it knew any), for telling a request that timed out
// because its leader failed from one that did not.
func (n *Node) LeaderElected() time.Time {
	if ns := n.leaderElected.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// PeerProgress is how far the leader knows a member's log to be, as
// raft tracks it (etcd's raft.status "progress").
type PeerProgress struct {
	Match, Next uint64
	State       string // StateProbe, StateReplicate or StateSnapshot
	IsLearner   bool
}

// Progress returns, on the leader, how far each member's log is known to
// match the leader's (raft's Progress.Match, the leader's own included);
// nil on a follower, which does not track it. Etcd decides whether a
// learner may be promoted from these figures.
func (n *Node) Progress(ctx context.Context) (map[uint64]uint64, error) {
	full, err := n.PeerProgress(ctx)
	if full == nil {
		return nil, err
	}
	m := make(map[uint64]uint64, len(full))
	for id, pr := range full {
		m[id] = pr.Match
	}
	return m, nil
}

// PeerProgress returns, on the leader, raft's progress of every member
// of its configuration, voters and learners (nil on a follower).
func (n *Node) PeerProgress(ctx context.Context) (map[uint64]PeerProgress, error) {
	reply := make(chan map[uint64]PeerProgress, 1)
	select {
	case n.progressc <- reply:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.done:
		return nil, n.stopErr()
	}
	select {
	case m := <-reply:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.done:
		return nil, n.stopErr()
	}
}

// answerProgress answers a PeerProgress call. Called from the raft
// goroutine.
func (n *Node) answerProgress(reply chan map[uint64]PeerProgress) {
	st := n.rn.Status()
	if st.Progress == nil {
		reply <- nil
		return
	}
	m := make(map[uint64]PeerProgress, len(st.Progress))
	for id, pr := range st.Progress {
		m[id] = PeerProgress{Match: pr.Match, Next: pr.Next, State: pr.State.String(), IsLearner: pr.IsLearner}
	}
	reply <- m
}
