package raft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/wal"
)

// The follower's side of a snapshot: installing a leader's image. The
// steps, and why each crash point between them is safe, are in the package
// doc ("Installing a leader's snapshot").

// SnapshotMeta describes an installed snapshot: the index and term of the
// last entry it covers and the membership as of that entry.
type SnapshotMeta struct {
	Index, Term uint64
	ConfState   *raftpb.ConfState
}

// Image file names in Config.SnapshotDir (etcd names its received
// databases the same way): a received image whose snapshot marker may be
// in the WAL is "<index as 16 hex digits>.snap.db"; a payload still being
// written ends in ImagePartSuffix. Start removes both kinds once it has
// finished any install the WAL records.
const (
	imageSuffix = ".snap.db"
	// ImagePartSuffix ends the name of a file a transport is writing a
	// received payload into (see CreateImageFile).
	ImagePartSuffix = ".snap.db.part"
)

// ImagePath is where the image of the snapshot at index waits for its
// install.
func ImagePath(dir string, index uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%016x%s", index, imageSuffix))
}

// received is a MsgSnap whose payload a transport wrote to path.
type received struct {
	m    *raftpb.Message
	path string
}

// ErrNoSnapshotDir is returned by StepSnapshot and CreateImageFile on a
// node started without Config.SnapshotDir.
var ErrNoSnapshotDir = errors.New("raft: no snapshot directory configured; cannot receive snapshots")

// CreateImageFile creates a file, in the snapshot directory, for a
// transport to write a received snapshot payload into. The transport
// writes the payload, fsyncs and closes the file, and passes its path to
// StepSnapshot (or removes it if the transfer failed).
func (n *Node) CreateImageFile() (*os.File, error) {
	if n.cfg.SnapshotDir == "" {
		return nil, ErrNoSnapshotDir
	}
	return os.CreateTemp(n.cfg.SnapshotDir, "recv-*"+ImagePartSuffix)
}

// StepSnapshot delivers a MsgSnap whose payload (the leader's image) the
// transport wrote, fsync'd, to path in the snapshot directory. The node
// owns the file from the call on, whatever the outcome: it checks that the
// image holds exactly the snapshot's index (StateMachine.CheckImage), and
// raft then installs it or, if the member's log already covers it, drops
// it. An error means the image was refused (and removed); the transport
// should report it to the sender as a failed transfer.
func (n *Node) StepSnapshot(ctx context.Context, m *raftpb.Message, path string) error {
	remove := func(err error) error {
		_ = n.fs.Remove(path)
		return err
	}
	if m.GetType() != raftpb.MsgSnap {
		return remove(fmt.Errorf("raft: StepSnapshot got a %s message", m.GetType()))
	}
	if n.cfg.SnapshotDir == "" {
		return remove(ErrNoSnapshotDir)
	}
	if filepath.Dir(path) != filepath.Clean(n.cfg.SnapshotDir) {
		return remove(fmt.Errorf("raft: snapshot payload %s is not in the snapshot directory %s", path, n.cfg.SnapshotDir))
	}
	want := m.GetSnapshot().GetMetadata().GetIndex()
	got, err := n.sm.CheckImage(path)
	if err != nil {
		return remove(fmt.Errorf("raft: snapshot payload for index %d from %x: %w", want, m.GetFrom(), err))
	}
	if got != want {
		return remove(fmt.Errorf("raft: snapshot payload from %x holds index %d, the snapshot is at %d", m.GetFrom(), got, want))
	}
	select {
	case n.snapc <- received{m: m, path: path}:
		return nil
	case <-ctx.Done():
		return remove(ctx.Err())
	case <-n.done:
		return remove(n.stopErr())
	}
}

// stepReceived steps a received snapshot in the raft goroutine; the image
// waits in n.pending for the Ready that installs it.
func (n *Node) stepReceived(r received) {
	n.discardReceived()
	n.pending = &r
	_ = n.rn.Step(r.m)
}

// discardReceived removes a received image raft did not install (the
// member's log already covered the snapshot). Raft goroutine only; called
// after the Readies that followed the step.
func (n *Node) discardReceived() {
	if n.pending == nil {
		return
	}
	n.log.Debug("received snapshot not needed; removing its image", "index", n.pending.m.GetSnapshot().GetMetadata().GetIndex())
	_ = n.fs.Remove(n.pending.path)
	n.pending = nil
}

// persistSnapshot is the durable half of installing a received snapshot,
// in the raft goroutine, before the Ready's hard state is written: the
// image gets its final name (fsync'd), then the snapshot marker goes to
// the WAL (fsync'd). It returns the install request for the apply
// goroutine, which renames the image over the state and restores.
func (n *Node) persistSnapshot(snap *raftpb.Snapshot) (*restoreReq, error) {
	md := snap.GetMetadata()
	idx := md.GetIndex()
	r := n.pending
	if r == nil || r.m.GetSnapshot().GetMetadata().GetIndex() != idx {
		return nil, fmt.Errorf("raft: the snapshot at %d has no received image", idx)
	}
	n.pending = nil
	final := ImagePath(n.cfg.SnapshotDir, idx)
	if err := n.fs.Rename(r.path, final); err != nil {
		return nil, fmt.Errorf("raft: installing the snapshot at %d: %w", idx, err)
	}
	if err := n.fs.SyncDir(n.cfg.SnapshotDir); err != nil {
		return nil, fmt.Errorf("raft: installing the snapshot at %d: %w", idx, err)
	}
	if err := n.wal.SaveSnapshot(wal.Snapshot{Index: idx, Term: md.GetTerm(), ConfState: md.GetConfState()}); err != nil {
		return nil, fmt.Errorf("raft: recording the snapshot at %d: %w", idx, err)
	}
	return &restoreReq{meta: SnapshotMeta{Index: idx, Term: md.GetTerm(), ConfState: md.GetConfState()}, path: final}, nil
}

