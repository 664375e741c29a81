package raft

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// The leader's side of a snapshot: a raft snapshot at index i goes to a
// follower with an image of the state machine that holds exactly the
// effects of the entries up to i, no more and no fewer. Exactly, because
// the follower records the snapshot marker i in its WAL and then makes the
// image its state: an image past i would be a state machine ahead of the
// WAL (refused at start-up), an image before i would skip entries.
//
// The state machine's durable state moves on independently of raft's
// snapshots (the page store commits in batches), so the leader does not
// look for an image matching a snapshot; it makes a snapshot matching an
// image. When raft asks for a snapshot to send (Storage.Snapshot), the node
// returns the in-memory snapshot only if it has an image at that index;
// otherwise it answers ErrSnapshotTemporarilyUnavailable (raft retries on
// the follower's next response) and prepares one in the background: it
// asks the state machine for an image (StateMachine.Image: a consistent
// read view of what it made durable, which reports its own consistent
// index X), and cuts the in-memory snapshot at X, with the membership as of
// X. The image is held (a read view, so it pins pages but blocks no
// writer) until a newer one replaces it or it has been unused for
// imageIdle.

// Image is a consistent, read-only view of the state machine's durable
// state, produced by StateMachine.Image on the leader.
type Image interface {
	// Index is the consistent index the image holds: it reflects exactly
	// the entries up to Index.
	Index() uint64
	// Size is the number of bytes WriteTo writes.
	Size() int64
	// WriteTo writes the image (the page-store file a follower installs).
	// It may run several times, concurrently, until Close.
	WriteTo(w io.Writer) (int64, error)
	// Close releases the view. Called once, after every WriteTo returned.
	Close() error
}

// Transport carries raft messages to peers. A single member has none.
// Neither method may block the raft goroutine: a message that cannot be
// queued is dropped and the peer reported unreachable (ReportUnreachable).
type Transport interface {
	// Send sends messages other than MsgSnap.
	Send(msgs []*raftpb.Message)
	// SendSnapshot sends a MsgSnap with its payload. The transport owns
	// s.Payload: it must Close it exactly once, whether or not the send
	// succeeded, and report the outcome with Node.ReportSnapshot.
	SendSnapshot(s OutgoingSnapshot)
}

// OutgoingSnapshot is a MsgSnap and the state-machine image it carries.
type OutgoingSnapshot struct {
	Message *raftpb.Message
	// Size is the payload's length in bytes.
	Size int64
	// Payload streams exactly Size bytes of the image. Close releases
	// the image's read view.
	Payload io.ReadCloser
	// Image is the image Payload streams, valid until Payload is closed:
	// a transport that must send the state in another format (to an etcd
	// follower) reads it from there.
	Image Image
}

// imageIdle is how long a prepared image is kept without a sender using
// it. It pins the page store's pages as of its read view, so it must not
// be held forever; a lagging follower that needs it again later gets a
// fresh one.
const imageIdle = 30 * time.Second

// heldImage is an Image with a reference count: one for being the node's
// current image, one per pinned MsgSnap (see snapStorage.Snapshot) and
// one per open payload. The image is closed when the count drops to zero.
type heldImage struct {
	img   Image
	index uint64
	refs  atomic.Int64
	idle  *time.Timer // guarded by images.mu
}

func (h *heldImage) unref() {
	if h.refs.Add(-1) == 0 {
		_ = h.img.Close()
	}
}

// images holds the node's current image and the MsgSnap pins.
type images struct {
	mu  sync.Mutex
	cur *heldImage // nil, or the newest prepared image (holding one ref)
	// pins are images handed to raft by Snapshot and not yet matched
	// with their MsgSnap in a Ready. Raft goroutine only.
	pins []*heldImage

	preparing atomic.Bool
}

// setCurrent makes h the current image, dropping the previous one.
func (im *images) setCurrent(h *heldImage) {
	h.refs.Add(1)
	im.mu.Lock()
	old := im.cur
	im.cur = h
	im.armIdleLocked(h)
	im.mu.Unlock()
	if old != nil {
		old.idle.Stop()
		old.unref()
	}
}

