package transport

import (
	"context"
	"io"
	"net/http"
	"sync"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Raft is the member's raft node as the transport sees it.
//
// Process is called from HTTP handler goroutines and from one goroutine
// per peer stream, concurrently; it may block (a proposal waiting for a
// leader), which holds up only the stream or request it came from.
// ReportUnreachable and ReportSnapshot are always called from the
// transport's reporter goroutine, never from Send, so they may block on
// the raft goroutine without deadlocking it.
type Raft interface {
	// Process steps a message received from a peer. An error that is a
	// *RefusedError is answered with its status (etcd answers 403 for a
	// message from a removed member); any other error fails the request
	// with 500.
	Process(ctx context.Context, m *raftpb.Message) error
	// IsIDRemoved reports whether id was removed from the cluster; its
	// streams are refused with 410, and it learns it was removed.
	IsIDRemoved(id uint64) bool
	// ReportUnreachable tells raft that a message to id was lost.
	ReportUnreachable(id uint64)
	// ReportSnapshot tells raft how sending a MsgSnap to id ended.
	ReportSnapshot(id uint64, status etcdraft.SnapshotStatus)
}

// Offerer is what a Raft may also implement so the stream readers can hand
// it a message directly, without the hop through a queue and its
// goroutine (two goroutine switches on every replication round trip).
// Offer must not block: it steps m if raft can take it at once and
// returns false otherwise, and the reader then queues m as usual. Its
// error, like Process's, is logged.
type Offerer interface {
	Offer(m *raftpb.Message) (taken bool, err error)
}

// RefusedError is what Raft.Process returns to refuse a message with a
// status other than 500. etcd refuses messages from removed members with
// 403 "cannot process message from removed member", which the sending
// member takes as its removal.
type RefusedError struct {
	Code    int
	Message string
}

func (e *RefusedError) Error() string { return "transport: refused: " + e.Message }

func (e *RefusedError) writeTo(w http.ResponseWriter) { http.Error(w, e.Message, e.Code) }

// Snapshots connects the transport to the server's state images: what
// follows a MsgSnap on the wire. A transport without one sends MsgSnap
// alone through the pipeline (as etcd's Transport.Send does) and refuses
// incoming snapshots.
type Snapshots interface {
	// Open returns the image to send after MsgSnap m to peer, and its
	// exact size in bytes. It is called from the snapshot sender's
	// goroutine, never from Send, and the transport closes the reader. A
	// reader that yields more or fewer bytes than size fails the send.
	// peer says whether the receiver is Strata: an etcd member expects a
	// bbolt db, a Strata member a page-store image; the transport moves
	// the bytes and does not look at them.
	Open(m *raftpb.Message, peer PeerInfo) (rc io.ReadCloser, size int64, err error)
	// ReceivePath names the file that an image received with MsgSnap m
	// becomes. The transport writes the image to a temporary file in the
	// same directory, fsyncs it, renames it to this path, fsyncs the
	// directory, and only then passes m to Raft.Process, so when raft
	// sees the MsgSnap the image is durable at ReceivePath(m).
	ReceivePath(m *raftpb.Message) (string, error)
}

// PeerInfo is what the transport has learned about a peer from its
// headers.
type PeerInfo struct {
	ID uint64
	// ServerVersion is the X-Server-Version the peer last sent ("" until
	// it has sent one). Strata sends etcd's version (version.Etcd).
	ServerVersion string
	// Strata is true once the peer has announced Strata features; an
	// etcd member never does.
	Strata bool
	// Features are the Strata features the peer announced.
	Features string
}

// reporter delivers unreachable and snapshot reports to Raft from its own
// goroutine. Reports are coalesced per peer (raft needs to hear "lost
// messages to id" once, and tracks one pending snapshot per follower), so
// the pending set is bounded by the number of peers and queuing a report
// never blocks.
type reporter struct {
	raft Raft

	mu          sync.Mutex // guards unreachable and snapshots
	unreachable map[uint64]bool
	snapshots   map[uint64]etcdraft.SnapshotStatus

	kick chan struct{} // capacity 1: "there is something pending"
	stop chan struct{}
	done chan struct{}
}

func newReporter(r Raft) *reporter {
	rp := &reporter{
		raft:        r,
		unreachable: map[uint64]bool{},
		snapshots:   map[uint64]etcdraft.SnapshotStatus{},
		kick:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
	}
	go rp.run()
	return rp
}

func (rp *reporter) reportUnreachable(id uint64) {
	rp.mu.Lock()
	rp.unreachable[id] = true
	rp.mu.Unlock()
	rp.signal()
}

func (rp *reporter) reportSnapshot(id uint64, st etcdraft.SnapshotStatus) {
	rp.mu.Lock()
	rp.snapshots[id] = st
	rp.mu.Unlock()
	rp.signal()
}

func (rp *reporter) signal() {
	select {
	case rp.kick <- struct{}{}:
	default:
	}
}

func (rp *reporter) run() {
	defer close(rp.done)
	for {
		select {
		case <-rp.stop:
			return
		case <-rp.kick:
		}
		rp.mu.Lock()
		unreachable, snapshots := rp.unreachable, rp.snapshots
		rp.unreachable, rp.snapshots = map[uint64]bool{}, map[uint64]etcdraft.SnapshotStatus{}
		rp.mu.Unlock()
		for id := range unreachable {
			rp.raft.ReportUnreachable(id)
		}
		for id, st := range snapshots {
			rp.raft.ReportSnapshot(id, st)
		}
	}
}

func (rp *reporter) close() {
	close(rp.stop)
	<-rp.done
}
