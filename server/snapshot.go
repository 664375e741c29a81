package server

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/strata-db/strata/etcdsnap"
	"github.com/strata-db/strata/pagestore"
)

// Maintenance.Snapshot streams a consistent copy of the data, from one
// page-store read transaction begun after the pending batch is committed,
// while the server keeps serving (the transaction only pins the pages it
// sees). Two formats:
//
//   - etcd's snapshot.db (the default): what etcd's Snapshot streams, so
//     'etcdctl snapshot save' writes a file that 'etcdutl snapshot status'
//     and 'etcdutl snapshot restore' (and 'stratautl snapshot restore')
//     take. Package etcdsnap writes it in two passes over the transaction,
//     straight into the stream: nothing is staged on disk, and memory does
//     not grow with the database.
//   - Strata's page-store image, when the request carries the gRPC
//     metadata SnapshotFormatKey: "strata" (opt-in): a page copy, faster,
//     which only 'stratautl snapshot restore' reads.
//
// Either way the stream is the database in 32 KiB messages whose
// RemainingBytes count down to 0, then one message holding its SHA-256,
// as etcd sends it; the file is a whole number of pages plus 32 bytes.
// As etcd's, the messages carry no response header (the gateway's lines
// start {"result":{"blob":...), only the storage version.

// SnapshotFormatKey is the request metadata that selects the snapshot
// format: "etcd" (the default) or "strata".
const SnapshotFormatKey = "strata-snapshot-format"

// snapshotChunk is the size of each streamed piece, as etcd sends.
const snapshotChunk = 32 * 1024

func (m *maintenanceServer) Snapshot(r *pb.SnapshotRequest, srv pb.Maintenance_SnapshotServer) error {
	s := m.s
	ctx := srv.Context()
	if err := s.checkAdmin(ctx); err != nil {
		return err
	}
	format := "etcd"
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(SnapshotFormatKey); len(v) > 0 {
			format = v[0]
		}
	}
	if format != "etcd" && format != "strata" {
		return status.Errorf(codes.InvalidArgument, "server: snapshot format (metadata %s) must be etcd or strata, not %q", SnapshotFormatKey, format)
	}
	if err := s.be.ForceCommit(); err != nil {
		return toGRPCError(err)
	}
	tx, err := s.be.DB().Begin(false)
	if err != nil {
		return toGRPCError(err)
	}
	defer tx.Rollback()
	start := time.Now()
	var size int64
	var produce func(ctx context.Context, w io.Writer) error
	if format == "strata" {
		size = tx.Size()
		produce = func(_ context.Context, w io.Writer) error { return writeStrataImage(tx, w) }
	} else {
		e, err := etcdsnap.PlanEtcd(ctx, tx, etcdsnap.EtcdOptions{})
		if err != nil {
			s.lg.Warn("failed to plan database snapshot", "error", err, "took", time.Since(start))
			return toGRPCError(err)
		}
		size = e.Size()
		s.lg.Info("sending database snapshot to client", "format", format, "total-bytes", size,
			"raft-index", e.RaftIndex, "skipped-buckets", e.Skipped, "planned-in", time.Since(start))
		produce = func(ctx context.Context, w io.Writer) error { _, err := e.Write(ctx, w); return err }
	}
	sent, err := streamSnapshot(ctx, srv, size, s.versions.Storage(), produce)
	if err != nil {
		s.lg.Warn("failed to send database snapshot", "format", format, "sent-bytes", sent, "error", err,
			"took", time.Since(start))
		return toGRPCError(err)
	}
	took := time.Since(start)
	s.metrics.backendSnapshot.Observe(took.Seconds())
	s.lg.Info("successfully sent database snapshot to client", "format", format, "total-bytes", size,
		"took", took, "bytes-per-second", int64(float64(size)/max(took.Seconds(), 1e-9)))
	return nil
}

// snapshotQueue is how many messages the producer may run ahead of the
// stream: producing (reading pages, laying out, hashing) and sending
// overlap, as etcd's pipe from bbolt's WriteTo does, within 8 x 32 KiB.
const snapshotQueue = 8

// streamSnapshot runs produce in its own goroutine and sends what it
// writes: the first size bytes (the database) in snapshotChunk messages
// whose RemainingBytes count down to 0, then the rest (the SHA-256) as
// one last message, each with version (the storage version, as etcd
// sends). It returns when produce has returned, so the read transaction
// produce reads may be closed then.
func streamSnapshot(ctx context.Context, srv pb.Maintenance_SnapshotServer, size int64, version string,
	produce func(ctx context.Context, w io.Writer) error) (sent int64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := make(chan []byte, snapshotQueue)
	free := make(chan []byte, snapshotQueue+2)
	produced := make(chan error, 1)
	go func() {
		c := &snapshotChunker{ctx: ctx, out: chunks, free: free, size: size}
		err := produce(ctx, c)
		if err == nil {
			err = c.flush()
		}
		close(chunks)
		produced <- err
	}()
	var sendErr error
	for b := range chunks {
		if sendErr != nil {
			continue // drain until the producer sees the cancel
		}
		sent += int64(len(b))
		sendErr = srv.Send(&pb.SnapshotResponse{RemainingBytes: uint64(max(0, size-sent)),
			Blob: b, Version: version})
		if sendErr != nil {
			cancel()
		}
		// Send has marshaled the message (a copy) by the time it returns,
		// and this server's stats handler reads only sizes, so the buffer
		// can carry the next message. (grpc-go warns that tracing stats
		// handlers may read a sent message later; one added to the server
		// must not keep Blob, or this must allocate again.)
		select {
		case free <- b[:0]:
		default:
		}
	}
	perr := <-produced
	switch {
	case sendErr != nil:
		return sent, sendErr
	case perr != nil:
		return sent, perr
	case sent != size+sha256.Size:
		return sent, fmt.Errorf("server: snapshot stream of %d bytes, want %d", sent, size+sha256.Size)
	}
	return sent, nil
}

// writeStrataImage streams the page-store image of tx followed by its
// SHA-256.
func writeStrataImage(tx *pagestore.Tx, w io.Writer) error {
	h := sha256.New()
	if _, err := tx.WriteTo(io.MultiWriter(w, h)); err != nil {
		return err
	}
	_, err := w.Write(h.Sum(nil))
	return err
}

// snapshotChunker cuts what it is written into messages for
// streamSnapshot: snapshotChunk bytes each, and one ending at size, so
// that what follows the database (its SHA-256) travels alone. Buffers
// come back from the sender through free, so a stream of any size lives
// in at most snapshotQueue+2 of them.
type snapshotChunker struct {
	ctx  context.Context
	out  chan<- []byte
	free <-chan []byte
	size int64  // bytes of the database
	done int64  // bytes handed to out
	buf  []byte // the open message
}

func (c *snapshotChunker) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if c.buf == nil {
			select {
			case c.buf = <-c.free:
			default:
				c.buf = make([]byte, 0, snapshotChunk)
			}
		}
		limit := int64(snapshotChunk)
		if c.done < c.size {
			limit = min(limit, c.size-c.done)
		}
		k := min(int64(len(p)), limit-int64(len(c.buf)))
		c.buf = append(c.buf, p[:k]...)
		p, n = p[k:], n+int(k)
		if int64(len(c.buf)) == limit {
			if err := c.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// flush hands the open message to the sender.
func (c *snapshotChunker) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	select {
	case c.out <- c.buf:
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	c.done += int64(len(c.buf))
	c.buf = nil
	return nil
}
