package mvcc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// view reads the store at a fixed current revision: from a read-only
// request, or inside a write transaction (which also sees its own
// uncommitted records in the backend's current batch).
type view struct {
	s   *Store
	rev int64    // the store revision this view reads at by default
	w   *WriteTx // set inside a write transaction
	rd  *ReadTx  // opened on first use
	err error
	// ops counts the view's operations for the store's metrics; close
	// reports them.
	ops opCounts
}

func (v *view) readTx() (*ReadTx, error) {
	if v.rd == nil && v.err == nil {
		v.rd, v.err = v.s.be.BeginRead()
	}
	return v.rd, v.err
}

// close ends the view: it releases the read transaction and reports the
// operations to the metrics as one store transaction.
func (v *view) close() {
	if v.rd != nil {
		v.rd.Close()
		v.rd = nil
	}
	v.s.metrics.report(&v.ops)
}

// value returns the stored KeyValue of a put at rev.
func (v *view) value(rev Revision) (*mvccpb.KeyValue, error) {
	raw, err := v.stored(rev)
	if err != nil {
		return nil, err
	}
	kv := &mvccpb.KeyValue{}
	if err := decodeKV(raw, kv); err != nil {
		return nil, fmt.Errorf("mvcc: value of revision %v: %w", rev, err)
	}
	return kv, nil
}

// stored returns the encoded KeyValue of a put at rev, valid until the
// view closes.
func (v *view) stored(rev Revision) ([]byte, error) {
	raw, _, err := v.storedBuf(rev, nil)
	return raw, err
}

// storedBuf is stored for a caller that copies each value before reading
// the next: a value the page store keeps compressed is decoded into buf
// and is valid only until buf is used again (with a nil buf, into memory
// of its own). It returns the buffer to pass next time.
func (v *view) storedBuf(rev Revision, buf []byte) (raw, next []byte, err error) {
	next = buf
	if v.w != nil {
		raw = v.w.findCurrent(rev)
	}
	if raw == nil {
		rd, err := v.readTx()
		if err != nil {
			return nil, buf, err
		}
		if raw, next, err = rd.GetRevisionBuf(rev, buf); err != nil {
			return nil, next, err
		}
	}
	if raw == nil {
		return nil, next, fmt.Errorf("mvcc: revision %v is in the index but not in the store", rev)
	}
	if len(raw) == 0 || raw[0] != kvTag {
		return nil, next, fmt.Errorf("mvcc: value of revision %v: unknown value encoding", rev)
	}
	return raw, next, nil
}

// rangeResult is what a range over the index and values yields.
type rangeResult struct {
	kvs   []*mvccpb.KeyValue
	count int
	rev   int64
}

// readRev resolves the revision a range asks for (0: the view's) and
// checks that the view can read it: not in the future, not compacted.
func (v *view) readRev(atRev int64) (int64, error) {
	if atRev > v.rev {
		return 0, ErrFutureRev
	}
	if atRev <= 0 {
		atRev = v.rev
	}
	if atRev < v.s.compactRev.Load() {
		return 0, ErrCompacted
	}
	return atRev, nil
}

// rangeKeys reads [key, end) at atRev (0: the view's revision), at most
// limit keys if limit > 0, counting every key in range when withTotal.
func (v *view) rangeKeys(key, end []byte, atRev, limit int64, what rangeWhat, withTotal bool) (*rangeResult, error) {
	v.ops.ranges++
	cur := v.rev
	atRev, err := v.readRev(atRev)
	switch {
	case errors.Is(err, ErrFutureRev):
		return &rangeResult{count: -1, rev: cur}, err
	case err != nil:
		return &rangeResult{count: -1}, err
	}
	switch what {
	case readCount:
		return &rangeResult{count: v.s.index().CountRevisions(key, end, atRev, 0), rev: cur}, nil
	case readKeys:
		keys, total := v.s.index().Keys(key, end, atRev, int(limit), withTotal, nil)
		res := &rangeResult{count: total, rev: cur, kvs: make([]*mvccpb.KeyValue, len(keys))}
		for i, k := range keys {
			res.kvs[i] = &mvccpb.KeyValue{Key: k.Key, CreateRevision: k.Created.Main, ModRevision: k.Modified.Main, Version: k.Version}
		}
		return res, nil
	}
	revs, total := v.s.index().Revisions(key, end, atRev, int(limit), withTotal)
	res := &rangeResult{count: total, rev: cur, kvs: make([]*mvccpb.KeyValue, 0, len(revs))}
	for _, r := range revs {
		kv, err := v.value(r)
		if err != nil {
			return nil, err
		}
		res.kvs = append(res.kvs, kv)
	}
	return res, nil
}

// txnWrite is one write transaction: every change gets the main revision
// rev+1 and a sub-revision in order. Apply goroutine only.
type txnWrite struct {
	view
	beginRev int64
	changes  []*mvccpb.KeyValue
	events   []Event
	// The first change and event live here: most writes make one.
	changes1 [1]*mvccpb.KeyValue
	events1  [1]Event
}