// restoreReq is an image to install, for the apply goroutine.
type restoreReq struct {
	meta SnapshotMeta
	path string
}

// restoreState installs a received image in the apply goroutine, after
// every earlier batch was applied and with no snapshot or image being
// made (snapMu).
func (n *Node) restoreState(r *restoreReq) error {
	n.snapMu.Lock()
	defer n.snapMu.Unlock()
	n.cfg.Metrics.applyingSnapshot(true)
	defer n.cfg.Metrics.applyingSnapshot(false)
	if err := n.sm.Restore(r.meta, r.path); err != nil {
		return fmt.Errorf("raft: restoring the state machine from the snapshot at %d: %w", r.meta.Index, err)
	}
	if ci := n.sm.ConsistentIndex(); ci != r.meta.Index {
		return fmt.Errorf("raft: the state machine restored from the snapshot at %d reports consistent index %d", r.meta.Index, ci)
	}
	n.snapIndex.Store(r.meta.Index)
	if _, err := n.wal.Purge(r.meta.Index); err != nil {
		n.log.Warn("cannot purge WAL segments after installing a snapshot", "index", r.meta.Index, "error", err)
	}
	n.log.Info("installed a snapshot from the leader", "index", r.meta.Index, "term", r.meta.Term)
	return nil
}

// ErrNoImage is the cause named when the page store is behind the WAL's
// snapshot and no received image can bring it there. Its text is etcd's
// for the same state (a db older than the snapshot and no snap/*.snap.db),
// which operators and etcd's own tests look for in the log.
var ErrNoImage = errors.New("snap: snapshot file doesn't exist")

// finishInstall completes, at start-up, an install that a crash
// interrupted after the WAL recorded its marker: the state machine is
// behind the WAL's snapshot, and the image waits under its final name.
func (n *Node) finishInstall(snap wal.Snapshot, ci uint64) error {
	p := ""
	if n.cfg.SnapshotDir != "" {
		p = ImagePath(n.cfg.SnapshotDir, snap.Index)
	}
	if p == "" {
		return fmt.Errorf("raft: failed to find database snapshot file (%v): the state machine is at index %d, behind the WAL's snapshot at %d: the data directory is damaged",
			ErrNoImage, ci, snap.Index)
	}
	if _, err := n.fs.Stat(p); err != nil {
		return fmt.Errorf("raft: failed to find database snapshot file (%v): the state machine is at index %d, behind the WAL's snapshot at %d, and the snapshot's image %s is missing (%v): the data directory is damaged",
			ErrNoImage, ci, snap.Index, p, err)
	}
	// The image waited on disk through the crash: check it again. The
	// WAL's marker means the entries it covers are no longer in the log,
	// so a damaged image cannot be replaced from here.
	got, err := n.sm.CheckImage(p)
	if err == nil && got != snap.Index {
		err = fmt.Errorf("it holds index %d", got)
	}
	if err != nil {
		return fmt.Errorf("raft: the received snapshot image %s, which the WAL's snapshot at %d needs to finish its install, is damaged: %w; "+
			"this member cannot recover it: remove the member from the cluster, delete its data directory and add it again", p, snap.Index, err)
	}
	n.log.Info("finishing the install of a received snapshot that a restart interrupted", "index", snap.Index, "image", p)
	return n.sm.Restore(SnapshotMeta{Index: snap.Index, Term: snap.Term, ConfState: snap.ConfState}, p)
}

// removeStaleImages removes received images no install needs any more:
// payloads whose transfer a crash cut short, and images whose snapshot
// never reached the WAL. Called by Start after finishInstall.
func (n *Node) removeStaleImages() {
	dir := n.cfg.SnapshotDir
	if dir == "" {
		return
	}
	ents, err := n.fs.ReadDir(dir)
	if err != nil {
		return
	}
	removed := 0
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, ImagePartSuffix) || strings.HasSuffix(name, imageSuffix) {
			if n.fs.Remove(filepath.Join(dir, name)) == nil {
				removed++
			}
		}
	}
	if removed > 0 {
		n.log.Info("removed unused snapshot images", "dir", dir, "count", removed)
	}
}

// dropStaleTail drops WAL entries after a snapshot marker that precede
// the snapshot in term: entries a follower had appended before it
// installed a leader's snapshot, left in the WAL ahead of the marker. A
// valid log's terms never decrease, so no entry after the snapshot's last
// entry can have a lower term; such entries are a diverged tail the
// install replaced (raft installs a snapshot only when the log does not
// hold its last entry, so the tail after it never matched the leader's).
// Keeping them would give the member a last log term lower than its
// snapshot's, with which it could vote for a candidate that lacks
// committed entries.
func dropStaleTail(snap wal.Snapshot, ents []*raftpb.Entry) []*raftpb.Entry {
	for i, e := range ents {
		if e.GetTerm() < snap.Term {
			return ents[:i]
		}
	}
	return ents
}

// snapshotFromWAL is the raft snapshot a WAL marker stands for.
func snapshotFromWAL(s wal.Snapshot) *raftpb.Snapshot {
	return &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(s.Index), Term: proto.Uint64(s.Term), ConfState: s.ConfState,
	}}
}
