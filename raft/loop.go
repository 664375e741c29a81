package raft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/wal"
)

// maxDrain bounds how many queued proposals one turn takes, so a flood of
// proposals cannot starve ticks and Ready handling.
const maxDrain = 4096

// run is the raft goroutine.
func (n *Node) run() {
	defer close(n.done)
	defer close(n.applyc)
	defer n.closeReads()
	// A stopped node knows no leader; LeaderChanged waiters wake.
	defer n.publishLeader(0)
	tick := n.cfg.TickInterval
	if tick <= 0 {
		tick = 100 * time.Millisecond
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	if n.campaignOnStart {
		// Apply the bootstrap conf changes first: raft refuses to campaign
		// while membership changes are pending. Then handle the campaign's
		// Readies here too: the vote for itself reaches raft only after
		// its Ready is handled, and the loop below would first wait for
		// an event (the next tick, a tick interval away).
		handleAll := func() bool {
			for n.rn.HasReady() {
				if _, err := n.handleReady(); err != nil {
					if err != errStopping {
						n.fail(err)
					}
					return false
				}
			}
			return true
		}
		if !handleAll() {
			return
		}
		_ = n.rn.Campaign()
		if !handleAll() {
			return
		}
	}
	for {
		select {
		case now := <-ticker.C:
			n.rn.Tick()
			n.expireReads(now)
			n.retryReads()
		case p := <-n.propc:
			n.takeProposal(p)
			n.drainProposals()
		case m := <-n.recvc:
			_ = n.rn.Step(m)
			n.drainReceived()
		case r := <-n.reportc:
			n.applyReport(r)
		case to := <-n.transferc:
			n.rn.TransferLeader(to)
		case reply := <-n.progressc:
			n.answerProgress(reply)
		case r := <-n.snapc:
			n.stepReceived(r)
		case <-n.readc:
		case <-n.stopc:
			n.failReaders(ErrStopped)
			return
		}
		n.startReads()
		for n.rn.HasReady() {
			wrote, err := n.handleReady()
			if err != nil {
				if err == errStopping {
					err = ErrStopped
				} else {
					n.fail(err)
				}
				n.failReaders(err)
				return
			}
			// Proposals and peer messages that arrived during the WAL
			// write join the next Ready: this is where raft-level batching
			// comes from. On a follower, every MsgApp that queued up while
			// it synced is persisted by one fdatasync instead of one each.
			if wrote {
				n.letArrivalsIn()
			}
			n.drainReceived()
			n.drainProposals()
			n.startReads()
		}
		// A received snapshot that no Ready installed was refused by
		// raft (the log already covers it).
		n.discardReceived()
	}
}

// arrivalTurns bounds how many times letArrivalsIn yields.
const arrivalTurns = 4

// letArrivalsIn yields the processor after a Ready whose entries were
// written, up to arrivalTurns times, for as long as each turn brings new
// proposals or peer messages, so that the next Ready (and its WAL write
// and fdatasync) takes what the goroutines already runnable were about to
// hand over. When nothing else is runnable, runtime.Gosched returns at
// once and the loop goes on; when the CPUs are saturated (hundreds of
// requests queued behind them), each turn lets the handlers propose, and
// one WAL write carries a hundred puts instead of fifteen. Each write is
// a fixed cost (the system calls, a Ready and an apply batch): etcd's
// benchmark putting from 1000 clients ran fewer fdatasyncs and less CPU
// per put this way (bench/RESULTS.md). A timer would not do: Go's timers below a
// millisecond sleep a whole one on an idle machine, and one client's puts
// ran at a fifth of their speed behind a 200 us sleep.
func (n *Node) letArrivalsIn() {
	for i := 0; i < arrivalTurns; i++ {
		queued := len(n.propc) + len(n.recvc)
		runtime.Gosched()
		if len(n.propc)+len(n.recvc) == queued {
			return
		}
	}
}

// drainProposals takes the proposals already queued, up to maxDrain, and
// steps them into raft.
func (n *Node) drainProposals() {
	for i := 0; i < maxDrain; i++ {
		select {
		case p := <-n.propc:
			n.takeProposal(p)
		default:
			n.flushProposals()
			return
		}
	}
	n.flushProposals()
}

// drainReceived steps the peer messages already queued, up to maxDrain.
func (n *Node) drainReceived() {
	for i := 0; i < maxDrain; i++ {
		select {
		case m := <-n.recvc:
			_ = n.rn.Step(m)
		default:
			return
		}
	}
}

// takeProposal adds p to the batch flushProposals steps into raft; a
// membership change goes alone, after the batch before it.
//
// Why a batch: raft's RawNode.Propose steps one MsgProp per entry, and a
// leader answers each with an append to every follower and a message to
// itself. One MsgProp holding every proposal that queued up during a WAL
// write costs raft one step, and followers get one MsgApp with all the
// entries instead of one each. Raft refuses or takes a MsgProp whole (no
// leader, a leadership transfer in progress), and every proposal in it
// hears the same answer.
func (n *Node) takeProposal(p proposal) {
	if p.cc != nil {
		n.flushProposals()
		answerProposal(p, n.rn.ProposeConfChange(p.cc))
		return
	}
	n.batch = append(n.batch, p)
	n.batchBytes += uint64(len(p.data))
	if n.batchBytes >= n.cfg.MaxSizePerMsg {
		n.flushProposals()
	}
}

// flushProposals steps the batched proposals into raft as one MsgProp.
func (n *Node) flushProposals() {
	if len(n.batch) == 0 {
		return
	}
	// A new slice each time: raft keeps the message (a follower forwards
	// it to the leader in the next Ready).
	ents := make([]*raftpb.Entry, len(n.batch))
	for i := range n.batch {
		ents[i] = &raftpb.Entry{Data: n.batch[i].data}
	}
	err := n.rn.Step(&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: proto.Uint64(n.cfg.ID), Entries: ents})
	for i := range n.batch {
		answerProposal(n.batch[i], err)
	}
	clear(n.batch)
	n.batch, n.batchBytes = n.batch[:0], 0
}

