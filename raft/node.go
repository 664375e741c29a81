package raft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/vfs"
	"github.com/strata-db/strata/wal"
)

// StateMachine is what committed entries are applied to.
type StateMachine interface {
	// ConsistentIndex is the index of the last entry whose effects are
	// durable in the state machine. Replay skips entries at or below it.
	ConsistentIndex() uint64
	// Apply applies committed entries, in index order, from a single
	// goroutine. It must skip entries at or below ConsistentIndex.
	Apply(ents []*raftpb.Entry)
	// Commit makes what is applied durable, with its index, but never
	// past the last index given to Persisted.
	Commit() error
	// Persisted tells the state machine that the local WAL durably holds
	// the log up to index. Nothing durable may run ahead of the WAL:
	// Apply may see entries the WAL has not yet made durable (raft lets
	// committed entries through before the local write, and the WAL write
	// may then fail), so the state machine must never make an index above
	// the latest value durable, by Commit or on its own. Called from the
	// raft goroutine, once before the first Apply and then after each
	// successful WAL write that moves it; it can go down when a follower's
	// uncommitted tail is replaced, never below an applied index.
	Persisted(index uint64)

	// Image returns a consistent view of the state machine's durable
	// state, for a leader to send to a follower that needs a snapshot
	// (see image.go). It first makes what is applied durable, as Commit
	// does (never past the persisted index); the image then holds exactly
	// the entries up to its Index. Apply may run meanwhile.
	Image() (Image, error)
	// CheckImage validates a received image file (on a follower, before
	// raft sees the snapshot) and returns the consistent index it holds.
	CheckImage(path string) (index uint64, err error)
	// Restore replaces the state with the received image at path, which
	// holds exactly meta.Index: it renames the file over its own, fsyncs
	// the directory, and rebuilds everything it derives from its state;
	// ConsistentIndex then returns meta.Index. Called from the apply
	// goroutine (between two Apply calls), or by Start before anything
	// runs, when a crash interrupted an install (package doc). Images it
	// handed out before stay readable until closed, and the restored
	// state keeps to the last index given to Persisted.
	Restore(meta SnapshotMeta, path string) error
}

// Config configures a Node.
type Config struct {
	// ID is this member's raft id; ClusterID is stored in the WAL.
	ID, ClusterID uint64
	// ForceNewCluster, on a restart, makes this member the only one
	// (force.go).
	ForceNewCluster bool
	// Peers are the initial voters of a new cluster (ignored on restart).
	// A member joining a running cluster has none: it starts with an
	// empty log and membership, and learns both from the leader (its log
	// from the first entry, or a snapshot).
	Peers []etcdraft.Peer
	// WALDir is the WAL directory (member/wal).
	WALDir string
	// StatePath is the state machine's file (the page store), named in
	// the error that refuses a WAL behind it. Optional.
	StatePath string
	// SnapshotDir is where received snapshot images are written and
	// wait for their install (member/snap, on the state machine's file
	// system, so the image can be renamed over its file). Without it the
	// member cannot receive snapshots.
	SnapshotDir string
	// WAL configures the log. Nil means defaults.
	WAL *wal.Options
	// Preload, if set, is the log already being read (PreloadWAL, with
	// the same WALDir and WAL options): a restart takes it instead of
	// reading the log itself.
	Preload *WALPreload
	// TickInterval is one raft tick, etcd's --heartbeat-interval.
	TickInterval time.Duration
	// ElectionTicks and HeartbeatTicks are in ticks (etcd derives
	// ElectionTicks from --election-timeout / --heartbeat-interval).
	ElectionTicks, HeartbeatTicks int
	// SnapshotCount: a snapshot is taken once more than this many
	// entries were applied since the last one (etcd's --snapshot-count,
	// default 10000, with etcd's strict comparison).
	SnapshotCount uint64
	// CatchUpEntries are kept in memory after a snapshot for slow
	// followers (etcd keeps 5000); none on a member alone in its
	// configuration.
	CatchUpEntries uint64
	// MaxSizePerMsg and MaxInflightMsgs bound replication batches.
	MaxSizePerMsg   uint64
	MaxInflightMsgs int
	// PreVote enables raft's pre-vote phase, as etcd does by default.
	PreVote bool
	// StateMachine receives committed entries. Required.
	StateMachine StateMachine
	// Transport sends messages to peers; nil for a single member.
	Transport Transport
	// ConfChecker decides which committed conf changes raft applies (as
	// etcd's member checks each against its membership first); nil
	// applies every change raft can.
	ConfChecker ConfChecker
	// Logger gets lifecycle and error messages. Default: discard.
	Logger *slog.Logger
	// Metrics receives read index and snapshot figures; nil records
	// nothing.
	Metrics *Metrics
	// SnapshotSaved, if set, is called after each snapshot is saved (on
	// the snapshotting goroutine), with its index.
	SnapshotSaved func(index uint64)
}

