package server

import (
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
	tx, err := s.db.Begin(false)
	if err != nil {
		return toGRPCError(err)
	}
	defer tx.Rollback()
	start := time.Now()
	sender := &snapshotSender{srv: srv, header: s.header(0)}
	var werr error
	if format == "strata" {
		sender.size = tx.Size()
		werr = writeStrataImage(tx, sender)
	} else {
		var e *etcdsnap.Etcd
		if e, werr = etcdsnap.PlanEtcd(ctx, tx, etcdsnap.EtcdOptions{}); werr == nil {
			sender.size = e.Size()
			s.lg.Info("sending database snapshot to client", "format", format, "total-bytes", e.Size(),
				"raft-index", e.RaftIndex, "skipped-buckets", e.Skipped)
			_, werr = e.Write(ctx, sender)
		}
	}
	if werr == nil {
		werr = sender.finish()
	}
	if werr != nil {
		s.lg.Warn("failed to send database snapshot", "format", format, "sent-bytes", sender.sent, "error", werr,
			"took", time.Since(start))
		return toGRPCError(werr)
	}
	took := time.Since(start)
	s.lg.Info("successfully sent database snapshot to client", "format", format, "total-bytes", sender.size,
		"took", took, "bytes-per-second", int64(float64(sender.size)/max(took.Seconds(), 1e-9)))
	return nil
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

// snapshotSender cuts the stream into Snapshot messages: the first size
// bytes (the database) in snapshotChunk pieces, then whatever follows
// (the 32-byte SHA-256) as one last message with RemainingBytes 0.
type snapshotSender struct {
	srv    pb.Maintenance_SnapshotServer
	header *pb.ResponseHeader
	size   int64  // bytes of the database
	sent   int64  // bytes sent
	buf    []byte // the open message; a new one each time, as gRPC may hold a sent message
}

func (c *snapshotSender) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if c.buf == nil {
			c.buf = make([]byte, 0, snapshotChunk)
		}
		// A message ends at snapshotChunk bytes, and at the end of the
		// database, so the trailer travels alone.
		limit := int64(snapshotChunk)
		if pos := c.sent + int64(len(c.buf)); pos < c.size {
			limit = min(limit, c.size-c.sent)
		}
		k := min(int64(len(p)), limit-int64(len(c.buf)))
		c.buf = append(c.buf, p[:k]...)
		p, n = p[k:], n+int(k)
		if int64(len(c.buf)) == limit {
			if err := c.send(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (c *snapshotSender) send() error {
	if len(c.buf) == 0 {
		return nil
	}
	c.sent += int64(len(c.buf))
	err := c.srv.Send(&pb.SnapshotResponse{Header: c.header, RemainingBytes: uint64(max(0, c.size-c.sent)),
		Blob: c.buf, Version: ClusterVersion})
	c.buf = nil
	return err
}

// finish sends what is left and checks the stream had the database's
// size and a SHA-256.
func (c *snapshotSender) finish() error {
	if err := c.send(); err != nil {
		return err
	}
	if c.sent != c.size+sha256.Size {
		return fmt.Errorf("server: snapshot stream of %d bytes, want %d", c.sent, c.size+sha256.Size)
	}
	return nil
}