func answerProposal(p proposal, err error) {
	if p.errc != nil {
		p.errc <- err
	} else if err != nil && p.onDrop != nil {
		p.onDrop(err)
	}
}

// errStopping is handleReady's way of saying Stop interrupted it; the
// Ready is abandoned (the raft goroutine exits without Advance).
var errStopping = errors.New("raft: stopping")

// handleReady persists, sends and hands over one Ready (see the package
// doc for the order and why); wrote says whether it held entries.
func (n *Node) handleReady() (wrote bool, err error) {
	rd := n.rn.Ready()
	if rd.SoftState != nil {
		n.heartbeats.reset()
		if n.publishLeader(rd.SoftState.Lead) {
			n.log.Info("raft leader changed", "leader", fmt.Sprintf("%x", rd.SoftState.Lead), "term", n.rn.BasicStatus().GetTerm())
		}
	}
	isLeader := n.lead.Load() == n.cfg.ID
	if isLeader {
		n.send(rd.Messages)
		if len(rd.Messages) > 0 && len(rd.Entries) > 0 && runtime.GOMAXPROCS(0) == 1 {
			// The WAL write below blocks this thread in fdatasync, and
			// with one P (internal/procs puts a lightly loaded member on
			// one) the goroutines that write these messages to the peers
			// would wait for it: the followers would start their own
			// write a whole fdatasync late, and a put would wait for two
			// in a row. Let them run first.
			runtime.Gosched()
		}
	}
	// Committed entries go to the apply goroutine before this Ready's WAL
	// write, so applying overlaps the fdatasync. They are NOT always
	// durable locally yet: in raft's synchronous mode a Ready may commit
	// entries that are in its own unwritten Entries (a follower told of
	// the commit in the same MsgApp, a leader whose followers acknowledged
	// first, the bootstrap entries). That is safe to apply (committed
	// means durable on a quorum), but nothing durable may run ahead of the
	// local WAL: the state machine commits, and snapshots are taken, only
	// up to the persisted index published below after the write.
	for _, rs := range rd.ReadStates {
		n.finishRead(rs)
	}
	if len(rd.CommittedEntries) > 0 {
		for _, e := range rd.CommittedEntries {
			n.applyConfChange(e)
		}
		select {
		case n.applyc <- applyBatch{ents: rd.CommittedEntries, cs: n.confState.Load()}:
		case <-n.stopc:
			return false, errStopping
		}
	}
	// A Ready that only moves the commit index needs no sync, and the
	// index is not worth a write either: the next Ready with entries
	// carries it, and after a restart raft re-learns it (apply is
	// idempotent by index). This saves a write per request.
	// A received snapshot: its image and its WAL marker are made durable
	// before the hard state that commits it (package doc, "Installing a
	// leader's snapshot"). Raft hands out no committed entries in a Ready
	// that carries a snapshot.
	var install *restoreReq
	if !etcdraft.IsEmptySnap(rd.Snapshot) {
		var err error
		if install, err = n.persistSnapshot(rd.Snapshot); err != nil {
			return false, err
		}
		if n.cfg.ConfChecker != nil {
			// The next Ready's conf changes follow the image's index.
			if err := n.cfg.ConfChecker.Load(install.path); err != nil {
				return false, fmt.Errorf("raft: the membership of the snapshot at %d: %w", install.meta.Index, err)
			}
		}
	}
	if len(rd.Entries) > 0 || rd.MustSync || install != nil {
		if err := n.wal.SaveAsync(rd.HardState, rd.Entries).Wait(); err != nil {
			return false, fmt.Errorf("raft: persisting entries: %w", err)
		}
	}
	if install != nil {
		if err := n.storage.ApplySnapshot(rd.Snapshot); err != nil {
			return false, err
		}
		cs := rd.Snapshot.GetMetadata().GetConfState()
		n.confState.Store(cs)
		n.confs.reset(install.meta.Index, cs)
		// Images of the old state are no use to anyone now.
		n.images.drop()
	}
	if err := n.storage.Append(rd.Entries); err != nil {
		return false, err
	}
	// After the write and the in-memory append: a snapshot waiting for
	// this index finds the entries in storage.
	if len(rd.Entries) > 0 {
		n.publishPersisted(rd.Entries[len(rd.Entries)-1].GetIndex())
	} else if !etcdraft.IsEmptySnap(rd.Snapshot) {
		n.publishPersisted(rd.Snapshot.GetMetadata().GetIndex())
	}
	if install != nil {
		// After the WAL holds the marker and the hard state: the apply
		// goroutine renames the image over the state and restores.
		select {
		case n.applyc <- applyBatch{restore: install}:
		case <-n.stopc:
			return false, errStopping
		}
	}
	if rd.HardState != nil {
		n.term.Store(rd.HardState.GetTerm())
		if c := rd.HardState.GetCommit(); c > n.committed.Load() {
			n.committed.Store(c)
		}
	}
	if !isLeader {
		n.send(rd.Messages)
	}
	n.rn.Advance(rd)
	return len(rd.Entries) > 0, nil
}

