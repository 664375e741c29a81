package mvcc

import (
	"errors"
	"slices"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/btreeidx"
)

// Compaction, in the order that keeps it crash-safe:
//
//  1. Apply (in the request's own batch, with its consistent index) writes
//     scheduledCompactRev and publishes the new compact revision, so reads
//     below it fail from then on.
//  2. In the background: the index drops what reads at or after the
//     revision no longer need (in batches, under its own lock), the backend
//     is committed so every record at or below the revision is in the page
//     store, and the obsolete records are deleted in revision order, in
//     commits of a bounded number of records, with a pause between
//     batches.
//  3. finishedCompactRev is written and committed.
//
// Deleting in revision order means a crash leaves a prefix of the work
// done: a key's older records go before its tombstone, so reopening never
// sees a deleted key come back to life. On open, a scheduled revision above
// the finished one resumes step 2, which is idempotent.
//
// Which records go: those the index drops (btreeidx.CompactGarbage),
// deleted by key in revision order, so a compaction reads no record and
// costs what it removes, not what the store keeps. The index holds a
// revision for every record of the key bucket (it is built from them on
// open, and every write adds its revisions to both in one apply), so
// what it drops is exactly every record at or below the revision that no
// read at or after it needs. After a crash mid-compaction the index is
// rebuilt from the records still there, so the resumed compaction's
// garbage is exactly what is left to delete. etcd's compaction hash,
// which covers the records kept too, comes from the record sums
// (sums.go), not from reading the records.

// The store's compactPause (--compaction-sleep-interval, 10 ms as in
// etcd) separates delete batches of compactBatch records
// (--compaction-batch-limit) so compaction never holds the write path
// for long. A batch is committed compactCommitRecords records at a time:
// a commit's cost follows the records it deletes (the page store reads
// their leaves, rewrites them and writes them out), and the puts' WAL
// writes share the disk with it, so larger commits raise the puts'
// latency without shortening the compaction. etcd commits each batch
// whole, but its batch is --compaction-batch-limit revisions scanned, of
// which it deletes only the garbage; each of Strata's records is garbage.

// compactCommitRecords is the most records one commit of a compaction
// deletes. make bench-scale's rows 3 and 4 at 1 GiB (147,000 garbage
// revisions under 300 puts a second, just after a cold restart), two
// runs each: with a commit per batch of 1,000 the largest put took
// 125-143 ms and the p99 was 102-104 ms; with commits of 250, 58-73 ms
// and 37-40 ms, the compaction's time unchanged (5.4-6.4 s). With the
// page cache warm (the full run's order) the largest put was 107-125 ms
// either way; see bench/SCALE.md.
const compactCommitRecords = 250

// compactJob is one compaction to run: its revision, the compact
// revision before it, and whether the compaction before it had finished
// when this one was applied (only then does its hash cover every revision
// since that one, and only then is the hash stored, as etcd does).
type compactJob struct {
	rev, prev int64
	storeHash bool
}

type compactor struct {
	s *Store

	mu      sync.Mutex
	queue   []compactJob // waiting, ascending by revision
	busy    bool         // a revision is being compacted
	idlers  []chan struct{}
	waiters map[int64][]chan struct{} // closed when the revision is done
	kick    chan struct{}
	stopc   chan struct{}
	done    chan struct{}
}

