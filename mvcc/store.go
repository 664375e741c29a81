package mvcc

import (
	"bytes"
	"errors"
	"fmt"
	"google.golang.org/protobuf/encoding/protowire"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/btreeidx"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/vfs"
)

// Errors returned by the store. The server maps them to etcd's messages.
var (
	ErrCompacted   = errors.New("mvcc: required revision has been compacted")
	ErrFutureRev   = errors.New("mvcc: required revision is a future revision")
	ErrKeyNotFound = errors.New("mvcc: key not found")
	// ErrLeaseNotFound is returned for a put naming a lease the Leases
	// hook does not know.
	ErrLeaseNotFound = errors.New("mvcc: lease not found")
)

// Leases is the store's view of the lessor: it checks that a lease exists
// and tracks which keys are attached to which lease. The store calls it
// from the apply goroutine only.
type Leases interface {
	Exists(id int64) bool
	Attach(id int64, key []byte)
	Detach(id int64, key []byte)
}

// Event is one change, as watchers see it.
type Event struct {
	Type   mvccpb.Event_EventType
	KV     *mvccpb.KeyValue
	PrevKV *mvccpb.KeyValue // set when the write fetched it anyway
}

// StoreConfig configures a Store.
type StoreConfig struct {
	Logger *slog.Logger
	// Leases is consulted on puts with a lease; nil means leases are not
	// supported and any put naming one fails with ErrLeaseNotFound.
	Leases Leases
	// OnEvents receives the events of every applied write transaction, in
	// revision order, from the apply goroutine. It must not block.
	OnEvents func(rev int64, events []Event)
	// CompactBatch is how many revision records a compaction deletes per
	// commit (default 1000).
	CompactBatch int
	// CompactPause separates a compaction's delete batches (default 10
	// ms, etcd's --compaction-sleep-interval).
	CompactPause time.Duration
	// Metrics receives the store's and the watchable store's figures; nil
	// records nothing.
	Metrics *Metrics
	// IndexBase is the path of the key index's base file (indexbase.go);
	// empty: none, and opening reads every record's metadata.
	IndexBase string
	// FS is the file system of the index base (default vfs.Default).
	FS vfs.FS
	// IndexBaseEvery is the least number of records written between two
	// bases (default 50,000; the larger of it and an eighth of the live
	// keys).
	IndexBaseEvery int
}

// Store is the revision-keyed MVCC store.
//
// Writes come from one goroutine (apply). Reads may come from any number
// of goroutines and take no lock the writer holds across work: they load
// the published revision, read the index (whose lock a write holds only
// for one key update) and a Backend read view.
type Store struct {
	be *Backend
	// idx is the key index; replaced whole only by Restore (a follower
	// installing a leader's image), so readers load it once per read.
	idx          atomic.Pointer[btreeidx.Index]
	log          *slog.Logger
	leases       Leases
	events       func(int64, []Event)
	compactBatch int
	compactPause time.Duration
	metrics      *Metrics

	// rev is the current revision, published after each write txn.
	rev atomic.Int64
	// compactRev is the latest compaction revision; reads below it fail.
	// It is published before the index is compacted, so a read that
	// still sees the old value afterwards knows its result is whole.
	compactRev atomic.Int64
	// hashMu makes a HashKV's view (compact revision, kept revisions,
	// read transaction) one point in time with respect to Compact: a
	// compaction applied between HashKV reading the compact revision and
	// opening its read view would have it hash records the compaction
	// is deleting under the old compact revision, and a peer's check
	// would see a false mismatch (etcd takes its store lock the same way).
	hashMu sync.RWMutex
	// finishedRev is the revision of the last compaction whose deletion
	// finished (-1: none); a compaction applied while the one before it
	// is unfinished stores no hash (see compactHashes).
	finishedRev atomic.Int64
	hashes      compactHashes
	// sums has every key-bucket record's CRC, for compaction hashes.
	sums recordSums

	compactor *compactor

	// The index base (indexbase.go). token is the page store's; sinceBase
	// counts the records written since the last base (or the store
	// opened without one), baseNext is the count that makes a new one
	// due.
	basePath  string
	baseFS    vfs.FS
	baseEvery int
	token     [16]byte
	sinceBase atomic.Int64
	baseNext  atomic.Int64
	// baseFileRev is the revision of the base file on disk (-1: none);
	// baseDue asks for a new one at once (a compaction removed it).
	baseFileRev atomic.Int64
	baseDue     atomic.Bool
}

