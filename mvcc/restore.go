package mvcc

import (
	"encoding/binary"
	"fmt"

	"github.com/strata-db/strata/btreeidx"
	"github.com/strata-db/strata/pagestore"
)

// Installing a leader's image on a follower: the page store is replaced
// while the member runs, and everything derived from it is rebuilt in
// place, so the server's pointers (and the watch streams' store) stay
// valid. Called from the apply goroutine, between two applies, in this
// order: Backend.SwapDB, then (the lessor's own recover, so the store can
// attach leased keys) WatchableStore.Restore.
//
// Readers are not stopped: one that started before the swap finishes on
// the old page store (which its owner closes once the last reader is
// gone, pagestore.DB.Close waits for them) and the old index; one that
// starts during Restore may see the new page store with the old index
// for that moment, and answers as of the old revision or finds a record
// missing. A linearizable read never does: it waits until the snapshot's
// index is applied, which raft publishes after Restore returns.

// SwapDB makes db the backend's page store and returns the previous one,
// which the caller closes. Every write given to the backend and not yet
// committed is dropped: they belong to entries the image already covers
// (raft installs a snapshot only past everything the member applied). A
// defrag step waiting for the next commit fails with ErrBackendClosed.
func (b *Backend) SwapDB(db *pagestore.DB) (*pagestore.DB, error) {
	var ci uint64
	err := db.View(func(tx *pagestore.Tx) error {
		for _, name := range [][]byte{KeyBucket, MetaBucket} {
			if _, err := tx.Bucket(name); err != nil {
				return fmt.Errorf("mvcc: the image has no %s bucket: %w", name, err)
			}
		}
		meta, _ := tx.Bucket(MetaBucket)
		v, err := meta.Get(metaConsistentIndex)
		if err != nil {
			return err
		}
		if len(v) == 8 {
			ci = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	b.batchMu.Lock()
	defer b.batchMu.Unlock()
	if dreq := b.defrag.Swap(nil); dreq != nil {
		dreq.done <- defragResult{err: ErrBackendClosed}
	}
	old := b.dbp.Swap(db)
	b.cur = &batch{ci: ci}
	b.uncommitted = nil
	b.ci = ci
	b.committedCI.Store(ci)
	b.pendingBytes.Store(0)
	b.commitErr.Store(nil)
	b.state.Store(&readState{})
	return old, nil
}

// Restore rebuilds the store from its backend's (new) page store: the key
// index, the revision, the compaction revisions (a compaction the image
// records as scheduled and not finished is resumed), and the keys
// attached to leases (through StoreConfig.Leases). Apply goroutine only.
func (s *Store) Restore() error {
	s.compactor.stop()
	// The base was written from the page store just replaced.
	s.removeBase()
	s.compactRev.Store(-1)
	idx, scheduled, finished, err := s.restore()
	if idx == nil {
		idx = btreeidx.NewIndex()
	}
	s.idx.Store(idx)
	s.compactor = newCompactor(s)
	if err != nil {
		return err
	}
	s.resumeCompaction(scheduled, finished)
	if s.checkpointDue() {
		s.compactor.wake()
	}
	return nil
}

// Restore rebuilds the store (Store.Restore) and then makes every
// watcher catch up from the restored page store: synced watchers become
// unsynced at the revision they have reached, so the sync loop sends
// them the events the image holds after it, or cancels them with the
// compaction revision when the image no longer holds them. Victims keep
// their parked events and rejoin as unsynced once those are delivered.
// No watcher is left silent.
func (s *WatchableStore) Restore() error {
	if err := s.Store.Restore(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notified = s.Store.Rev()
	var moved []*watcher
	s.synced.each(func(w *watcher) bool {
		moved = append(moved, w)
		return true
	})
	for _, w := range moved {
		s.synced.remove(w)
		w.state = stateUnsynced
		s.unsynced.add(w)
	}
	s.publishCountsLocked()
	kick(s.syncKick)
	return nil
}