// armIdleLocked (re)starts h's idle timer. Called with mu held.
func (im *images) armIdleLocked(h *heldImage) {
	if h.idle != nil {
		h.idle.Reset(imageIdle)
		return
	}
	h.idle = time.AfterFunc(imageIdle, func() {
		im.mu.Lock()
		if im.cur != h {
			im.mu.Unlock()
			return
		}
		im.cur = nil
		im.mu.Unlock()
		h.unref()
	})
}

// current returns the current image with a new reference, if it is at
// index.
func (im *images) current(index uint64) *heldImage {
	im.mu.Lock()
	defer im.mu.Unlock()
	h := im.cur
	if h == nil || h.index != index {
		return nil
	}
	h.refs.Add(1)
	im.armIdleLocked(h)
	return h
}

// drop releases the current image (the state machine is about to be
// replaced, or the node stops). Open payloads keep their own references.
func (im *images) drop() {
	im.mu.Lock()
	h := im.cur
	im.cur = nil
	im.mu.Unlock()
	if h != nil {
		h.idle.Stop()
		h.unref()
	}
}

// snapStorage is raft's Storage: the node's MemoryStorage, except that a
// snapshot is offered to raft only when a matching image is at hand.
type snapStorage struct {
	*etcdraft.MemoryStorage
	n *Node
}

// Snapshot is called by raft (in the raft goroutine) only to send a
// snapshot to a follower, and raft then always emits the MsgSnap: so the
// image is pinned here and matched with the message in handleReady.
func (s snapStorage) Snapshot() (*raftpb.Snapshot, error) {
	snap, err := s.MemoryStorage.Snapshot()
	if err != nil {
		return nil, err
	}
	n := s.n
	// A snapshot from before a member was added does not name it, and
	// that member refuses it ("not in the ConfState"): a new member of a
	// cluster whose log was compacted would never catch up. So a snapshot
	// is sent only if it names every current member; otherwise a newer
	// one is cut once the state machine has made the change durable (as
	// etcd sends its current applied state with the current membership).
	if namesAll(snap.GetMetadata().GetConfState(), n.confState.Load()) {
		if h := n.images.current(snap.GetMetadata().GetIndex()); h != nil && snap.GetMetadata().GetIndex() > 0 {
			n.images.pins = append(n.images.pins, h)
			return snap, nil
		}
	}
	n.prepareImageAsync()
	return nil, etcdraft.ErrSnapshotTemporarilyUnavailable
}

// namesAll reports whether snapshot membership snap names every voter and
// learner of cur.
func namesAll(snap, cur *raftpb.ConfState) bool {
	in := map[uint64]bool{}
	for _, ids := range [][]uint64{snap.GetVoters(), snap.GetLearners(), snap.GetVotersOutgoing(), snap.GetLearnersNext()} {
		for _, id := range ids {
			in[id] = true
		}
	}
	for _, ids := range [][]uint64{cur.GetVoters(), cur.GetLearners()} {
		for _, id := range ids {
			if !in[id] {
				return false
			}
		}
	}
	return true
}

// prepareImageAsync starts preparing an image unless one is being made.
func (n *Node) prepareImageAsync() {
	if !n.images.preparing.CompareAndSwap(false, true) {
		return
	}
	n.snapWG.Add(1)
	go func() {
		defer n.snapWG.Done()
		defer n.images.preparing.Store(false)
		if err := n.prepareImage(); err != nil {
			n.log.Warn("cannot prepare a snapshot for a follower; will retry when raft asks again", "error", err)
		}
	}()
}