func (n *Node) send(msgs []*raftpb.Message) {
	if len(msgs) == 0 {
		return
	}
	msgs = n.sendSnapshots(msgs)
	msgs = coalesceHeartbeats(msgs)
	n.checkHeartbeats(msgs)
	if len(msgs) > 0 && n.cfg.Transport != nil {
		n.cfg.Transport.Send(msgs)
	}
}

// applyConfChange applies a committed membership change to the RawNode,
// which must happen in the raft goroutine.
func (n *Node) applyConfChange(e *raftpb.Entry) {
	var cc raftpb.ConfChangeI
	switch e.GetType() {
	case raftpb.EntryConfChange:
		var c raftpb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &c); err != nil {
			n.log.Error("undecodable conf change", "index", e.GetIndex(), "error", err)
			return
		}
		if n.cfg.ConfChecker != nil {
			if err := n.cfg.ConfChecker.Check(e.GetIndex(), &c); err != nil {
				n.log.Warn("refusing a committed conf change", "index", e.GetIndex(), "type", c.GetType().String(),
					"node", fmt.Sprintf("%x", c.GetNodeId()), "reason", err)
				c.NodeId = proto.Uint64(0)
			}
		}
		if why := refusedChange(n.confState.Load(), &c); why != "" && c.GetNodeId() != 0 {
			// Raft would panic on it; the state machine refuses the same
			// change (membership.Set.ApplyConfChange). A change to node 0
			// is one raft skips, as etcd does for a refused change.
			n.log.Error("refusing a committed conf change", "index", e.GetIndex(), "type", c.GetType().String(),
				"node", fmt.Sprintf("%x", c.GetNodeId()), "reason", why)
			c.NodeId = proto.Uint64(0)
		}
		cc = &c
	case raftpb.EntryConfChangeV2:
		var c raftpb.ConfChangeV2
		if err := proto.Unmarshal(e.GetData(), &c); err != nil {
			n.log.Error("undecodable conf change", "index", e.GetIndex(), "error", err)
			return
		}
		cc = &c
	default:
		return
	}
	cs := n.rn.ApplyConfChange(cc)
	n.confState.Store(cs)
	n.confs.record(e.GetIndex(), cs)
}