// ConfChecker checks committed conf changes for the raft goroutine, which
// calls it and nothing else does. A refused change goes to raft with node
// id 0, which raft skips, as etcd does with a change its membership
// refuses; the state machine must refuse the same change when it applies
// it, from the same membership, or raft's configuration would differ
// between members.
type ConfChecker interface {
	// Load sets the membership the checks start from: the state
	// machine's own (path ""), as of its consistent index, with nothing
	// being applied (Start calls it before the goroutines run); or that
	// of the received image at path (the install of a leader's snapshot).
	Load(path string) error
	// Check decides the change cc committed at index, in index order from
	// the entry after the state Load read (replayed entries at or below
	// its consistent index included): nil applies it.
	Check(index uint64, cc *raftpb.ConfChange) error
}

// Errors returned by Node.
var (
	ErrStopped         = errors.New("raft: node stopped")
	ErrProposalDropped = etcdraft.ErrProposalDropped
)

// Node is a running raft member.
type Node struct {
	cfg     Config
	log     *slog.Logger
	sm      StateMachine
	storage *etcdraft.MemoryStorage
	wal     *wal.WAL
	fs      vfs.FS            // the WAL's file system, also for snapshot images
	rn      *etcdraft.RawNode // owned by the raft goroutine
	// batch and batchBytes are the proposals taken and not yet stepped
	// into raft (takeProposal); raft goroutine only.
	batch      []proposal
	batchBytes uint64

	propc       chan proposal
	recvc       chan *raftpb.Message
	readc       chan struct{} // capacity 1: "readers are waiting"
	applyc      chan applyBatch
	stopc       chan struct{}
	done        chan struct{} // closed when the raft goroutine exits
	appliedDone chan struct{}
	stopOnce    sync.Once
	err         atomic.Pointer[error] // why the node stopped, if it failed

	// Read batching: readers register in readWaiting under readMu; the
	// raft goroutine moves them to readInflight (which it alone owns)
	// when it issues their ReadIndex.
	readMu       sync.Mutex
	readClosed   bool // the raft goroutine has exited (closeReads)
	readWaiting  []*readWaiter
	readInflight map[uint64]readBatch
	readSeq      uint64

	// Published state, read by any goroutine.
	applied       atomic.Uint64
	committed     atomic.Uint64
	term          atomic.Uint64
	lead          atomic.Uint64
	confState     atomic.Pointer[raftpb.ConfState]
	leaderChanges atomic.Uint64
	leaderElected atomic.Int64 // unix nanos of the last change to a leader

	// leaderMu guards leaderNotify, which the raft goroutine closes and
	// replaces each time the leader it knows changes (LeaderChanged).
	leaderMu     sync.Mutex
	leaderNotify chan struct{}

	// heartbeats finds the leader's late heartbeats (heartbeat.go); the
	// raft goroutine's alone.
	heartbeats heartbeatDetector

	// reportc carries the transport's reports (ReportUnreachable,
	// ReportSnapshot) to the raft goroutine, which alone owns the RawNode.
	reportc chan report
	// transferc carries TransferLeadership requests to the raft goroutine.
	transferc chan uint64
	// progressc carries Progress requests to the raft goroutine.
	progressc chan chan map[uint64]PeerProgress

	appliedMu     sync.Mutex
	appliedNotify chan struct{} // closed and replaced on every apply

	// persisted is the index up to which the WAL durably holds the log,
	// published by the raft goroutine after each write (see
	// publishPersisted); snapshots wait for it.
	persisted       atomic.Uint64
	persistedMu     sync.Mutex
	persistedNotify chan struct{} // closed and replaced on every change

	snapIndex    atomic.Uint64 // index of the newest snapshot
	snapshotting atomic.Bool   // a background snapshot is running
	// forceSnap asks the apply goroutine for a snapshot after the batch
	// it applies, whatever SnapshotCount says (ForceSnapshot).
	forceSnap atomic.Bool
	trimmedTo uint64 // the apply goroutine's last trimSoleLog index
	snapWG    sync.WaitGroup
	// snapMu serializes what cuts raft snapshots or replaces the state
	// machine's state: the periodic snapshot, preparing an image for a
	// follower, and installing a received image.
	snapMu sync.Mutex
	images images      // images prepared for followers (leader side)
	confs  confHistory // membership by index since the latest snapshot
	snapc  chan received
	// pending is a received snapshot stepped into raft and not yet
	// installed. Raft goroutine only.
	pending *received

	walLast         uint64   // the WAL's last index at Start
	restoredVoters  []uint64 // voters known at restart, before replay
	campaignOnStart bool
}

