package mvcc

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/strata-db/strata/pagestore"
)

// Offline helpers for tools that write a page store with no server
// running (stratautl snapshot restore, export-etcd).

// SetConsistentIndex overwrites the consistent index and term in tx, as
// etcdutl's restore does when it gives a snapshot a new raft log.
func SetConsistentIndex(tx *pagestore.Tx, index, term uint64) error {
	meta, err := tx.CreateBucketIfNotExists(MetaBucket)
	if err != nil {
		return err
	}
	if err := meta.Put(metaConsistentIndex, u64bytes(index)); err != nil {
		return err
	}
	return meta.Put(metaTerm, u64bytes(term))
}

// ReadConsistentIndex returns the consistent index and term stored in tx
// (zero when absent, the meta bucket included: nothing was applied).
func ReadConsistentIndex(tx *pagestore.Tx) (index, term uint64, err error) {
	meta, err := tx.Bucket(MetaBucket)
	if errors.Is(err, pagestore.ErrBucketNotFound) {
		return 0, 0, nil
	} else if err != nil {
		return 0, 0, err
	}
	for _, f := range []struct {
		key []byte
		dst *uint64
	}{{metaConsistentIndex, &index}, {metaTerm, &term}} {
		v, err := meta.Get(f.key)
		if err != nil {
			return 0, 0, err
		}
		switch len(v) {
		case 0:
		case 8:
			*f.dst = binary.BigEndian.Uint64(v)
		default:
			return 0, 0, fmt.Errorf("%w: meta %s is %d bytes, want 8", pagestore.ErrCorrupt, f.key, len(v))
		}
	}
	return index, term, nil
}
