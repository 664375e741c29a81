package mvcc

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-db/strata/btreeidx"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/vfs"
)

// The index base: the key index, written to a file beside the page store
// (StoreConfig.IndexBase, the server's member/snap/db.index) so that
// opening the store reads only what was written since, and need not
// hold every key in memory (btreeidx, "Base"). Without it, opening reads
// the revision metadata of every record, and the time to the first read
// grows with the store.
//
// When a base is written (checkpoint, in the compactor's goroutine, one
// at a time with compactions):
//   - once the records written since the last base (or, without one,
//     since the store opened, counting those it read) reach
//     max(IndexBaseEvery, live keys / 8), so opening replays at most
//     that many;
//   - after a compaction that had to delete records above the base's
//     revision, and so removed the base file first (see the invariants
//     below): opening reads every record until the new base is written;
//   - when the store closes, if a compaction removed the base file, or
//     if the records since the last base are at least baseOnClose and a
//     quarter of the count that makes one due:
//     a stop then costs a base's write (about a second per million
//     keys) only when it saves the next start a replay of that size.
//
// A checkpoint takes a Clone of the index between two write
// transactions (Backend.Quiesce), with the revision it holds; commits
// the backend, so the page store holds every record the Clone does;
// writes the base (btreeidx.WriteBase: a temporary file, synced, renamed
// over the old one, directory synced); and swaps it in under the live
// index (btreeidx.Index.ReplaceBase), which then keeps in memory only
// the keys written since.
//
// Which base goes with which page store: the revision metadata's marker
// (revmeta.go) holds a random token, new each time the metadata is
// built; a base records the token of the store it was written from.
//
// Crash safety. A base on disk always satisfies:
//
//	(1) its revision R is at most the page store's: the backend was
//	    committed before the base was written;
//	(2) its compaction revision C is a compaction whose deletes had
//	    finished (a checkpoint is skipped while one is unfinished);
//	(3) no compaction has deleted a record above R: a compaction whose
//	    garbage holds a revision above R removes the file (and syncs
//	    the directory) before it deletes anything.
//
// Opening uses a base only if its token is the store's, R is at most the
// newest record's revision, C at most the finished compaction's, and
// every block of the file checks (checksums, entries, counts); otherwise
// it removes the file and reads every record. The blocks' check reads
// the whole file, so it runs while the records above R are read, and the
// index is built from them only once the check has passed; a failed
// check drops what was read and starts over without the base. With a
// base, it
// restores the records above R (all there, by (3), and none in the base,
// by (1)) onto the base, then redoes the finished compaction if it is
// above C (the base's keys that it drops are found through the base's
// schedule; their records are gone already), and resumes an unfinished
// one as without a base. That is the index a full read of the records
// builds: a base is the index at R, compacted at C, and the records at
// or below R that the page store still holds are those compactions at
// or below the finished one left. A crash while writing leaves the old
// base, or none (a temporary file, removed on open); a store replaced by
// a leader's image removes its base before it rebuilds (Restore).

// baseOnClose is the least number of records since the last base that
// make Close write a new one: fewer replay in a few milliseconds.
const baseOnClose = 20_000

// closeCheckpointDue reports whether Close should write a base.
func (s *Store) closeCheckpointDue() bool {
	n := s.sinceBase.Load()
	return s.basePath != "" && (s.baseDue.Load() || n >= baseOnClose && n >= s.baseNext.Load()/4)
}

// defaultIndexBaseEvery is StoreConfig.IndexBaseEvery's default.
const defaultIndexBaseEvery = 50_000

// errCheckpointSkipped: a compaction's deletes are unfinished, so the
// index holds no state a base may record (invariant 2).
var errCheckpointSkipped = errors.New("mvcc: a compaction is unfinished")

// ensureBaseToken reads the revision metadata's token, writing a new one
// first if the metadata has none (built by an older Strata). Called on
// open, before any write.
func (s *Store) ensureBaseToken() error {
	var tok []byte
	err := s.be.DB().View(func(tx *pagestore.Tx) error {
		mb, err := tx.Bucket(RevMetaBucket)
		if err != nil {
			return err
		}
		v, err := mb.Get(revMetaComplete)
		tok = bytes.Clone(v)
		return err
	})
	if err != nil {
		return err
	}
	if len(tok) != len(s.token) {
		tok = newBaseToken()
		err := s.be.update(func(tx *pagestore.Tx) error {
			mb, err := tx.Bucket(RevMetaBucket)
			if err != nil {
				return err
			}
			return mb.Put(revMetaComplete, tok)
		})
		if err != nil {
			return err
		}
	}
	copy(s.token[:], tok)
	return nil
}

func newBaseToken() []byte {
	tok := make([]byte, 16)
	rand.Read(tok)
	return tok
}