func newCompactor(s *Store) *compactor {
	c := &compactor{s: s, waiters: map[int64][]chan struct{}{}, kick: make(chan struct{}, 1),
		stopc: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// schedule queues rev and returns a channel closed once its records are
// gone from the page store.
func (c *compactor) schedule(job compactJob) <-chan struct{} {
	rev := job.rev
	ch := make(chan struct{})
	c.mu.Lock()
	c.queue = append(c.queue, job)
	c.waiters[rev] = append(c.waiters[rev], ch)
	c.mu.Unlock()
	c.wake()
	return ch
}

// wake makes the compactor look at its queue, and whether an index base
// is due (Store.checkpointDue).
func (c *compactor) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// idle returns a channel closed once no compaction is queued or running.
func (c *compactor) idle() <-chan struct{} {
	ch := make(chan struct{})
	c.mu.Lock()
	if len(c.queue) == 0 && !c.busy {
		close(ch)
	} else {
		c.idlers = append(c.idlers, ch)
	}
	c.mu.Unlock()
	return ch
}

func (c *compactor) stop() {
	select {
	case <-c.stopc:
	default:
		close(c.stopc)
	}
	<-c.done
}

func (c *compactor) run() {
	defer close(c.done)
	for {
		select {
		case <-c.kick:
		case <-c.stopc:
			return
		}
		for {
			c.mu.Lock()
			if len(c.queue) == 0 {
				c.mu.Unlock()
				if c.s.checkpointDue() {
					if err := c.s.checkpoint("records since the last base"); err != nil && !errors.Is(err, errCheckpointSkipped) {
						c.s.log.Warn("writing the key index base failed; the next open reads the records since the last one", "error", err)
					}
				}
				break
			}
			job := c.queue[0]
			rev := job.rev
			c.queue = c.queue[1:]
			c.busy = true
			c.mu.Unlock()
			if !c.compact(job) {
				return // stopped; the scheduled revision resumes on open
			}
			c.mu.Lock()
			for r, ws := range c.waiters {
				if r <= rev {
					for _, w := range ws {
						close(w)
					}
					delete(c.waiters, r)
				}
			}
			c.busy = false
			if len(c.queue) == 0 {
				for _, ch := range c.idlers {
					close(ch)
				}
				c.idlers = nil
			}
			c.mu.Unlock()
		}
	}
}

// compact runs step 2 and 3 for the job, computing etcd's compaction
// hash from the record sums (sums.go; stored when the job says so). It
// returns false if stopped.
func (c *compactor) compact(job compactJob) bool {
	rev := job.rev
	s := c.s
	start := time.Now()
	m := s.metrics
	deleted := 0
	defer func() {
		// On every way out, as etcd reports an interrupted one too.
		if m != nil {
			m.DBCompactionTotal.Observe(float64(time.Since(start) / time.Millisecond))
			m.DBCompactionKeys.Add(float64(deleted))
			m.DBCompactionLast.Set(float64(time.Now().Unix()))
		}
	}()
	// The hash needs every record's sum (a store opened on an index
	// base reads the older ones in the background).
	if !s.sums.wait(c.stopc) {
		return false
	}
	garbage := s.index().CompactGarbage(rev)
	indexTook := time.Since(start)
	if m != nil {
		m.IndexCompactionPause.Observe(float64(time.Since(start) / time.Millisecond))
	}
	slices.SortFunc(garbage, func(a, b btreeidx.Garbage) int { return a.Rev.Compare(b.Rev) })
	if len(garbage) > 0 {
		// No compaction deletes records above the base file's revision
		// (indexbase.go): if this one must, the file goes first, and a
		// new base is written once the compaction is done.
		s.beforeDeleting(garbage[len(garbage)-1].Rev.Main)
	}
	hash := s.sums.compact(job.prev, rev, garbage)
	var commitTook time.Duration
	commits := 0
	commit := func() error {
		cs := time.Now()
		defer func() { commitTook += time.Since(cs); commits++ }()
		return s.be.ForceCommit()
	}
	// Every record at or below the revision must be in the page store
	// before its deletion is: a delete of a record still in memory would
	// leave the record to be written by the next commit.
	if err := commit(); err != nil {
		s.log.Error("compaction: commit before deleting failed", "revision", rev, "error", err)
	}
	batch := max(s.compactBatch, 1)
	keys := make([][]byte, 0, min(batch, len(garbage)))
	for i := 0; i < len(garbage); i += batch {
		select {
		case <-c.stopc:
			return false
		default:
		}
		keys = keys[:0]
		for _, g := range garbage[i:min(i+batch, len(garbage))] {
			keys = append(keys, revKey(g.Rev, g.Tombstone))
		}
		// The part of a batch that competes with the write path (etcd's
		// pause: the time it holds the batch transaction).
		bstart := time.Now()
		for part := range slices.Chunk(keys, compactCommitRecords) {
			w := s.be.BeginWrite()
			for _, k := range part {
				w.Delete(KeyBucket, k)
				w.Delete(RevMetaBucket, k)
			}
			w.End(0, 0)
			if err := commit(); err != nil {
				s.log.Error("compaction: commit failed", "revision", rev, "error", err)
			}
		}
		deleted += len(keys)
		if m != nil {
			m.DBCompactionPause.Observe(float64(time.Since(bstart) / time.Millisecond))
		}
		if i+batch < len(garbage) {
			select {
			case <-time.After(s.compactPause):
			case <-c.stopc:
				return false
			}
		}
	}
	w := s.be.BeginWrite()
	w.Put(MetaBucket, metaFinishedCompact, revKey(Revision{Main: rev}, false))
	w.End(0, 0)
	if err := s.be.ForceCommit(); err != nil {
		s.log.Error("compaction: commit of finished revision failed", "revision", rev, "error", err)
	}
	s.finishedRev.Store(rev)
	s.log.Debug("compaction phases", "compact-revision", rev, "index", indexTook,
		"commits", commits, "commits-took", commitTook, "took", time.Since(start))
	s.log.Info("finished scheduled compaction", "compact-revision", rev, "deleted-records", deleted, "hash", hash.Hash, "took", time.Since(start))
	if job.storeHash && !s.sums.usable() {
		s.log.Warn("not storing the compaction hash: the record sums could not be read", "compact-revision", rev)
	} else if job.storeHash {
		s.hashes.store(hash)
		s.log.Info("storing new hash", "hash", hash.Hash, "revision", hash.Revision, "compact-revision", hash.CompactRevision)
	} else {
		s.log.Info("previous compaction was interrupted, skip storing compaction hash value", "compact-revision", rev)
	}
	return true
}

// Compact applies a CompactionRequest: it validates the revision, records
// it, and schedules the physical deletion. The returned channel is closed
// when deletion is done (the server waits on it for physical requests).
func (s *Store) Compact(ci, term uint64, r *pb.CompactionRequest) (*pb.CompactionResponse, <-chan struct{}, error) {
	rev := r.Revision
	if rev <= s.compactRev.Load() {
		s.skip(ci, term)
		return nil, nil, ErrCompacted
	}
	if rev > s.rev.Load() {
		s.skip(ci, term)
		return nil, nil, ErrFutureRev
	}
	prev := s.compactRev.Load()
	w := s.be.BeginWrite()
	w.Put(MetaBucket, metaScheduledCompact, revKey(Revision{Main: rev}, false))
	w.End(ci, term)
	// Under hashMu: a HashKV in progress has its view before the
	// compaction deletes anything (see Store.hashMu).
	s.hashMu.Lock()
	s.compactRev.Store(rev)
	done := s.compactor.schedule(compactJob{rev: rev, prev: prev, storeHash: prev == s.finishedRev.Load()})
	s.hashMu.Unlock()
	if s.metrics != nil {
		// etcd answers a compaction with the revision it reads through a
		// one-key range, which its range counter sees; count it the same.
		s.metrics.Range.Inc()
	}
	return &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: s.rev.Load()}}, done, nil
}

// resumeCompaction schedules, at open or after a restore, the compaction
// a stop interrupted (scheduled above finished). Its hash is not stored:
// the deletions before the stop were not hashed.
func (s *Store) resumeCompaction(scheduled, finished int64) {
	if scheduled > finished {
		s.log.Info("resuming interrupted compaction", "scheduled", scheduled, "finished", finished)
		s.compactor.schedule(compactJob{rev: scheduled, prev: finished})
	}
}
