package mvcc

import (
	"fmt"
	"io"
	"sync"

	"github.com/strata-db/strata/pagestore"
)

// Image is a consistent copy-on-write view of the page store, as a leader
// sends it to a follower that needs a snapshot (raft.Image): one
// page-store read transaction, so writers go on while it is streamed, and
// the consistent index that transaction itself holds, so the image
// reflects exactly the entries up to Index.
type Image struct {
	tx    *pagestore.Tx
	index uint64
	// viewMu serializes View: a read transaction caches the buckets it
	// opens, so only one caller may open buckets at a time. WriteTo
	// copies pages and opens none.
	viewMu sync.Mutex
}

// View runs fn with the image's read transaction, one caller at a time
// (an etcd-format copy of the image for an etcd follower reads its
// buckets through it). fn must not keep tx.
func (i *Image) View(fn func(tx *pagestore.Tx) error) error {
	i.viewMu.Lock()
	defer i.viewMu.Unlock()
	return fn(i.tx)
}

// Image commits what the WAL holds (ForceCommit) and opens an image of
// the committed state. Close it when done.
func (b *Backend) Image() (*Image, error) {
	if err := b.ForceCommit(); err != nil {
		return nil, err
	}
	tx, err := b.DB().Begin(false)
	if err != nil {
		return nil, err
	}
	// Read from the transaction, not committedCI: a commit may land
	// between the two.
	idx, _, err := ReadConsistentIndex(tx)
	if err != nil {
		tx.Rollback()
		return nil, err
	}
	return &Image{tx: tx, index: idx}, nil
}

// Index is the consistent index the image holds.
func (i *Image) Index() uint64 { return i.index }

// Size is the number of bytes WriteTo writes.
func (i *Image) Size() int64 { return i.tx.Size() }

// WriteTo writes the page-store file. Several may run at once.
func (i *Image) WriteTo(w io.Writer) (int64, error) { return i.tx.WriteTo(w) }

// Close ends the read transaction.
func (i *Image) Close() error { return i.tx.Rollback() }

// ImageIndex checks every page of a received page-store image (read-only),
// checks that it is a Strata state, and returns the consistent index it
// holds. A damaged image is refused with pagestore.ErrCorrupt, naming the
// file and the offsets.
func ImageIndex(path string) (uint64, error) {
	// Every page is checked first: an image with a damaged page must not
	// become the member's state, where the damage would surface only when
	// a read reached that page.
	rep, err := pagestore.CheckFile(path, nil)
	if err != nil {
		return 0, err
	}
	if err := rep.Err(); err != nil {
		return 0, err
	}
	db, err := pagestore.Open(path, &pagestore.Options{ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var idx uint64
	err = db.View(func(tx *pagestore.Tx) error {
		for _, name := range [][]byte{KeyBucket, MetaBucket} {
			if _, err := tx.Bucket(name); err != nil {
				return fmt.Errorf("mvcc: %s is not a Strata page store with data: %w", path, err)
			}
		}
		var err error
		idx, _, err = ReadConsistentIndex(tx)
		return err
	})
	return idx, err
}