type proposal struct {
	data []byte
	cc   raftpb.ConfChangeI
	errc chan error // nil for ProposeAsync
	// onDrop reports a refused ProposeAsync (no leader, say).
	onDrop func(error)
}

type readWaiter struct {
	index uint64
	err   error
	done  chan struct{}
	// deadline, if set, is when the raft goroutine gives up on the read
	// (expireReads) with context.DeadlineExceeded.
	deadline time.Time
}

// finish answers the reader.
func (w *readWaiter) finish(index uint64, err error) {
	w.index, w.err = index, err
	close(w.done)
}

// readBatch is the readers one raft ReadIndex request serves.
type readBatch struct {
	waiters []*readWaiter
	sent    time.Time
	// last is when the request was last handed to raft, lead the leader
	// this member knew then (see retryReads).
	last time.Time
	lead uint64
}

// Start opens (or creates) the WAL, restores raft's log from it, and
// starts the raft and apply goroutines.
func Start(cfg Config) (*Node, error) {
	if cfg.StateMachine == nil {
		return nil, errors.New("raft: Config.StateMachine is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CatchUpEntries == 0 {
		cfg.CatchUpEntries = 5000
	}
	if cfg.MaxSizePerMsg == 0 {
		cfg.MaxSizePerMsg = 1 << 20
	}
	if cfg.MaxInflightMsgs == 0 {
		cfg.MaxInflightMsgs = 4096 / 8
	}
	n := &Node{
		cfg: cfg, log: cfg.Logger, sm: cfg.StateMachine,
		storage:         etcdraft.NewMemoryStorage(),
		propc:           make(chan proposal, 4096),
		recvc:           make(chan *raftpb.Message, 4096),
		readc:           make(chan struct{}, 1),
		applyc:          make(chan applyBatch, 64),
		stopc:           make(chan struct{}),
		done:            make(chan struct{}),
		appliedDone:     make(chan struct{}),
		readInflight:    map[uint64]readBatch{},
		appliedNotify:   make(chan struct{}),
		persistedNotify: make(chan struct{}),
		leaderNotify:    make(chan struct{}),
		heartbeats:      newHeartbeatDetector(cfg.TickInterval),
		reportc:         make(chan report, 256),
		transferc:       make(chan uint64),
		progressc:       make(chan chan map[uint64]PeerProgress),
		snapc:           make(chan received),
	}
	walOpts := cfg.WAL
	if walOpts == nil {
		walOpts = &wal.Options{}
	}
	fs := walOpts.FS
	n.fs = fs
	if n.fs == nil {
		n.fs = vfs.Default
	}
	restart := wal.Exist(fs, cfg.WALDir)
	if !restart {
		cfg.Preload.Discard()
	}
	var err error
	if restart {
		err = n.restore(walOpts)
	} else if err = n.checkWALCovers(0, true); err == nil {
		// No WAL: a new member, whose state machine must be empty too
		// (stratautl snapshot restore writes a WAL with its data).
		n.wal, err = wal.Create(cfg.WALDir, encodeMetadata(cfg.ID, cfg.ClusterID), walOpts)
	}
	if err != nil {
		return nil, err
	}
	rc := &etcdraft.Config{
		ID:              cfg.ID,
		ElectionTick:    cfg.ElectionTicks,
		HeartbeatTick:   cfg.HeartbeatTicks,
		Storage:         snapStorage{MemoryStorage: n.storage, n: n},
		MaxSizePerMsg:   cfg.MaxSizePerMsg,
		MaxInflightMsgs: cfg.MaxInflightMsgs,
		// Keep the uncommitted tail bounded when a quorum is unreachable.
		MaxUncommittedEntriesSize: 1 << 30,
		CheckQuorum:               true,
		PreVote:                   cfg.PreVote,
		Logger:                    raftLogger{n.log},
	}
	if n.rn, err = etcdraft.NewRawNode(rc); err != nil {
		n.wal.Close()
		return nil, err
	}
	// A new member whose first start stopped after creating the WAL and
	// before writing anything to it (a crash, a power cut) never voted,
	// acknowledged or applied anything: it bootstraps as on a first start,
	// or it would restart with no voters and never elect a leader.
	bootstrap := !restart
	if restart && len(cfg.Peers) > 0 && n.walLast == 0 && n.snapIndex.Load() == 0 && n.sm.ConsistentIndex() == 0 {
		if hs, _, err := n.storage.InitialState(); err == nil && etcdraft.IsEmptyHardState(hs) {
			bootstrap = true
			n.log.Info("the WAL holds nothing: bootstrapping as on a first start")
		}
	}
	if bootstrap && len(cfg.Peers) > 0 {
		if err := n.rn.Bootstrap(cfg.Peers); err != nil {
			n.wal.Close()
			return nil, err
		}
	}
	if cs := n.confState.Load(); cs == nil {
		n.confState.Store(&raftpb.ConfState{})
	}
	if bootstrap {
		n.confs.reset(0, n.confState.Load())
	}
	if n.cfg.ConfChecker != nil {
		if err := n.cfg.ConfChecker.Load(""); err != nil {
			n.wal.Close()
			return nil, err
		}
	}
	n.removeStaleImages()
	// What the WAL holds now (nothing, for a new log: the bootstrap
	// entries are written by the first Ready).
	n.publishPersisted(n.walLast)
	// A lone voter need not wait out an election timeout: it campaigns as
	// soon as the bootstrap membership is applied (see run).
	n.campaignOnStart = bootstrap && len(cfg.Peers) == 1 && cfg.Peers[0].ID == cfg.ID || n.soleVoter()
	go n.run()
	go n.applyLoop()
	return n, nil
}

// restore opens the WAL at its latest snapshot and loads raft's log,
// or takes the log Config.Preload read.
func (n *Node) restore(opts *wal.Options) (err error) {
	var snap wal.Snapshot
	var w *wal.WAL
	var hs *raftpb.HardState
	var ents []*raftpb.Entry
	if n.cfg.Preload != nil {
		snap, w, hs, ents, err = n.cfg.Preload.result()
	} else {
		snap, w, hs, ents, err = readWAL(n.fs, n.cfg.WALDir, opts)
	}
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			w.Close()
			n.wal = nil
		}
	}()
	if ci := n.sm.ConsistentIndex(); ci < snap.Index {
		// Legal only when a crash interrupted the install of a received
		// snapshot after its WAL marker: the image waits to be renamed.
		if err := n.finishInstall(snap, ci); err != nil {
			return err
		}
		if ci := n.sm.ConsistentIndex(); ci != snap.Index {
			return fmt.Errorf("raft: the state machine restored from the snapshot at %d reports consistent index %d", snap.Index, ci)
		}
	}
	n.wal = w
	ents = dropStaleTail(snap, ents)
	n.confs.reset(snap.Index, snap.ConfState)
	if snap.Index > 0 {
		if err := n.storage.ApplySnapshot(snapshotFromWAL(snap)); err != nil {
			return err
		}
		n.confState.Store(snap.ConfState)
		n.snapIndex.Store(snap.Index)
	}
	// The WAL's commit index may lag (commit-only changes are not written,
	// see handleReady), but everything at or below the snapshot, and
	// everything the state machine applied, was committed.
	last := snap.Index
	if len(ents) > 0 {
		last = ents[len(ents)-1].GetIndex()
	}
	// The state machine's consistent index may lag the WAL (the page store
	// commits in batches) but never lead it: a torn tail that Open just
	// truncated held entries the page store had not committed either.
	if err := n.checkWALCovers(last, false); err != nil {
		return err
	}
	n.walLast = last
	commit := max(hs.GetCommit(), snap.Index, min(n.sm.ConsistentIndex(), last))
	if commit != hs.GetCommit() {
		hs = &raftpb.HardState{Term: proto.Uint64(hs.GetTerm()), Vote: proto.Uint64(hs.GetVote()), Commit: proto.Uint64(commit)}
	}
	if n.cfg.ForceNewCluster {
		if ents, hs, err = n.forceNewCluster(snap, ents, hs, commit); err != nil {
			return err
		}
		n.walLast = max(hs.GetCommit(), snap.Index)
	}
	if err := n.storage.SetHardState(hs); err != nil {
		return err
	}
	if err := n.storage.Append(ents); err != nil {
		return err
	}
	n.applied.Store(max(snap.Index, n.sm.ConsistentIndex()))
	n.restoredVoters = votersAfter(snap.ConfState, ents, hs.GetCommit())
	n.log.Info("restored raft log from WAL", "snapshot-index", snap.Index, "entries", len(ents),
		"term", hs.GetTerm(), "commit", hs.GetCommit(), "consistent-index", n.sm.ConsistentIndex())
	return nil
}