func (s *Store) beginWrite() *txnWrite {
	rev := s.rev.Load()
	t := &txnWrite{beginRev: rev}
	t.view = view{s: s, rev: rev, w: s.be.BeginWrite()}
	t.changes, t.events = t.changes1[:0], t.events1[:0]
	return t
}

// readRev is the revision reads inside the transaction see: its own
// changes count as the next revision.
func (t *txnWrite) readRev() int64 {
	if len(t.changes) > 0 {
		return t.beginRev + 1
	}
	return t.beginRev
}

func (t *txnWrite) rangeKeys(key, end []byte, atRev, limit int64, what rangeWhat, withTotal bool) (*rangeResult, error) {
	t.view.rev = t.readRev()
	return t.view.rangeKeys(key, end, atRev, limit, what, withTotal)
}

func (t *txnWrite) put(key, value []byte, lease int64) int64 {
	s := t.s
	t.ops.puts++
	t.ops.putSize += int64(len(key) + len(value))
	rev := t.beginRev + 1
	idxRev := Revision{Main: rev, Sub: int64(len(t.changes))}
	c, v, oldLease, existed, err := s.index().PutPrior(key, idxRev, lease)
	if err != nil {
		panic(fmt.Sprintf("mvcc: index put %q at %v: %v", key, idxRev, err)) // revisions only ascend
	}
	created, ver := rev, int64(0)
	if existed {
		created, ver = c.Main, v
	}
	kv := &mvccpb.KeyValue{Key: key, Value: value, CreateRevision: created, ModRevision: rev, Version: divergedVersion(key, ver), Lease: lease}
	t.putRecord(idxRev, false, kv)
	t.changes = append(t.changes, kv)
	t.events = append(t.events, Event{Type: mvccpb.Event_PUT, KV: kv})
	if oldLease != lease {
		if oldLease != 0 && s.leases != nil {
			s.leases.Detach(oldLease, key)
		}
		if lease != 0 && s.leases != nil {
			s.leases.Attach(lease, key)
		}
	}
	return rev
}

// putRecord writes kv's record at rev, with its revision metadata and
// its sum.
func (t *txnWrite) putRecord(rev Revision, tomb bool, kv *mvccpb.KeyValue) {
	rec := encodeKV(kv)
	sum := t.s.sums.add(rev, tomb, rec)
	meta := appendRevMeta(make([]byte, 0, 4+4*binary.MaxVarintLen64+len(kv.Key)), sum, kv.Key, kv.CreateRevision, kv.Version, kv.Lease)
	t.w.PutKeyRecord(rev, tomb, rec, meta)
}

func (t *txnWrite) deleteRange(key, end []byte) int64 {
	t.ops.deletes++
	keys, _ := t.s.index().Range(key, end, t.readRev())
	for _, k := range keys {
		t.delete(k)
	}
	return int64(len(keys))
}

func (t *txnWrite) delete(key []byte) {
	s := t.s
	rev := t.beginRev + 1
	idxRev := Revision{Main: rev, Sub: int64(len(t.changes))}
	kv := &mvccpb.KeyValue{Key: key}
	t.putRecord(idxRev, true, kv)
	lease := s.index().Lease(key)
	if err := s.index().Tombstone(key, idxRev); err != nil {
		panic(fmt.Sprintf("mvcc: index tombstone %q at %v: %v", key, idxRev, err))
	}
	t.changes = append(t.changes, kv)
	t.events = append(t.events, Event{Type: mvccpb.Event_DELETE, KV: &mvccpb.KeyValue{Key: key, ModRevision: rev}})
	if lease != 0 && s.leases != nil {
		s.leases.Detach(lease, key)
	}
}

// end publishes the transaction: records to readers first, then the new
// revision, then the events. ci and term are the raft index and term of
// the request being applied.
func (t *txnWrite) end(ci, term uint64) {
	t.view.close()
	t.w.End(ci, term)
	if len(t.changes) > 0 {
		rev := t.beginRev + 1
		t.s.rev.Store(rev)
		t.s.noteWrites(len(t.changes))
		if t.s.events != nil {
			t.s.events(rev, t.events)
		}
	}
}

// findCurrent returns the value of rev if the apply goroutine's current
// batch holds it (a record written earlier in this transaction or batch).
func (w *WriteTx) findCurrent(rev Revision) []byte {
	recs := w.b.cur.keyRecs
	if len(recs) == 0 || recs[0].rev.Compare(rev) > 0 {
		return nil
	}
	i := sort.Search(len(recs), func(i int) bool { return recs[i].rev.Compare(rev) >= 0 })
	if i < len(recs) && recs[i].rev == rev && !recs[i].tombstone {
		return recs[i].value
	}
	return nil
}
