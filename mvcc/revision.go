package mvcc

import (
	"encoding/binary"
	"fmt"

	"github.com/strata-db/strata/btreeidx"
	"github.com/strata-db/strata/schema"
)

// Revision is a (main, sub) revision: main is the store revision of a
// write transaction, sub orders the changes inside it.
type Revision = btreeidx.Revision

// Revision keys in the "key" bucket use etcd's layout, so that snapshots
// can be exported to and imported from etcd without re-keying (wire
// format, never change):
//
//	main (8 bytes, big-endian) | '_' | sub (8 bytes, big-endian) [| 't']
//
// The trailing 't' marks a tombstone (the record of a delete). Keys sort
// by revision, and a tombstone sorts right after a put at the same
// revision, which never exists.
const (
	revKeyLen       = 17
	markedRevKeyLen = 18
	tombstoneMark   = 't'
)

func appendRevKey(dst []byte, rev Revision, tombstone bool) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(rev.Main))
	dst = append(dst, '_')
	dst = binary.BigEndian.AppendUint64(dst, uint64(rev.Sub))
	if tombstone {
		dst = append(dst, tombstoneMark)
	}
	return dst
}

func revKey(rev Revision, tombstone bool) []byte {
	return appendRevKey(make([]byte, 0, markedRevKeyLen), rev, tombstone)
}

// parseRevKey decodes a revision key.
func parseRevKey(k []byte) (Revision, bool, error) {
	if (len(k) != revKeyLen && len(k) != markedRevKeyLen) || k[8] != '_' {
		return Revision{}, false, fmt.Errorf("mvcc: malformed revision key %x", k)
	}
	rev := Revision{Main: int64(binary.BigEndian.Uint64(k)), Sub: int64(binary.BigEndian.Uint64(k[9:]))}
	if len(k) == markedRevKeyLen {
		if k[16+1] != tombstoneMark {
			return Revision{}, false, fmt.Errorf("mvcc: malformed revision key %x", k)
		}
		return rev, true, nil
	}
	return rev, false, nil
}

// Bucket names and meta keys, as etcd names them (package schema).
var (
	KeyBucket  = schema.Key
	MetaBucket = schema.Meta
	// RevMetaBucket is Strata's own (revmeta.go).
	RevMetaBucket = schema.RevMeta

	metaConsistentIndex  = schema.MetaConsistentIndex
	metaTerm             = schema.MetaTerm
	metaScheduledCompact = schema.MetaScheduledCompactRev
	metaFinishedCompact  = schema.MetaFinishedCompactRev
)

func u64bytes(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
