package mvcc

import (
	"bytes"
	"slices"
)

// DeleteKeys applies the key deletions of a lease revoke: every key of
// keys that is live is deleted, all in one revision, and ci and term are
// recorded with them. Keys that are not live are skipped; if none is, no
// revision is made, and the call only records that entry ci was applied
// (so DeleteKeys(ci, term, nil, nil) is the way to apply a request that
// failed without effect).
//
// also, if not nil, is called inside the same write transaction before it
// ends. The lessor uses it to delete the lease's record from its bucket,
// so the record and the keys leave the page store in one commit together
// with the consistent index: a crash can keep both or neither, and a WAL
// replay of the revoke then finds the state it expects. also must not
// call back into the Store.
//
// Keys are deleted in byte order whatever order they come in, so every
// member assigns the same sub-revisions (and the same hash) to a revoke.
// DeleteKeys returns the store revision after the write. Apply goroutine
// only, like every other write.
func (s *Store) DeleteKeys(ci, term uint64, keys [][]byte, also func(*WriteTx)) int64 {
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, bytes.Compare)
	sorted = slices.CompactFunc(sorted, bytes.Equal)
	t := s.beginWrite()
	// etcd's lessor deletes each attached key with its own DeleteRange in
	// one transaction, and counts each as a delete.
	t.ops.deletes += len(sorted)
	for _, k := range sorted {
		if live, _ := s.index().Range(k, nil, t.readRev()); len(live) == 0 {
			continue
		}
		t.delete(k)
	}
	if also != nil {
		also(t.w)
	}
	rev := t.readRev()
	t.end(ci, term)
	return rev
}