// refusedChange says why raft cannot apply cc to cs ("" if it can): the
// removal of the last voter, or the demotion of a voter by a learner add
// (the API refuses both; an entry from elsewhere must not crash raft).
func refusedChange(cs *raftpb.ConfState, cc *raftpb.ConfChange) string {
	id := cc.GetNodeId()
	isVoter := slices.Contains(cs.GetVoters(), id)
	switch cc.GetType() {
	case raftpb.ConfChangeRemoveNode:
		if isVoter && len(cs.GetVoters()) == 1 {
			return "it removes the last voter"
		}
	case raftpb.ConfChangeAddLearnerNode:
		if isVoter {
			return "it would demote a voter to a learner"
		}
	}
	return ""
}

// applyBatch is one Ready's committed entries with the membership as of
// its last entry (conf changes are applied to raft in the raft goroutine,
// ahead of the apply goroutine), so a snapshot at that index records the
// membership of that index and not of a later one.
type applyBatch struct {
	ents []*raftpb.Entry
	cs   *raftpb.ConfState
	// restore, when set, is a received snapshot to install instead.
	restore *restoreReq
}

// applyLoop is the apply goroutine.
func (n *Node) applyLoop() {
	defer close(n.appliedDone)
	broken := false
	for b := range n.applyc {
		if broken {
			continue // drain: the state machine is in no state to apply
		}
		if b.restore != nil {
			if err := n.restoreState(b.restore); err != nil {
				broken = true
				n.fail(err)
				continue
			}
			n.publishApplied(b.restore.meta.Index)
			continue
		}
		ents := b.ents
		n.sm.Apply(ents)
		last := ents[len(ents)-1].GetIndex()
		n.publishApplied(last)
		due := n.cfg.SnapshotCount > 0 && last-n.snapIndex.Load() > n.cfg.SnapshotCount
		if (due || n.forceSnap.Load()) && n.snapshotting.CompareAndSwap(false, true) {
			n.forceSnap.Store(false)
			// In the background: the snapshot first makes the state
			// machine durable (a page-store commit, milliseconds to tens
			// of milliseconds), and applying must not stall behind it.
			n.snapWG.Add(1)
			go func(idx uint64, cs *raftpb.ConfState) {
				defer n.snapWG.Done()
				defer n.snapshotting.Store(false)
				if err := n.snapshot(idx, cs); err != nil {
					n.log.Warn("snapshot failed; will retry", "index", idx, "error", err)
				}
			}(last, b.cs)
		} else {
			n.trimSoleLog(last)
		}
	}
}

// ForceSnapshot makes the apply goroutine take a snapshot at the end of
// the batch it is applying (or the next one), as etcd's ForceSnapshot
// does; the state machine calls it from Apply.
func (n *Node) ForceSnapshot() { n.forceSnap.Store(true) }

// trimSoleStep is how far the state machine's durable index must have
// moved past the last trim for trimSoleLog to trim again.
const trimSoleStep = 1024

// trimSoleLog drops, on a member alone in its configuration, the
// in-memory log the state machine already holds durably, up to last, the
// end of the batch just applied: raft never reads again what it has
// handed out, but it may not yet have handed out everything below the
// durable index (after a restart it replays the log from its snapshot in
// batches, and the state machine is already durable far ahead). Raft keeps
// entries in memory for followers that fall behind; a sole member has
// none, and between two snapshots (SnapshotCount entries apart) it would
// otherwise hold up to that many requests' payloads. A member added later
// starts from an empty log and needs a snapshot anyway. Called from the
// apply goroutine, never while a snapshot is being cut: a snapshot's
// index was taken from an earlier batch and may be below the durable
// index, and MemoryStorage cannot cut a snapshot below its first entry.
// Images are cut at the durable index or above, under snapMu.
func (n *Node) trimSoleLog(last uint64) {
	cs := n.confState.Load()
	if len(cs.GetLearners()) > 0 || !slices.Equal(cs.GetVoters(), []uint64{n.cfg.ID}) {
		return
	}
	ci := min(n.sm.ConsistentIndex(), last)
	if ci < n.trimmedTo+trimSoleStep || n.snapshotting.Load() || !n.snapMu.TryLock() {
		return
	}
	defer n.snapMu.Unlock()
	if last, err := n.storage.LastIndex(); err != nil || ci > last {
		return
	}
	switch err := n.storage.Compact(ci); {
	case err == nil, errors.Is(err, etcdraft.ErrCompacted):
		n.trimmedTo = ci
	default:
		n.log.Warn("cannot trim the in-memory raft log", "index", ci, "error", err)
	}
}

