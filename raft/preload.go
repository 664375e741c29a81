package raft

import (
	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/vfs"
	"github.com/strata-db/strata/wal"
)

// WALPreload is a restart's read of the WAL (its latest snapshot marker,
// then the log after it), started before Start on a goroutine of its
// own. Reading the log is a member's largest cost at start beside
// opening its state machine, and the two need nothing from each other:
// the state machine is checked against the log only once both are read
// (Start's restore). A member that opens its store meanwhile starts in
// about the longer of the two instead of their sum.
type WALPreload struct {
	done chan struct{}
	snap wal.Snapshot
	w    *wal.WAL
	hs   *raftpb.HardState
	ents []*raftpb.Entry
	err  error
}

// PreloadWAL starts reading the WAL in dir with opts, as Start's restore
// would, if dir holds one (nil if not: a new member has nothing to
// read). The caller must hold the data directory's lock, as for Start:
// opening the log truncates a torn tail. It passes the result to Start
// (Config.Preload), or to Discard if it does not call Start.
func PreloadWAL(dir string, opts *wal.Options) *WALPreload {
	fs := vfs.FS(vfs.Default)
	if opts != nil && opts.FS != nil {
		fs = opts.FS
	}
	if !wal.Exist(fs, dir) {
		return nil
	}
	p := &WALPreload{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.snap, p.w, p.hs, p.ents, p.err = readWAL(fs, dir, opts)
	}()
	return p
}

// readWAL opens the WAL in dir at its latest snapshot and reads the log
// after it.
func readWAL(fs vfs.FS, dir string, opts *wal.Options) (wal.Snapshot, *wal.WAL, *raftpb.HardState, []*raftpb.Entry, error) {
	snap, err := wal.LastSnapshot(fs, dir)
	if err != nil {
		return snap, nil, nil, nil, err
	}
	w, err := wal.Open(dir, snap, opts)
	if err != nil {
		return snap, nil, nil, nil, err
	}
	_, hs, ents, err := w.ReadAll()
	if err != nil {
		w.Close()
		return snap, nil, nil, nil, err
	}
	return snap, w, hs, ents, nil
}

// result waits for the read.
func (p *WALPreload) result() (wal.Snapshot, *wal.WAL, *raftpb.HardState, []*raftpb.Entry, error) {
	<-p.done
	return p.snap, p.w, p.hs, p.ents, p.err
}

// Discard waits for a preload that Start will not take and closes the
// log it opened. Nil-safe.
func (p *WALPreload) Discard() {
	if p == nil {
		return
	}
	if _, w, _, _, err := p.result(); err == nil {
		w.Close()
	}
}
