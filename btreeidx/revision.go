package btreeidx

import (
	"errors"
	"fmt"
)

// Revision identifies one change in the store: Main is the store revision of
// the write transaction (etcd's mod_revision), Sub orders the changes inside
// that transaction (0 for its first put or delete, 1 for the next, ...).
// Revisions order by Main, then Sub.
type Revision struct {
	Main int64
	Sub  int64
}

// Compare returns -1, 0 or +1 as a sorts before, equal to, or after b.
func (a Revision) Compare(b Revision) int {
	switch {
	case a.Main < b.Main:
		return -1
	case a.Main > b.Main:
		return 1
	case a.Sub < b.Sub:
		return -1
	case a.Sub > b.Sub:
		return 1
	}
	return 0
}

// GreaterThan reports whether a sorts after b.
func (a Revision) GreaterThan(b Revision) bool { return a.Compare(b) > 0 }

func (a Revision) String() string { return fmt.Sprintf("%d.%d", a.Main, a.Sub) }

var (
	// ErrRevisionNotFound: the key has no live version at the requested
	// revision, or a delete found no live key to delete.
	ErrRevisionNotFound = errors.New("btreeidx: revision not found")
	// ErrStaleRevision: a write carried a revision that is not greater than
	// the key's last modification. The index is fed in revision order by
	// one apply goroutine, so this is a caller bug; the write is refused and
	// the index is left unchanged.
	ErrStaleRevision = errors.New("btreeidx: revision not greater than the key's last modification")
)