func (n *Node) soleVoter() bool {
	v := n.restoredVoters
	return len(v) == 1 && v[0] == n.cfg.ID
}

// votersAfter replays the committed conf changes in ents over cs and
// returns the voters, so a restarted lone member can campaign at once.
func votersAfter(cs *raftpb.ConfState, ents []*raftpb.Entry, commit uint64) []uint64 {
	set := map[uint64]bool{}
	for _, v := range cs.GetVoters() {
		set[v] = true
	}
	for _, e := range ents {
		if e.GetIndex() > commit || e.GetType() != raftpb.EntryConfChange {
			continue
		}
		var cc raftpb.ConfChange
		if proto.Unmarshal(e.GetData(), &cc) != nil {
			continue
		}
		switch cc.GetType() {
		case raftpb.ConfChangeAddNode:
			set[cc.GetNodeId()] = true
		case raftpb.ConfChangeRemoveNode, raftpb.ConfChangeAddLearnerNode:
			delete(set, cc.GetNodeId())
		}
	}
	out := make([]uint64, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	return out
}

// metadata is the WAL's metadata: node id and cluster id (wire format,
// never change): two big-endian u64.
func encodeMetadata(id, cluster uint64) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, id)
	binary.BigEndian.PutUint64(b[8:], cluster)
	return b
}