// OpenStore opens the store on a backend, building the key index from
// the page store (on the index base, when there is one), and resumes an
// interrupted compaction.
func OpenStore(be *Backend, cfg StoreConfig) (*Store, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CompactBatch <= 0 {
		cfg.CompactBatch = 1000
	}
	if cfg.CompactPause <= 0 {
		cfg.CompactPause = 10 * time.Millisecond
	}
	s := &Store{
		be: be, log: cfg.Logger, leases: cfg.Leases,
		events: cfg.OnEvents, compactBatch: cfg.CompactBatch, compactPause: cfg.CompactPause, metrics: cfg.Metrics,
	}
	s.baseOptions(cfg)
	s.compactRev.Store(-1)
	idx, scheduled, finished, err := s.restore()
	if err != nil {
		return nil, err
	}
	s.idx.Store(idx)
	s.compactor = newCompactor(s)
	s.resumeCompaction(scheduled, finished)
	if s.checkpointDue() {
		s.compactor.wake()
	}
	return s, nil
}

// restore builds the key index from the page store, then publishes the
// revision and compaction revision it found. Called before the store is
// used, or by Restore (apply goroutine), which then swaps the index in.
//
// With an index base that goes with the page store (indexbase.go), it
// reads the revision metadata above the base's revision only, and the
// record sums of the rest in the background (loadSums).
func (s *Store) restore() (idx *btreeidx.Index, scheduled, finished int64, err error) {
	start := time.Now()
	if err := s.buildRevMeta(); err != nil {
		return nil, 0, 0, err
	}
	if s.basePath != "" {
		if err := s.ensureBaseToken(); err != nil {
			return nil, 0, 0, err
		}
	}
	var r restored
	useBase := s.basePath != ""
	for {
		err = s.be.DB().View(func(tx *pagestore.Tx) error {
			r = restored{}
			return s.restoreView(tx, useBase, &r)
		})
		var ce baseCheckError
		if useBase && errors.As(err, &ce) {
			// The records read since the base are read again, all of
			// them this time: a damaged base costs one slow open.
			s.dropBase(ce.Error())
			useBase = false
			continue
		}
		break
	}
	if err != nil {
		return nil, 0, 0, err
	}
	idx, base, tail, scheduled, finished := r.idx, r.base, r.tail, r.scheduled, r.finished
	if base != nil && finished > idx.CompactedRev() {
		// The base predates the last finished compaction: drop what it
		// dropped (its records are gone).
		idx.CompactGarbage(finished)
	}
	s.finishedRev.Store(finished)
	if finished >= 0 {
		s.compactRev.Store(finished)
	}
	if scheduled > finished {
		// Reads below the scheduled revision may already miss records.
		s.compactRev.Store(scheduled)
	}
	if s.leases != nil {
		idx.LeasedKeys(func(key []byte, lease int64) bool {
			s.leases.Attach(lease, key)
			return true
		})
	}
	s.sinceBase.Store(tail)
	s.baseFileRev.Store(-1)
	if base != nil {
		s.baseFileRev.Store(base.Rev())
		s.baseNext.Store(max(int64(s.baseEvery), base.Keys()/8))
		s.log.Info("opened the key index on its base", "path", s.basePath, "base-revision", base.Rev(),
			"base-keys", base.Keys(), "records-since-base", tail, "revision", s.rev.Load(), "took", time.Since(start))
	} else {
		s.baseNext.Store(max(int64(s.baseEvery), int64(idx.Live()/8)))
	}
	return idx, scheduled, finished, nil
}

// loadSums reads the record sums of the records at or below upTo from
// the revision metadata and hands them to the sums (generation gen).
// Compactions wait for it; nothing deletes records meanwhile.
func (s *Store) loadSums(gen uint64, upTo int64) {
	start := time.Now()
	var sums sumChunks
	err := s.be.DB().View(func(tx *pagestore.Tx) error {
		mb, err := tx.Bucket(RevMetaBucket)
		if err != nil {
			return err
		}
		c := mb.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if bytes.Equal(k, revMetaComplete) {
				continue
			}
			rev, tomb, err := parseRevKey(k)
			if err != nil {
				return fmt.Errorf("%w: %s bucket: %v", pagestore.ErrCorrupt, RevMetaBucket, err)
			}
			if rev.Main > upTo {
				break
			}
			sum, _, err := decodeRevMeta(rev, tomb, v)
			if err != nil {
				return fmt.Errorf("%w: %s bucket, revision %v: %v", pagestore.ErrCorrupt, RevMetaBucket, rev, err)
			}
			sums.add(sum)
		}
		return c.Err()
	})
	if err != nil {
		s.log.Error("reading the record sums for compaction hashes; compactions store no hash until the store reopens", "error", err)
		s.sums.fill(gen, nil, true)
		return
	}
	all := sums.all()
	s.sums.fill(gen, all, false)
	s.log.Debug("read the record sums", "records", len(all), "took", time.Since(start))
}

// restoreRec is one record as restore hands it to the index builder.
type restoreRec struct {
	rev  Revision
	tomb bool
	kvMeta
}

