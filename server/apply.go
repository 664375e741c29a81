package server

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/etcdsnap"
	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/schema"
	"github.com/strata-db/strata/vfs"
)

// applier is the raft StateMachine: it applies committed entries to the
// MVCC store and hands each result to the proposer waiting for it.
type applier struct {
	s *Server
	// applied is the index of the last entry applied (in memory); entries
	// at or below it are skipped, which makes WAL replay idempotent.
	applied atomic.Uint64
	// view is the membership committed conf changes are checked against
	// (confcheck.go), owned by the apply goroutine.
	view *membership.View
	// decoded counts the requests applied from their entry's bytes
	// rather than from the local proposer's copy (for tests).
	decoded atomic.Uint64
}

func newApplier(s *Server) *applier {
	a := &applier{s: s}
	a.applied.Store(s.kv.ConsistentIndex())
	return a
}

func (a *applier) ConsistentIndex() uint64 { return a.s.kv.ConsistentIndex() }

func (a *applier) Commit() error { return a.s.be.ForceCommit() }

// Persisted gates the backend's commits on what the WAL holds.
func (a *applier) Persisted(index uint64) { a.s.be.SetDurableIndex(index) }

func (a *applier) Apply(ents []*raftpb.Entry) {
	if a.s.beforeApply != nil {
		a.s.beforeApply()
	}
	for _, e := range ents {
		idx, term := e.GetIndex(), e.GetTerm()
		if idx <= a.applied.Load() {
			continue
		}
		switch e.GetType() {
		case raftpb.EntryNormal:
			a.applyNormal(idx, term, e.GetData())
		default:
			a.applyConfChange(idx, term, e)
		}
		a.applied.Store(idx)
	}
}

func (a *applier) applyNormal(idx, term uint64, data []byte) {
	s := a.s
	if len(data) == 0 { // a new leader's empty entry
		s.kv.ApplyNoop(idx, term)
		return
	}
	// A request this member proposed, and whose proposer still waits, is
	// applied from the proposer's copy: decoding the bytes it encoded
	// would give the same request (the bytes are compared), at the cost
	// of a second decode and its thousand-odd bytes of allocation per
	// entry. Followers, replays and abandoned proposals decode.
	id, ok := schema.PeekRequestID(data)
	req := (*pb.InternalRaftRequest)(nil)
	if ok {
		req = s.wait.local(id, data)
	}
	if req == nil {
		a.decoded.Add(1)
		req = new(pb.InternalRaftRequest)
		if err := schema.DecodeRequest(data, req); err != nil {
			s.lg.Error("cannot decode a committed entry; skipping it", "index", idx, "error", err)
			s.kv.ApplyNoop(idx, term)
			return
		}
		id = schema.RequestID(req)
	}
	start := time.Now()
	r := a.dispatch(idx, term, req)
	s.metrics.observeApply(applyOp(req), r.err, time.Since(start), s.cfg.WarningApplyDuration)
	s.wait.trigger(id, r)
}