// prepareImage gets an image from the state machine and cuts the
// in-memory raft snapshot at its index.
func (n *Node) prepareImage() error {
	n.snapMu.Lock()
	defer n.snapMu.Unlock()
	select {
	case <-n.done:
		return ErrStopped
	default:
	}
	start := time.Now()
	img, err := n.sm.Image()
	if err != nil {
		return err
	}
	x := img.Index()
	cur, err := n.storage.Snapshot()
	if err != nil {
		img.Close()
		return err
	}
	switch ci := cur.GetMetadata().GetIndex(); {
	case x == ci:
	case x > ci:
		if _, err := n.storage.CreateSnapshot(x, n.confAt(x), nil); err != nil {
			img.Close()
			return fmt.Errorf("raft: cutting the snapshot at the image's index %d: %w", x, err)
		}
	default:
		// A snapshot was installed meanwhile (this member is a
		// follower now); the image is of the old state.
		img.Close()
		return fmt.Errorf("raft: image at %d is older than the snapshot at %d", x, ci)
	}
	h := &heldImage{img: img, index: x}
	n.images.setCurrent(h)
	n.log.Info("prepared a snapshot for a follower", "index", x, "bytes", img.Size(), "took", time.Since(start))
	return nil
}

// ReleaseImage lets go of the image kept for sending snapshots to
// followers (kept for imageIdle after its last use), so that the page
// store can reuse the pages it holds: a defrag calls it first. A snapshot
// being streamed keeps its image until it is sent; a follower that needs
// one later gets a fresh image.
func (n *Node) ReleaseImage() { n.images.drop() }

// sendSnapshots hands each MsgSnap in msgs to the transport with its
// image and returns the other messages, filtered in place (a Ready's
// Messages belong to the caller once raft hands them out). Called from
// the raft goroutine.
func (n *Node) sendSnapshots(msgs []*raftpb.Message) []*raftpb.Message {
	out := msgs[:0]
	for _, m := range msgs {
		if m.GetType() != raftpb.MsgSnap {
			out = append(out, m)
			continue
		}
		h := n.takePin(m.GetSnapshot().GetMetadata().GetIndex())
		if h == nil || n.cfg.Transport == nil {
			// Cannot happen: raft emits a MsgSnap only for a snapshot
			// Storage.Snapshot returned, which pinned its image.
			n.log.Error("a snapshot message has no image; reporting the send failed", "to", fmt.Sprintf("%x", m.GetTo()),
				"index", m.GetSnapshot().GetMetadata().GetIndex())
			if h != nil {
				h.unref()
			}
			to := m.GetTo()
			go n.ReportSnapshot(to, etcdraft.SnapshotFailure)
			continue
		}
		n.cfg.Transport.SendSnapshot(OutgoingSnapshot{Message: m, Size: h.img.Size(), Payload: newImageReader(h), Image: h.img})
	}
	return out
}

// takePin removes and returns the pinned image at index.
func (n *Node) takePin(index uint64) *heldImage {
	pins := n.images.pins
	for i, h := range pins {
		if h.index == index {
			n.images.pins = append(pins[:i], pins[i+1:]...)
			return h
		}
	}
	return nil
}

// imageReader streams a held image through a pipe: WriteTo runs in its
// own goroutine, started by the first Read, so a payload that is never
// read costs no goroutine. It owns one reference on the image.
type imageReader struct {
	h      *heldImage
	once   sync.Once
	pr     *io.PipeReader
	pw     *io.PipeWriter
	done   chan struct{}
	closed atomic.Bool
}

func newImageReader(h *heldImage) *imageReader {
	pr, pw := io.Pipe()
	return &imageReader{h: h, pr: pr, pw: pw, done: make(chan struct{})}
}

func (r *imageReader) start() {
	r.once.Do(func() {
		go func() {
			defer close(r.done)
			_, err := r.h.img.WriteTo(r.pw)
			r.pw.CloseWithError(err) // nil: io.EOF to the reader
		}()
	})
}

func (r *imageReader) Read(p []byte) (int, error) {
	if r.closed.Load() {
		return 0, errImageClosed
	}
	r.start()
	return r.pr.Read(p)
}

// Close stops the stream and releases the image once WriteTo returned.
func (r *imageReader) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.once.Do(func() { close(r.done) }) // never started: nothing to wait for
	r.pr.CloseWithError(errImageClosed) // a running WriteTo fails and returns
	<-r.done
	r.h.unref()
	return nil
}

var errImageClosed = errors.New("raft: snapshot payload closed")