const restoreBatch = 1024

// restored is what restoreView read: the index, the base it rests on (nil
// if none), how many records it read since the base, and the compaction
// revisions.
type restored struct {
	idx                 *btreeidx.Index
	base                *btreeidx.Base
	tail                int64
	scheduled, finished int64
}

// restoreView is restore's read of the page store in tx, on the index
// base if useBase and the store has one that goes with it.
func (s *Store) restoreView(tx *pagestore.Tx, useBase bool, r *restored) error {
	meta, err := tx.Bucket(MetaBucket)
	if err != nil {
		return err
	}
	if r.scheduled, err = readRevMeta(meta, metaScheduledCompact); err != nil {
		return err
	}
	if r.finished, err = readRevMeta(meta, metaFinishedCompact); err != nil {
		return err
	}
	mb, err := tx.Bucket(RevMetaBucket)
	if err != nil {
		return err
	}
	c := mb.Cursor()
	lastRev := int64(0)
	for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
		if bytes.Equal(k, revMetaComplete) {
			continue
		}
		rev, _, err := parseRevKey(k)
		if err != nil {
			return fmt.Errorf("%w: %s bucket: %v", pagestore.ErrCorrupt, RevMetaBucket, err)
		}
		lastRev = rev.Main
		break
	}
	if err := c.Err(); err != nil {
		return err
	}
	idx := btreeidx.NewIndex()
	from := int64(0)
	var check func() error
	if useBase {
		if r.base, check = s.openBase(lastRev, r.finished); r.base != nil {
			idx, from = btreeidx.NewIndexWithBase(r.base), r.base.Rev()
		}
	}
	r.idx = idx
	cur := max(int64(1), from) // etcd starts at revision 1: the first write is 2
	var sums sumChunks
	// This goroutine reads the records' metadata (revmeta.go: the
	// records themselves are not read); another builds the index
	// from it, in batches, so the two halves of the work overlap.
	// Keys alias the page store's pages, which stay valid until the
	// view ends, after the builder is done.
	batches := make(chan []restoreRec, 4)
	built := make(chan error, 1)
	go func() { built <- s.restoreIndexChecked(idx, batches, check) }()
	batch := make([]restoreRec, 0, restoreBatch)
	readErr := func() error {
		k, v := c.First()
		if from > 0 {
			k, v = c.Seek(revKey(Revision{Main: from + 1}, false))
		}
		for ; k != nil; k, v = c.Next() {
			if bytes.Equal(k, revMetaComplete) {
				continue
			}
			rev, tomb, err := parseRevKey(k)
			if err != nil {
				return fmt.Errorf("%w: %s bucket: %v", pagestore.ErrCorrupt, RevMetaBucket, err)
			}
			sum, kv, err := decodeRevMeta(rev, tomb, v)
			if err != nil {
				return fmt.Errorf("%w: %s bucket, revision %v: %v", pagestore.ErrCorrupt, RevMetaBucket, rev, err)
			}
			sums.add(sum)
			batch = append(batch, restoreRec{rev: rev, tomb: tomb, kvMeta: kv})
			if len(batch) == restoreBatch {
				batches <- batch
				batch = make([]restoreRec, 0, restoreBatch)
			}
			cur = max(cur, rev.Main)
			r.tail++
		}
		return c.Err()
	}()
	if len(batch) > 0 {
		batches <- batch
	}
	close(batches)
	if err := <-built; err != nil {
		return err
	}
	if readErr != nil {
		return readErr
	}
	cur = max(cur, r.scheduled)
	s.rev.Store(cur)
	gen := s.sums.reset(sums.all(), r.base == nil)
	if r.base != nil {
		go s.loadSums(gen, from)
	}
	return nil
}

// baseCheckError is a damaged index base found by its check while the
// store was reading its records since the base.
type baseCheckError struct{ err error }

func (e baseCheckError) Error() string { return e.err.Error() }

// restoreIndexChecked is restoreIndex on a base whose data blocks check
// (btreeidx.OpenBaseUnchecked) is still to run (nil: none to run). The
// check reads the whole base file, and the reader of the records since
// the base needs nothing from it, so the builder keeps the reader's
// batches while the check runs rather than stop the reader; the index is
// built only on a base that checked, from the batches kept and then
// the rest. A failed check is a baseCheckError, after the reader is done
// (the batches alias its view's pages).
func (s *Store) restoreIndexChecked(idx *btreeidx.Index, batches <-chan []restoreRec, check func() error) error {
	if check == nil {
		return s.restoreIndex(idx, nil, batches)
	}
	checked := make(chan error, 1)
	go func() { checked <- check() }()
	var early [][]restoreRec
	var err error
wait:
	for {
		select {
		case err = <-checked:
			break wait
		case b, ok := <-batches:
			if !ok {
				err = <-checked
				batches = nil
				break wait
			}
			early = append(early, b)
		}
	}
	if err != nil {
		if batches != nil {
			for range batches {
			}
		}
		return baseCheckError{err}
	}
	return s.restoreIndex(idx, early, batches)
}