// Propose submits data (an encoded request) to be committed. It returns
// once raft has accepted or refused it; the caller waits for the apply.
func (n *Node) Propose(ctx context.Context, data []byte) error {
	return n.propose(ctx, proposal{data: data, errc: make(chan error, 1)})
}

// ProposeAsync queues data for raft and returns without waiting for raft
// to accept it, saving the proposer a goroutine round trip; if raft
// refuses it, onDrop is called from the raft goroutine and must not block.
// While the queue is full it waits until ctx is done, expired fires
// (context.DeadlineExceeded; nil: never) or the node stops.
func (n *Node) ProposeAsync(ctx context.Context, expired <-chan time.Time, data []byte, onDrop func(error)) error {
	select {
	case n.propc <- proposal{data: data, onDrop: onDrop}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-expired:
		return context.DeadlineExceeded
	case <-n.done:
		return n.stopErr()
	}
}

// ProposeConfChange submits a membership change.
func (n *Node) ProposeConfChange(ctx context.Context, cc raftpb.ConfChangeI) error {
	return n.propose(ctx, proposal{cc: cc, errc: make(chan error, 1)})
}

func (n *Node) propose(ctx context.Context, p proposal) error {
	select {
	case n.propc <- p:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.done:
		return n.stopErr()
	}
	select {
	case err := <-p.errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.done:
		return n.stopErr()
	}
}