func (n *Node) publishApplied(idx uint64) {
	n.appliedMu.Lock()
	if idx > n.applied.Load() {
		n.applied.Store(idx)
	}
	close(n.appliedNotify)
	n.appliedNotify = make(chan struct{})
	n.appliedMu.Unlock()
}

// publishPersisted tells the state machine, then snapshot waiters, that
// the WAL durably holds the log up to idx. Called from the raft goroutine
// (and by Start before it runs).
func (n *Node) publishPersisted(idx uint64) {
	n.sm.Persisted(idx)
	n.persistedMu.Lock()
	n.persisted.Store(idx)
	close(n.persistedNotify)
	n.persistedNotify = make(chan struct{})
	n.persistedMu.Unlock()
}

// waitPersisted blocks until the WAL durably holds idx, or the node stops.
func (n *Node) waitPersisted(idx uint64) error {
	for {
		n.persistedMu.Lock()
		ch := n.persistedNotify
		ok := n.persisted.Load() >= idx
		n.persistedMu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-n.done:
			return n.stopErr()
		}
	}
}

// snapshot makes the state machine durable at idx (and possibly beyond), records a snapshot
// marker, trims the in-memory log and purges WAL segments. The order
// matters: the WAL may drop entries only once the page store holds their
// effects, and nothing is made durable or snapshotted before the WAL holds
// idx (the apply goroutine may be ahead of the WAL by one Ready).
func (n *Node) snapshot(idx uint64, cs *raftpb.ConfState) error {
	start := time.Now()
	n.snapMu.Lock()
	defer n.snapMu.Unlock()
	if err := n.waitPersisted(idx); err != nil {
		return err
	}
	if err := n.sm.Commit(); err != nil {
		return err
	}
	t0 := time.Now()
	var term uint64
	snap, err := n.storage.CreateSnapshot(idx, cs, nil)
	switch {
	case err == nil:
		term = snap.GetMetadata().GetTerm()
	case errors.Is(err, etcdraft.ErrSnapOutOfDate):
		// An image for a follower cut a later in-memory snapshot; the
		// WAL still gets this marker, so it can purge.
		if term, err = n.storage.Term(idx); err != nil {
			if errors.Is(err, etcdraft.ErrCompacted) {
				return nil // a received snapshot superseded this one
			}
			return err
		}
	default:
		return err
	}
	t1 := time.Now()
	n.confs.prune(idx)
	if err := n.wal.SaveSnapshot(wal.Snapshot{Index: idx, Term: term, ConfState: cs}); err != nil {
		return err
	}
	n.cfg.Metrics.snapshotSaved(t1.Sub(t0), time.Since(t1))
	// Entries kept for slow followers; a member that is the only one in
	// the configuration at idx has none, and would only hold them in
	// memory (a member added later needs a snapshot anyway: its log
	// starts at index 1).
	keep := n.cfg.CatchUpEntries
	if len(cs.GetLearners()) == 0 && slices.Equal(cs.GetVoters(), []uint64{n.cfg.ID}) {
		keep = 0
	}
	// As etcd, at least the first entry goes: a member that joins later
	// (its log starts at index 1) then gets a snapshot, whose state is
	// the current one, instead of replaying entries from the start: an
	// etcd member of the previous minor version would stop at the
	// ClusterVersionSet of the version the cluster was downgraded from.
	compact := uint64(1)
	if idx > keep {
		compact = idx - keep
	}
	if err := n.storage.Compact(compact); err != nil && err != etcdraft.ErrCompacted {
		return err
	}
	removed, err := n.wal.Purge(idx)
	if err != nil {
		return err
	}
	n.snapIndex.Store(idx)
	n.log.Info("saved snapshot", "index", idx, "term", term, "purged-wal-segments", len(removed), "took", time.Since(start))
	if n.cfg.SnapshotSaved != nil {
		n.cfg.SnapshotSaved(idx)
	}
	return nil
}