// restoreIndex adds the records of early, then of batches (nil: none
// more), in revision order, to idx. After an error it still drains
// batches, so the reader never blocks, and returns the first error.
func (s *Store) restoreIndex(idx *btreeidx.Index, early [][]restoreRec, batches <-chan []restoreRec) error {
	var err error
	add := func(batch []restoreRec) {
		for i := 0; i < len(batch) && err == nil; i++ {
			r := &batch[i]
			if r.tomb {
				err = idx.Restore(r.key, r.rev, Revision{}, 0, 0, true)
			} else {
				err = idx.Restore(r.key, r.rev, Revision{Main: r.create}, r.version, r.lease, false)
			}
		}
	}
	for _, batch := range early {
		add(batch)
	}
	if batches != nil {
		for batch := range batches {
			add(batch)
		}
	}
	return err
}

// readRevMeta reads a compaction revision from the meta bucket: -1 when
// there is none (0 is a revision one may compact to, as in etcd).
func readRevMeta(meta *pagestore.Bucket, key []byte) (int64, error) {
	v, err := meta.Get(key)
	if err != nil || v == nil {
		return -1, err
	}
	rev, _, err := parseRevKey(v)
	if err != nil {
		return 0, fmt.Errorf("%w: meta %s: %v", pagestore.ErrCorrupt, key, err)
	}
	return rev.Main, nil
}

func (s *Store) index() *btreeidx.Index { return s.idx.Load() }

// Rev returns the current revision.
func (s *Store) Rev() int64 { return s.rev.Load() }

// CompactRev returns the latest compaction revision, or -1.
func (s *Store) CompactRev() int64 { return s.compactRev.Load() }

// ConsistentIndex is the raft index whose effects are durable.
func (s *Store) ConsistentIndex() uint64 { return s.be.ConsistentIndex() }

// Backend returns the store's backend.
func (s *Store) Backend() *Backend { return s.be }

// KeyCount returns the number of keys that exist now
// (etcd_debugging_mvcc_keys_total). The index keeps the count as it
// changes, so this is cheap enough for every scrape.
func (s *Store) KeyCount() int { return s.index().Live() }

// Metrics returns the store's instruments (nil if it has none).
func (s *Store) Metrics() *Metrics { return s.metrics }

// Close stops background compaction and commits pending writes; with
// an index base and enough written since it, it writes a new one, so
// that the next open reads little.
func (s *Store) Close() error {
	s.compactor.stop()
	err := s.be.ForceCommit()
	if err == nil && s.closeCheckpointDue() {
		if cerr := s.checkpoint("close"); cerr != nil && !errors.Is(cerr, errCheckpointSkipped) {
			s.log.Warn("not writing the key index base on close; the next open reads the records since the last one", "error", cerr)
		}
	}
	return err
}

// Value encoding: a marshaled mvccpb.KeyValue. Marshaled KeyValues start
// with the tag of field 1 (the non-empty key), 0x0a; nothing else is
// written today, and another leading byte is reserved for a future
// compressed encoding (wire format, never change).
const kvTag = 0x0a

func encodeKV(kv *mvccpb.KeyValue) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(kv)
	if err != nil {
		panic(fmt.Sprintf("mvcc: marshal KeyValue: %v", err)) // cannot fail for this message
	}
	return b
}

// kvMeta is what opening the store needs of a record: its key (aliasing
// the record's bytes), create revision, version and lease.
type kvMeta struct {
	key                    []byte
	create, version, lease int64
}

// decodeKVMeta reads a record's kvMeta without unmarshaling (and copying)
// the value: restore reads every record, and most of a record is its value.
func decodeKVMeta(b []byte) (kvMeta, error) {
	var m kvMeta
	if len(b) == 0 || b[0] != kvTag {
		return m, fmt.Errorf("unknown value encoding")
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return m, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			m.key, n = protowire.ConsumeBytes(b)
		case (num == 2 || num == 4 || num == 6) && typ == protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			switch num {
			case 2:
				m.create = int64(v)
			case 4:
				m.version = int64(v)
			default:
				m.lease = int64(v)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return m, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return m, nil
}

func decodeKV(b []byte, kv *mvccpb.KeyValue) error {
	kv.Reset()
	if len(b) == 0 || b[0] != kvTag {
		return fmt.Errorf("unknown value encoding")
	}
	return proto.UnmarshalOptions{Merge: true}.Unmarshal(b, kv)
}