// Step delivers a message from a peer. It blocks while the node's inbox
// is full (4096 messages), until ctx is done or the node stops.
// A MsgSnap must come with its payload, through StepSnapshot.
func (n *Node) Step(ctx context.Context, m *raftpb.Message) error {
	if m.GetType() == raftpb.MsgSnap {
		return fmt.Errorf("raft: a snapshot message must be delivered with its image (StepSnapshot)")
	}
	select {
	case n.recvc <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.done:
		return n.stopErr()
	}
}

// TryStep is Step without waiting: false if the node's receive queue is
// full (or it has stopped), and the caller keeps m.
func (n *Node) TryStep(m *raftpb.Message) bool {
	if m.GetType() == raftpb.MsgSnap {
		return false
	}
	select {
	case n.recvc <- m:
		return true
	default:
		return false
	}
}

func (n *Node) stopErr() error {
	if e := n.err.Load(); e != nil {
		return fmt.Errorf("%w: %w", ErrStopped, *e)
	}
	return ErrStopped
}

// Stop stops the goroutines, waits for queued applies, makes the state
// machine durable and closes the WAL.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() { close(n.stopc) })
	<-n.done
	<-n.appliedDone
	n.snapWG.Wait()
	n.images.drop()
	for _, h := range n.images.pins {
		h.unref()
	}
	n.images.pins = nil
	if n.pending != nil {
		_ = n.fs.Remove(n.pending.path)
		n.pending = nil
	}
	err := n.sm.Commit()
	if werr := n.wal.Close(); err == nil {
		err = werr
	}
	return err
}

// Done is closed when the node has stopped (after Stop or a fatal error).
func (n *Node) Done() <-chan struct{} { return n.done }

// Err returns the fatal error that stopped the node, if any.
func (n *Node) Err() error {
	if e := n.err.Load(); e != nil {
		return *e
	}
	return nil
}

// fail stops the node on a fatal error. It logs at debug level only: the
// node's owner learns of it through Done and Err and reports it once (the
// server logs one fatal line and exits).
func (n *Node) fail(err error) {
	n.err.CompareAndSwap(nil, &err)
	n.log.Debug("raft node stopping on a fatal error", "error", err)
	n.stopOnce.Do(func() { close(n.stopc) })
}

// ReadIDs returns the member and cluster ids recorded in an existing WAL.
func ReadIDs(walDir string) (id, cluster uint64, err error) {
	meta, err := wal.ReadMetadata(nil, walDir)
	if err != nil {
		return 0, 0, err
	}
	if len(meta) != 16 {
		return 0, 0, fmt.Errorf("raft: WAL metadata in %s is %d bytes, want 16", walDir, len(meta))
	}
	return binary.BigEndian.Uint64(meta), binary.BigEndian.Uint64(meta[8:]), nil
}