func (a *applier) dispatch(idx, term uint64, req *pb.InternalRaftRequest) applyResult {
	s := a.s
	kv := s.kv
	var r applyResult
	if s.corruptRefuses(req) { // outermost, as etcd's corrupt applier
		kv.ApplyNoop(idx, term)
		return applyResult{err: errCorrupt}
	}
	if s.cappedByAlarm(req) {
		kv.ApplyNoop(idx, term)
		return applyResult{err: errNoSpace}
	}
	if err := s.applyAuthCheck(req); err != nil {
		kv.ApplyNoop(idx, term)
		return applyResult{err: err}
	}
	// An auth request's writes and its index go into one backend write.
	// Any other request must not record its index here: the index would
	// reach the page store in a commit without the request's data, and a
	// crash right after would make replay skip the request.
	lw := &lazyWrite{be: s.be}
	resp, handled, err := s.auth.Apply(lw, idx, req)
	if handled {
		lw.get().End(idx, term)
		return applyResult{resp: resp, err: err}
	}
	switch {
	case req.ClusterMemberAttrSet != nil:
		s.applyMemberAttrs(idx, term, req.ClusterMemberAttrSet)
	case req.ClusterVersionSet != nil:
		s.applyClusterVersion(idx, term, req.ClusterVersionSet)
	case req.DowngradeInfoSet != nil:
		s.applyDowngradeInfo(idx, term, req.DowngradeInfoSet)
	case req.Alarm != nil:
		w := s.be.BeginWrite()
		r.resp = s.applyAlarm(w, req.Alarm)
		w.End(idx, term)
	case req.Put != nil:
		r.resp, r.err = kv.Put(idx, term, req.Put)
	case req.DeleteRange != nil:
		r.resp, r.err = kv.DeleteRange(idx, term, req.DeleteRange)
	case req.Txn != nil:
		r.resp, r.err = kv.Txn(idx, term, req.Txn)
	case req.LeaseGrant != nil:
		var ttl int64
		ttl, r.err = s.lessor.Grant(idx, term, req.LeaseGrant.ID, req.LeaseGrant.TTL)
		r.resp = &pb.LeaseGrantResponse{ID: req.LeaseGrant.ID, TTL: ttl}
	case req.LeaseRevoke != nil:
		var rev int64
		rev, r.err = s.lessor.RevokeAndDelete(idx, term, req.LeaseRevoke.ID, kv)
		r.resp = &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: rev}}
	case req.LeaseCheckpoint != nil:
		s.lessor.Checkpoint(idx, term, req.LeaseCheckpoint.Checkpoints)
		r.resp = &pb.LeaseCheckpointResponse{}
	case req.Compaction != nil:
		var resp *pb.CompactionResponse
		resp, r.done, r.err = kv.Compact(idx, term, req.Compaction)
		r.resp = resp
	default:
		kv.ApplyNoop(idx, term)
	}
	return r
}

// lazyWrite begins a backend write only when something is written, so
// offering a request to the auth store costs nothing when it is not an
// auth request.
type lazyWrite struct {
	be *mvcc.Backend
	w  *mvcc.WriteTx
}

func (l *lazyWrite) get() *mvcc.WriteTx {
	if l.w == nil {
		l.w = l.be.BeginWrite()
	}
	return l.w
}

func (l *lazyWrite) Put(bucket, key, value []byte) { l.get().Put(bucket, key, value) }
func (l *lazyWrite) Delete(bucket, key []byte)     { l.get().Delete(bucket, key) }

// Image is a page-store image of the committed state, for a follower.
func (a *applier) Image() (raft.Image, error) { return a.s.be.Image() }

// CheckImage validates a received image and returns the consistent
// index it holds. An etcd leader sends its database in etcd's format
// (bbolt): it is converted into a page store first, under the same name,
// so that a Strata member can join and follow an etcd cluster.
func (a *applier) CheckImage(path string) (uint64, error) {
	f, err := schema.DetectFile(path)
	if err != nil {
		return 0, err
	}
	if f == schema.FormatEtcd {
		if err := a.convertEtcdImage(path); err != nil {
			return 0, err
		}
	}
	return mvcc.ImageIndex(path)
}

// convertEtcdImage rewrites the etcd database at path as a page store:
// written beside it, durable, then renamed over it (and the directory
// fsync'd), so that path holds either the whole received image or the
// whole conversion. The bbolt reader checks every page it reads; a
// damaged image is refused naming the file and the offset.
func (a *applier) convertEtcdImage(path string) error {
	fs := a.s.dbFS
	if fs == nil {
		fs = vfs.Default
	}
	start := time.Now()
	tmp := path + ".strata"
	_ = fs.Remove(tmp)
	if err := etcdsnap.ToPageStore(path, tmp, &pagestore.Options{FS: fs, Logger: a.s.lg}, nil); err != nil {
		_ = fs.Remove(tmp)
		return fmt.Errorf("converting the etcd leader's snapshot: %w", err)
	}
	if err := fs.Rename(tmp, path); err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	if err := fs.SyncDir(filepath.Dir(path)); err != nil {
		return err
	}
	a.s.lg.Info("converted a snapshot in etcd's format into the page store", "path", path, "took", time.Since(start).String())
	return nil
}