// openBase opens the base file for a store whose newest record is at
// lastRev and whose last finished compaction is finished, if the file
// exists and goes with the store (see the package's crash argument);
// else it removes the file and returns nil. The base's data blocks are
// not checked yet: the caller runs check, and uses the base only if it
// returns nil (btreeidx.OpenBaseUnchecked); see dropBase.
func (s *Store) openBase(lastRev, finished int64) (b *btreeidx.Base, check func() error) {
	fs, path := s.baseFS, s.basePath
	fs.Remove(path + ".tmp") // a write a crash cut short
	if _, err := fs.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	b, check, err := btreeidx.OpenBaseUnchecked(fs, path)
	why := ""
	switch {
	case err != nil:
		why = err.Error()
	case b.Token() != s.token:
		why = "it was written from another page store"
	case b.Rev() > lastRev:
		why = fmt.Sprintf("its revision %d is past the page store's %d", b.Rev(), lastRev)
	case b.CompactRev() > finished:
		why = fmt.Sprintf("its compaction revision %d is past the page store's finished compaction %d", b.CompactRev(), finished)
	}
	if why != "" {
		s.dropBase(why)
		return nil, nil
	}
	return b, check
}

// dropBase removes a base file the store will not use, and says why.
func (s *Store) dropBase(why string) {
	s.log.Warn("not using the key index base; reading every record instead", "path", s.basePath, "reason", why)
	s.removeBase()
}

// removeBase removes the base file, so that the next open reads every
// record.
func (s *Store) removeBase() {
	if s.basePath == "" {
		return
	}
	s.baseFileRev.Store(-1)
	err := s.baseFS.Remove(s.basePath)
	if err == nil {
		err = s.baseFS.SyncDir(filepath.Dir(s.basePath))
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Error("removing the key index base", "path", s.basePath, "error", err)
	}
}

// beforeDeleting keeps invariant (3) for a compaction whose newest
// garbage revision is newest: if the base file is older, it is removed
// (and a new base made due).
func (s *Store) beforeDeleting(newest int64) {
	if s.basePath == "" || s.baseFileRev.Load() < 0 || newest <= s.baseFileRev.Load() {
		return
	}
	s.removeBase()
	s.baseDue.Store(true)
}

// noteWrites counts n records written, and wakes the compactor when a
// checkpoint is due.
func (s *Store) noteWrites(n int) {
	if s.basePath == "" {
		return
	}
	v := s.sinceBase.Add(int64(n))
	if next := s.baseNext.Load(); v >= next && v-int64(n) < next {
		s.compactor.wake()
	}
}

// checkpointDue reports whether enough records came since the last base.
func (s *Store) checkpointDue() bool {
	return s.basePath != "" && (s.baseDue.Load() || s.sinceBase.Load() >= s.baseNext.Load())
}

// checkpoint writes a new base and swaps it in under the index (see
// above). Compactor goroutine, or Close after the compactor stopped.
func (s *Store) checkpoint(why string) error {
	if s.basePath == "" {
		return nil
	}
	start := time.Now()
	idx := s.index()
	var snap *btreeidx.Index
	var rev, since int64
	s.be.Quiesce(func(lastKeyRev int64) {
		snap = idx.Clone()
		rev = max(s.rev.Load(), lastKeyRev)
		since = s.sinceBase.Swap(0)
	})
	if snap.CompactedRev() > s.finishedRev.Load() {
		s.sinceBase.Add(since)
		return errCheckpointSkipped
	}
	err := s.be.ForceCommit()
	if err == nil {
		err = btreeidx.WriteBase(s.baseFS, s.basePath, snap, rev, s.token)
	}
	var b *btreeidx.Base
	if err == nil {
		if b, err = btreeidx.OpenBase(s.baseFS, s.basePath); err != nil {
			// The index cannot rest on it, so compactions would not
			// keep it valid (invariant 3).
			s.removeBase()
		}
	}
	if err != nil {
		s.sinceBase.Add(since)
		return fmt.Errorf("mvcc: write the key index base %s: %w", s.basePath, err)
	}
	wrote := time.Since(start)
	s.baseFileRev.Store(rev)
	s.baseDue.Store(false)
	idx.ReplaceBase(b, snap)
	s.baseNext.Store(max(int64(s.baseEvery), b.Keys()/8))
	s.log.Info("wrote the key index base", "path", s.basePath, "reason", why, "revision", rev,
		"compact-revision", b.CompactRev(), "keys", b.Keys(), "records-since-last", since,
		"write-took", wrote, "took", time.Since(start))
	return nil
}

// baseOptions fills the store's base settings from cfg.
func (s *Store) baseOptions(cfg StoreConfig) {
	s.basePath = cfg.IndexBase
	s.baseFS = cfg.FS
	if s.baseFS == nil {
		s.baseFS = vfs.Default
	}
	s.baseEvery = cfg.IndexBaseEvery
	if s.baseEvery <= 0 {
		s.baseEvery = defaultIndexBaseEvery
	}
	s.baseNext.Store(int64(s.baseEvery))
}