// WaitApplied blocks until entries up to index are applied.
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	for {
		n.appliedMu.Lock()
		ch := n.appliedNotify
		ok := n.applied.Load() >= index
		n.appliedMu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.done:
			if n.applied.Load() >= index {
				return nil
			}
			return n.stopErr()
		}
	}
}

// ReadIndex returns an index such that a read served from the state
// machine once that index is applied is linearizable.
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	return n.ReadIndexBefore(ctx, time.Time{})
}

// ReadIndexBefore is ReadIndex that also gives up at deadline (zero: no
// deadline) with context.DeadlineExceeded. The raft goroutine enforces the
// deadline, at its next tick, as etcd's read loop times out a whole
// batch: a linearizable read then needs no timer and no context of its
// own, which every read would otherwise allocate and cancel.
func (n *Node) ReadIndexBefore(ctx context.Context, deadline time.Time) (uint64, error) {
	w := &readWaiter{done: make(chan struct{}), deadline: deadline}
	n.readMu.Lock()
	if n.readClosed {
		n.readMu.Unlock()
		return 0, n.stopErr()
	}
	// Only the first reader of a batch wakes the raft goroutine: it
	// takes every reader waiting when it turns, and readers that arrive
	// while a request is in flight wait for its answer, after which the
	// raft goroutine looks again. A wake-up per reader cost a turn of its
	// select for each linearizable read.
	first := len(n.readWaiting) == 0
	n.readWaiting = append(n.readWaiting, w)
	n.readMu.Unlock()
	if first {
		select {
		case n.readc <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
	// Not n.done: every reader registered is answered by the raft
	// goroutine, at the latest when it exits (closeReads), and a channel
	// that every reader waits on makes them all queue on its lock.
	select {
	case <-w.done:
		return w.index, w.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// closeReads fails every reader still waiting or in flight when the raft
// goroutine exits, and makes later ReadIndex calls fail at once.
func (n *Node) closeReads() {
	err := n.stopErr()
	n.readMu.Lock()
	n.readClosed = true
	waiting := n.readWaiting
	n.readWaiting = nil
	n.readMu.Unlock()
	for _, w := range waiting {
		w.finish(0, err)
	}
	n.failReaders(err)
}

// startReads issues one raft ReadIndex for every reader waiting now,
// unless one is in flight: then they wait for it to be answered and share
// the next, as etcd's read loop does. On the leader every ReadIndex costs
// a heartbeat round to each follower, and a round per waiting batch
// floods the leader under many readers. An unanswered request is re-sent
// (retryReads), so the readers behind it are not stranded.
// Called from the raft goroutine.
func (n *Node) startReads() {
	if len(n.readInflight) > 0 {
		return
	}
	n.readMu.Lock()
	batch := n.readWaiting
	n.readWaiting = nil
	n.readMu.Unlock()
	if len(batch) == 0 {
		return
	}
	n.readSeq++
	ctx := make([]byte, 8)
	binary.BigEndian.PutUint64(ctx, n.readSeq)
	now := time.Now()
	n.readInflight[n.readSeq] = readBatch{waiters: batch, sent: now, last: now, lead: n.lead.Load()}
	n.rn.ReadIndex(ctx)
	// Requests a leaderless node cannot serve are dropped by raft; fail
	// them now rather than let the callers time out.
	if n.lead.Load() == 0 {
		delete(n.readInflight, n.readSeq)
		n.cfg.Metrics.readFailed()
		for _, w := range batch {
			w.finish(0, ErrNoLeader)
		}
	}
}

// expireReads fails, with context.DeadlineExceeded, every reader whose
// deadline has passed, whether its request is still to be sent or in
// flight; a batch left with no reader is dropped (its answer is then
// ignored) so the next can start. Called from the raft goroutine.
func (n *Node) expireReads(now time.Time) {
	expired := func(w *readWaiter) bool {
		if w.deadline.IsZero() || now.Before(w.deadline) {
			return false
		}
		w.finish(0, context.DeadlineExceeded)
		return true
	}
	n.readMu.Lock()
	n.readWaiting = slices.DeleteFunc(n.readWaiting, expired)
	n.readMu.Unlock()
	for seq, b := range n.readInflight {
		b.waiters = slices.DeleteFunc(b.waiters, expired)
		if len(b.waiters) == 0 {
			delete(n.readInflight, seq)
			n.cfg.Metrics.readFailed()
			continue
		}
		n.readInflight[seq] = b
	}
}

// readRetry is how long a ReadIndex request may go unanswered before it is
// sent again (etcd's readIndexRetryTime).
const readRetry = 500 * time.Millisecond

// retryReads sends again the ReadIndex requests still unanswered after
// readRetry, or at once when the leader changed since they were sent.
// Raft loses them on a change of leadership: a leader that steps down
// drops its pending reads, and a request a follower forwarded to a leader
// that is gone or cut off is never answered. Without this their callers
// wait out their deadline (as etcd, which re-sends, does not). An answer
// to any copy serves the batch: its index is the leader's commit index
// when that copy arrived, after the batch's callers called.
// Called from the raft goroutine.
func (n *Node) retryReads() {
	lead := n.lead.Load()
	if lead == 0 || len(n.readInflight) == 0 {
		return // raft would drop the request; ask when there is a leader
	}
	now := time.Now()
	for seq, b := range n.readInflight {
		if b.lead == lead && now.Sub(b.last) < readRetry {
			continue
		}
		ctx := make([]byte, 8)
		binary.BigEndian.PutUint64(ctx, seq)
		n.rn.ReadIndex(ctx)
		b.last, b.lead = now, lead
		n.readInflight[seq] = b
	}
}

func (n *Node) finishRead(rs etcdraft.ReadState) {
	if len(rs.RequestCtx) != 8 {
		return
	}
	seq := binary.BigEndian.Uint64(rs.RequestCtx)
	batch, ok := n.readInflight[seq]
	if !ok {
		return
	}
	delete(n.readInflight, seq)
	n.cfg.Metrics.readAnswered(time.Since(batch.sent))
	for _, w := range batch.waiters {
		w.finish(rs.Index, nil)
	}
}

func (n *Node) failReaders(err error) {
	for seq, batch := range n.readInflight {
		n.cfg.Metrics.readFailed()
		for _, w := range batch.waiters {
			w.finish(0, err)
		}
		delete(n.readInflight, seq)
	}
}

// ErrNoLeader is returned by ReadIndex when the member knows no leader.
var ErrNoLeader = fmt.Errorf("raft: no leader")

// Status is a snapshot of the member's raft state.
type Status struct {
	ID, Leader, Term   uint64
	Committed, Applied uint64
	// Persisted is the last index the local WAL durably holds.
	Persisted        uint64
	LeaderChanges    uint64
	Voters, Learners []uint64
}

// Status returns the member's current raft state.
func (n *Node) Status() Status {
	cs := n.confState.Load()
	return Status{
		ID: n.cfg.ID, Leader: n.lead.Load(), Term: n.term.Load(),
		Committed: n.committed.Load(), Applied: n.applied.Load(),
		Persisted:     n.persisted.Load(),
		LeaderChanges: n.leaderChanges.Load(),
		Voters:        cs.GetVoters(), Learners: cs.GetLearners(),
	}
}

// Applied is the last index the state machine has applied.
func (n *Node) Applied() uint64 { return n.applied.Load() }

// Committed is the last index this member knows committed.
func (n *Node) Committed() uint64 { return n.committed.Load() }

// Term is the member's current raft term: Status().Term without the rest
// of Status (every response header carries it).
func (n *Node) Term() uint64 { return n.term.Load() }

// IsLeader reports whether this member is the leader.
func (n *Node) IsLeader() bool { return n.lead.Load() == n.cfg.ID }

// WAL returns the node's WAL (for metrics and tools).
func (n *Node) WAL() *wal.WAL { return n.wal }

// raftLogger adapts slog to raft's Logger interface. Raft's info chatter
// goes to debug: Strata's logs stay quiet by default.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...any)              { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Debugf(f string, v ...any)   { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r raftLogger) Info(v ...any)               { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Infof(f string, v ...any)    { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r raftLogger) Warning(v ...any)            { r.l.Warn(fmt.Sprint(v...)) }
func (r raftLogger) Warningf(f string, v ...any) { r.l.Warn(fmt.Sprintf(f, v...)) }
func (r raftLogger) Error(v ...any)              { r.l.Error(fmt.Sprint(v...)) }
func (r raftLogger) Errorf(f string, v ...any)   { r.l.Error(fmt.Sprintf(f, v...)) }
func (r raftLogger) Fatal(v ...any)              { r.l.Error(fmt.Sprint(v...)); panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(f string, v ...any) {
	r.l.Error(fmt.Sprintf(f, v...))
	panic(fmt.Sprintf(f, v...))
}
func (r raftLogger) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
