package server

import (
	"fmt"
	"time"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/vfs"
)

// Restore installs a leader's page-store image received with a snapshot
// (raft.StateMachine): the image (which holds exactly meta.Index) is
// renamed over the page store and the directory fsync'd, the new page
// store is opened and swapped in under the backend, and everything the
// server derives from its state is rebuilt from it, in place: leases,
// the key index and the watchers (mvcc.WatchableStore.Restore: no
// watcher is left silent), auth, alarms and membership (and the
// transport's peers with it). The old page store closes once its last
// reader is done. Called from the apply goroutine, or by raft.Start to
// finish an install a crash interrupted.
func (a *applier) Restore(meta raft.SnapshotMeta, path string) error {
	s := a.s
	start := time.Now()
	fs := s.dbFS
	if fs == nil {
		fs = vfs.Default
	}
	if err := fs.Rename(path, s.cfg.BackendPath()); err != nil {
		return fmt.Errorf("server: install the snapshot image %s: %w", path, err)
	}
	if err := fs.SyncDir(s.cfg.SnapDir()); err != nil {
		return fmt.Errorf("server: install the snapshot image: sync %s: %w", s.cfg.SnapDir(), err)
	}
	db, err := s.openPageStore()
	if err != nil {
		return fmt.Errorf("server: open the installed snapshot image %s: %w", s.cfg.BackendPath(), err)
	}
	s.restoreMu.Lock()
	defer s.restoreMu.Unlock()
	old, err := s.be.SwapDB(db)
	if err != nil {
		db.Close()
		return fmt.Errorf("server: install the snapshot image: %w", err)
	}
	go func() {
		if err := old.Close(); err != nil {
			s.lg.Warn("closing the page store replaced by a snapshot", "error", err)
		}
	}()
	if s.restoreWindow != nil {
		s.restoreWindow()
	}
	if err := s.lessor.Recover(); err != nil {
		return err
	}
	if err := s.watch.Restore(); err != nil {
		return err
	}
	if err := s.auth.Recover(db); err != nil {
		return err
	}
	if err := s.alarms.reload(db); err != nil {
		return err
	}
	if err := s.diskFull.reload(db); err != nil {
		return err
	}
	if err := s.loadClusterState(db); err != nil {
		return err
	}
	if err := s.members.Reset(db); err != nil {
		return err
	}
	if _, a.view, err = loadView(db); err != nil {
		return err
	}
	if s.peers != nil {
		s.peers.syncMembers()
	}
	a.applied.Store(meta.Index)
	s.lg.Info("restored the state from a leader's snapshot", "index", meta.Index, "term", meta.Term,
		"revision", s.kv.Rev(), "took", time.Since(start).String())
	return nil
}

// reload replaces the alarms with those persisted in db.
func (a *alarms) reload(db *pagestore.DB) error {
	fresh := newAlarms()
	if err := fresh.load(db); err != nil {
		return err
	}
	a.mu.Lock()
	a.m = fresh.m
	a.mu.Unlock()
	return nil
}

// reload replaces the disk-full alarms raised with those persisted in db.
func (d *diskFull) reload(db *pagestore.DB) error {
	fresh := &diskFull{raised: map[uint64]bool{}}
	if err := fresh.load(db); err != nil {
		return err
	}
	d.mu.Lock()
	d.raised = fresh.raised
	d.mu.Unlock()
	return nil
}

// lockForRead takes restoreMu for reading, waiting out a snapshot install
// in progress.
func (s *Server) lockForRead() {
	if s.restoreMu.TryRLock() {
		return
	}
	if s.readBlocked != nil {
		s.readBlocked()
	}
	s.restoreMu.RLock()
}
