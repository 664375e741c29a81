package etcdsnap

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
)

// Errors. ErrInvalid means the input cannot be stored in bbolt's format
// (an empty, oversized or out-of-order key, a duplicate bucket); ErrChanged
// means a source gave other records in the second pass than in the first,
// which a source reading one consistent view never does.
var (
	ErrInvalid = errors.New("etcdsnap: input not representable in bbolt's format")
	ErrChanged = errors.New("etcdsnap: the records changed between the two passes")
)

// Records is one pass over a bucket's records in strictly increasing key
// order. The slices Next returns must stay valid and unchanged until the
// snapshot is written (a page-store read transaction's are).
type Records interface {
	// Next returns the next record; ok is false at the end, or on an
	// error, which Err then returns.
	Next() (k, v []byte, ok bool)
	Err() error
}

// Bucket is one bucket of the file to write.
type Bucket struct {
	Name []byte
	// Open starts a pass over the bucket's records. It is called once to
	// plan and once to write, and must give the same records both times.
	Open func() (Records, error)
}

// Snapshot is a bbolt file planned by Plan (pass 1) and ready to be
// written by WriteTo (pass 2).
type Snapshot struct {
	buckets []Bucket
	plans   []treePlan // per bucket
	root    treePlan   // the tree of buckets
	hwm     uint64     // pages in the file
	sum     []byte     // the SHA-256 of the file, once written
}

// Plan reads every bucket's records once and lays out the file: the
// leaves of each tree (see leafPacker), their branch levels, their page
// ids, and which buckets are inline. buckets must be in strictly
// increasing name order. Its memory is the plans (a few words per bucket
// and per branch level) and the records of inline buckets (at most a
// quarter page each).
func Plan(ctx context.Context, buckets []Bucket) (*Snapshot, error) {
	s := &Snapshot{buckets: buckets, plans: make([]treePlan, len(buckets))}
	for i, b := range buckets {
		what := fmt.Sprintf("bucket %q", b.Name)
		if i > 0 && bytes.Compare(buckets[i-1].Name, b.Name) >= 0 {
			return nil, fmt.Errorf("%w: %s does not follow bucket %q in order", ErrInvalid, what, buckets[i-1].Name)
		}
		recs, err := b.Open()
		if err != nil {
			return nil, fmt.Errorf("etcdsnap: %s: %w", what, err)
		}
		p := newPlanner(true)
		for {
			k, v, ok := recs.Next()
			if !ok {
				break
			}
			if err := p.add(what, k, v, 0); err != nil {
				return nil, err
			}
			if err := checkContext(ctx, p.t.records); err != nil {
				return nil, err
			}
		}
		if err := recs.Err(); err != nil {
			return nil, fmt.Errorf("etcdsnap: %s: %w", what, err)
		}
		s.plans[i] = p.finish()
	}
	// The tree of buckets: bucket name -> bucket header (and inline
	// page). Its values' sizes are known now, so it is planned without
	// page ids, which do not change sizes.
	rp := newPlanner(false)
	for i, b := range s.buckets {
		if err := rp.add("the bucket tree", b.Name, make([]byte, s.bucketValueSize(i)), bucketLeafFlag); err != nil {
			return nil, err
		}
	}
	s.root = rp.finish()
	// Page ids: the fixed pages, the bucket tree, then each bucket that
	// is not inline, in name order.
	s.root.first = pgidFirst
	next := s.root.first + uint64(s.root.pages)
	for i := range s.plans {
		if s.plans[i].inline == nil {
			s.plans[i].first = next
			next += uint64(s.plans[i].pages)
		}
	}
	s.hwm = next
	return s, nil
}

func (s *Snapshot) bucketValueSize(i int) int {
	if v := s.plans[i].inline; v != nil {
		return len(v)
	}
	return bucketHeaderSize
}

// bucketValue is bucket i's value in the bucket tree.
func (s *Snapshot) bucketValue(i int) []byte {
	if v := s.plans[i].inline; v != nil {
		return v
	}
	v := make([]byte, bucketHeaderSize)
	le.PutUint64(v, s.plans[i].root())
	return v
}

// Size is the size of the database file, without the trailer.
func (s *Snapshot) Size() int64 { return int64(s.hwm) * PageSize }

// StreamSize is what WriteTo writes: the file and its SHA-256.
func (s *Snapshot) StreamSize() int64 { return s.Size() + sha256.Size }

// WriteTo writes the file (pass 2), reading every bucket again, followed
// by the SHA-256 of the file, as etcd's snapshot stream ends (etcdutl
// snapshot restore checks it). It writes StreamSize bytes, in page order,
// through a small buffer.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	return s.Write(context.Background(), w)
}

// Write is WriteTo with a context that stops it.
func (s *Snapshot) Write(ctx context.Context, w io.Writer) (int64, error) {
	h := sha256.New()
	n, err := s.WriteFile(ctx, io.MultiWriter(w, h))
	if err != nil {
		return n, err
	}
	s.sum = h.Sum(nil)
	m, err := w.Write(s.sum)
	return n + int64(m), err
}

// WriteFile writes the file alone (pass 2), without the SHA-256 trailer:
// the database an etcd leader sends a follower after a MsgSnap is the
// bare file. It writes exactly Size bytes.
func (s *Snapshot) WriteFile(ctx context.Context, w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	if err := s.write(ctx, bw); err != nil {
		return cw.n, err
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	if cw.n != s.Size() {
		return cw.n, fmt.Errorf("%w: wrote %d bytes, planned %d", ErrChanged, cw.n, s.Size())
	}
	return cw.n, nil
}

// SHA256 is the SHA-256 of the file (the trailer), once it is written.
func (s *Snapshot) SHA256() []byte { return s.sum }

func (s *Snapshot) write(ctx context.Context, w io.Writer) error {
	e := newEmitter(w)
	rootID := s.root.root()
	for _, id := range []uint64{pgidMeta0, pgidMeta1} {
		if err := e.page(metaPage(id, rootID, s.hwm)); err != nil {
			return err
		}
	}
	if err := e.page(freelistPage()); err != nil {
		return err
	}
	tw := newTreeWriter(e, &s.root, "the bucket tree")
	for i, b := range s.buckets {
		if err := tw.add(b.Name, s.bucketValue(i), bucketLeafFlag); err != nil {
			return err
		}
	}
	if err := tw.finish(); err != nil {
		return err
	}
	for i, b := range s.buckets {
		if s.plans[i].inline != nil {
			continue
		}
		recs, err := b.Open()
		if err != nil {
			return fmt.Errorf("etcdsnap: bucket %q: %w", b.Name, err)
		}
		if err := writeTree(ctx, e, &s.plans[i], fmt.Sprintf("bucket %q", b.Name), recs); err != nil {
			return err
		}
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
