package pagestore

import (
	"sync/atomic"
	"time"
)

// Stats is a snapshot of the database's counters; see DB.Stats.
type Stats struct {
	PageSize     int
	FileSize     int64 // bytes in the file, including preallocated tail
	InUseBytes   int64 // bytes in pages reachable from the latest commit
	FreePages    int64 // pages free for reuse now
	PendingPages int64 // pages freed but still visible to an open reader
	TxID         uint64
	OpenReadTxs  int

	ReadTxs           uint64 // read transactions started
	Commits           uint64
	CommitFailures    uint64
	CommitTotal       time.Duration // sum of successful commit durations
	CommitMax         time.Duration
	LastCommit        time.Duration
	LastCommitWrite   time.Duration // of LastCommit: writing the dirty pages (pwrite)
	LastCommitSync    time.Duration // of LastCommit: in fdatasync (both syncs)
	WriteTotal        time.Duration // sum over successful commits of the page writes
	SyncTotal         time.Duration // sum over successful commits of the fdatasyncs
	PageWrites        uint64        // pwrite calls for data pages (after coalescing)
	DefragSteps       uint64
	DefragMovedPages  uint64
	DefragMaxLockHold time.Duration
}

type statCounters struct {
	readTxs        atomic.Uint64
	commits        atomic.Uint64
	commitFailures atomic.Uint64
	commitTotal    atomic.Int64
	commitMax      atomic.Int64
	lastCommit     atomic.Int64
	lastWrite      atomic.Int64
	lastSync       atomic.Int64
	writeTotal     atomic.Int64
	syncTotal      atomic.Int64
	pageWrites     atomic.Uint64
	inUseBytes     atomic.Int64
	freePages      atomic.Int64
	pendingPages   atomic.Int64
	txid           atomic.Uint64
	fileSize       atomic.Int64
}

func (s *statCounters) recordCommit(d, write, sync time.Duration) {
	s.commits.Add(1)
	s.commitTotal.Add(int64(d))
	s.lastCommit.Store(int64(d))
	s.lastWrite.Store(int64(write))
	s.lastSync.Store(int64(sync))
	s.writeTotal.Add(int64(write))
	s.syncTotal.Add(int64(sync))
	for {
		old := s.commitMax.Load()
		if int64(d) <= old || s.commitMax.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

type defragCounters struct {
	steps       atomic.Uint64
	moved       atomic.Uint64
	maxLockHold atomic.Int64
}

// InUseBytes is Stats().InUseBytes without the rest: the bytes the last
// commit's pages take (what the quota limits). It takes no lock, for
// callers on a request's path.
func (db *DB) InUseBytes() int64 { return db.st.inUseBytes.Load() }

// Stats returns current counters. It takes no lock the writer holds.
func (db *DB) Stats() Stats {
	db.readersMu.Lock()
	open := 0
	for _, n := range db.readers {
		open += n
	}
	db.readersMu.Unlock()
	return Stats{
		PageSize:          db.pageSize,
		FileSize:          db.st.fileSize.Load(),
		InUseBytes:        db.st.inUseBytes.Load(),
		FreePages:         db.st.freePages.Load(),
		PendingPages:      db.st.pendingPages.Load(),
		TxID:              db.st.txid.Load(),
		OpenReadTxs:       open,
		ReadTxs:           db.st.readTxs.Load(),
		Commits:           db.st.commits.Load(),
		CommitFailures:    db.st.commitFailures.Load(),
		CommitTotal:       time.Duration(db.st.commitTotal.Load()),
		CommitMax:         time.Duration(db.st.commitMax.Load()),
		LastCommit:        time.Duration(db.st.lastCommit.Load()),
		LastCommitWrite:   time.Duration(db.st.lastWrite.Load()),
		LastCommitSync:    time.Duration(db.st.lastSync.Load()),
		WriteTotal:        time.Duration(db.st.writeTotal.Load()),
		SyncTotal:         time.Duration(db.st.syncTotal.Load()),
		PageWrites:        db.st.pageWrites.Load(),
		DefragSteps:       db.defragState.steps.Load(),
		DefragMovedPages:  db.defragState.moved.Load(),
		DefragMaxLockHold: time.Duration(db.defragState.maxLockHold.Load()),
	}
}

// publishSpace refreshes the space counters; caller holds writeMu.
func (db *DB) publishSpace(hwm pgid) {
	fl := db.fl
	db.st.inUseBytes.Store((int64(hwm) - int64(fl.free.count+fl.pendingCount)) * int64(db.pageSize))
	db.st.freePages.Store(int64(fl.free.count))
	db.st.pendingPages.Store(int64(fl.pendingCount))
	db.sizeMu.Lock()
	db.st.fileSize.Store(db.fileSize)
	db.sizeMu.Unlock()
}
