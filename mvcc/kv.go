package mvcc

import (
	"bytes"
	"fmt"
	"math"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// This file implements etcd's request semantics (Range, Put, DeleteRange,
// Txn) on the store, so that the server and the model test share them.
// Response headers carry the revision only; the server adds cluster,
// member and raft term.

// rangeEnd maps the wire range_end to the index's convention: a single
// zero byte means "every key >= key", which the index spells as an empty,
// non-nil end.
func rangeEnd(end []byte) []byte {
	if len(end) == 1 && end[0] == 0 {
		return []byte{}
	}
	return end
}

// rangeReader is a view that can range: a read view or a write txn.
type rangeReader interface {
	rangeKeys(key, end []byte, atRev, limit int64, what rangeWhat, withTotal bool) (*rangeResult, error)
}

// rangeWhat is what a range reads.
type rangeWhat uint8

const (
	// readValues reads each key's stored KeyValue.
	readValues rangeWhat = iota
	// readCount only counts the keys.
	readCount
	// readKeys answers from the index alone: each key with its create
	// and mod revisions and version, but no value and no lease. This is
	// etcd 3.7's keys-only range (its FastKeysOnly), which clients see:
	// a keys-only read shows no lease.
	readKeys
)

// rangeWhatOf is what r reads. A keys-only range sorted by value still
// reads the values, to sort them, as etcd's does (and so shows leases).
func rangeWhatOf(r *pb.RangeRequest) rangeWhat {
	switch {
	case r.CountOnly:
		return readCount
	case r.KeysOnly && r.SortTarget != pb.RangeRequest_VALUE:
		return readKeys
	}
	return readValues
}

// Range serves a read-only range at the current revision (or r.Revision).
func (s *Store) Range(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	v := &view{s: s, rev: s.rev.Load()}
	defer v.close()
	resp, err := executeRange(v, r)
	if err != nil {
		return nil, err
	}
	// A compaction past the read revision that started during the read
	// may have removed what it looked at: report it as compacted.
	if at := r.Revision; at > 0 && at < s.compactRev.Load() {
		return nil, ErrCompacted
	}
	return resp, nil
}

// fetchLimit is how many keys to read for a response of at most limit
// (0: all): one more, to know whether to set More.
func fetchLimit(limit int64) int64 {
	if limit > 0 && limit < math.MaxInt64 {
		return limit + 1
	}
	return limit
}

// rangeKvsTag is the key of RangeResponse's field 2 (kvs), wire type 2.
const rangeKvsTag = 2<<3 | 2

func executeRange(v rangeReader, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	limit := r.Limit
	if !defaultOrdering(r.SortTarget, r.SortOrder) || hasRevisionFilters(r) {
		limit = 0
	}
	rr, err := v.rangeKeys(r.Key, rangeEnd(r.RangeEnd), r.Revision, fetchLimit(limit), rangeWhatOf(r), true)
	if err != nil {
		return nil, err
	}
	filterKVs(rr, r)
	sortKVs(rr, r)
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: rr.rev}, Count: int64(rr.count)}
	if r.Limit > 0 && len(rr.kvs) > int(r.Limit) {
		rr.kvs = rr.kvs[:r.Limit]
		resp.More = true
	}
	if r.KeysOnly {
		for _, kv := range rr.kvs {
			kv.Value = nil
		}
	}
	resp.Kvs = rr.kvs
	return resp, nil
}

func defaultOrdering(t pb.RangeRequest_SortTarget, o pb.RangeRequest_SortOrder) bool {
	return o == pb.RangeRequest_NONE || (t == pb.RangeRequest_KEY && o == pb.RangeRequest_ASCEND)
}

func hasRevisionFilters(r *pb.RangeRequest) bool {
	return r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
}

func filterKVs(rr *rangeResult, r *pb.RangeRequest) {
	prune := func(drop func(*mvccpb.KeyValue) bool) {
		j := 0
		for _, kv := range rr.kvs {
			if !drop(kv) {
				rr.kvs[j] = kv
				j++
			}
		}
		rr.kvs = rr.kvs[:j]
	}
	if r.MaxModRevision != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.ModRevision > r.MaxModRevision })
	}
	if r.MinModRevision != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.ModRevision < r.MinModRevision })
	}
	if r.MaxCreateRevision != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision > r.MaxCreateRevision })
	}
	if r.MinCreateRevision != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision < r.MinCreateRevision })
	}
}

// sortKVs sorts as etcd does: a target other than KEY with no order means
// ascending, and the sort is sort.Sort (not stable), so ties come out in
// the same order etcd's do for the same input.
func sortKVs(rr *rangeResult, r *pb.RangeRequest) {
	order := r.SortOrder
	if r.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	}
	if defaultOrdering(r.SortTarget, order) {
		return
	}
	var less func(a, b *mvccpb.KeyValue) bool
	switch r.SortTarget {
	case pb.RangeRequest_KEY:
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }
	case pb.RangeRequest_VERSION:
		less = func(a, b *mvccpb.KeyValue) bool { return a.Version-b.Version < 0 }
	case pb.RangeRequest_CREATE:
		less = func(a, b *mvccpb.KeyValue) bool { return a.CreateRevision-b.CreateRevision < 0 }
	case pb.RangeRequest_MOD:
		less = func(a, b *mvccpb.KeyValue) bool { return a.ModRevision-b.ModRevision < 0 }
	case pb.RangeRequest_VALUE:
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Value, b.Value) < 0 }
	default:
		return
	}
	var srt sort.Interface = kvSorter{rr.kvs, less}
	if order == pb.RangeRequest_DESCEND {
		srt = sort.Reverse(srt)
	}
	sort.Sort(srt)
}

type kvSorter struct {
	kvs  []*mvccpb.KeyValue
	less func(a, b *mvccpb.KeyValue) bool
}

func (k kvSorter) Len() int           { return len(k.kvs) }
func (k kvSorter) Swap(i, j int)      { k.kvs[i], k.kvs[j] = k.kvs[j], k.kvs[i] }
func (k kvSorter) Less(i, j int) bool { return k.less(k.kvs[i], k.kvs[j]) }

// Apply context: ci and term identify the raft entry being applied; the
// backend stores ci with the writes in the same commit.

// Put applies a PutRequest.
func (s *Store) Put(ci, term uint64, p *pb.PutRequest) (*pb.PutResponse, error) {
	if err := s.checkLease(p); err != nil {
		s.skip(ci, term)
		return nil, err
	}
	t := s.beginWrite()
	defer t.end(ci, term)
	prev, err := prevKV(t, p)
	if err != nil {
		return nil, err
	}
	return putOp(t, p, prev, &pb.PutResponse{Header: &pb.ResponseHeader{}}), nil
}

// skip records that entry ci was applied with no effect.
func (s *Store) skip(ci, term uint64) {
	s.be.BeginWrite().End(ci, term)
}

func (s *Store) checkLease(p *pb.PutRequest) error {
	if p.Lease != 0 && (s.leases == nil || !s.leases.Exists(p.Lease)) {
		return ErrLeaseNotFound
	}
	return nil
}

func prevKV(t rangeReader, p *pb.PutRequest) (*rangeResult, error) {
	if !p.IgnoreValue && !p.IgnoreLease && !p.PrevKv {
		return nil, nil
	}
	rr, err := t.rangeKeys(p.Key, nil, 0, 0, readValues, true)
	if err != nil {
		return nil, err
	}
	if (p.IgnoreValue || p.IgnoreLease) && len(rr.kvs) == 0 {
		return nil, ErrKeyNotFound
	}
	return rr, nil
}

// putOp applies p and fills resp, whose Header is set.
func putOp(t *txnWrite, p *pb.PutRequest, prev *rangeResult, resp *pb.PutResponse) *pb.PutResponse {
	val, lease := p.Value, p.Lease
	if p.IgnoreValue {
		val = prev.kvs[0].Value
	}
	if p.IgnoreLease {
		lease = prev.kvs[0].Lease
	}
	if p.PrevKv && prev != nil && len(prev.kvs) > 0 {
		resp.PrevKv = prev.kvs[0]
	}
	resp.Header.Revision = t.put(p.Key, val, lease)
	return resp
}

// DeleteRange applies a DeleteRangeRequest.
func (s *Store) DeleteRange(ci, term uint64, d *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	t := s.beginWrite()
	defer t.end(ci, term)
	return deleteOp(t, d)
}

func deleteOp(t *txnWrite, d *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	resp := &pb.DeleteRangeResponse{Header: &pb.ResponseHeader{}}
	end := rangeEnd(d.RangeEnd)
	if d.PrevKv {
		rr, err := t.rangeKeys(d.Key, end, 0, 0, readValues, true)
		if err != nil {
			return nil, err
		}
		resp.PrevKvs = rr.kvs
	}
	n := t.deleteRange(d.Key, end)
	resp.Deleted = n
	resp.Header.Revision = t.beginRev
	if n != 0 || len(t.changes) > 0 {
		resp.Header.Revision = t.beginRev + 1
	}
	return resp, nil
}

// IsTxnReadOnly reports whether no branch of the txn writes.
func IsTxnReadOnly(r *pb.TxnRequest) bool {
	for _, branch := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range branch {
			switch {
			case op.GetRequestPut() != nil, op.GetRequestDeleteRange() != nil:
				return false
			case op.GetRequestTxn() != nil && !IsTxnReadOnly(op.GetRequestTxn()):
				return false
			}
		}
	}
	return true
}

// Txn applies a TxnRequest that may write. Read-only txns should use
// ReadTxn, which takes no part in apply.
func (s *Store) Txn(ci, term uint64, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	t := s.beginWrite()
	path := compareToPath(t, r)
	if err := s.checkTxn(t, r, path); err != nil {
		t.end(ci, term)
		return nil, err
	}
	// etcd compares and checks in a read transaction and writes in
	// another: its metrics count them as two.
	s.metrics.report(&t.ops)
	resp, _ := newTxnResp(r, path)
	if _, err := s.executeTxn(t, r, path, resp); err != nil {
		// Writes were checked before any was made; a failure now means the
		// store is inconsistent with itself.
		panic(fmt.Sprintf("mvcc: txn failed after its checks passed: %v", err))
	}
	resp.Header.Revision = t.readRev()
	t.end(ci, term)
	return resp, nil
}

// ReadTxn serves a read-only txn at the current revision.
func (s *Store) ReadTxn(r *pb.TxnRequest) (*pb.TxnResponse, error) {
	v := &view{s: s, rev: s.rev.Load()}
	defer v.close()
	path := compareToPath(v, r)
	if err := s.checkTxn(v, r, path); err != nil {
		return nil, err
	}
	resp, _ := newTxnResp(r, path)
	if _, err := s.executeTxn(v, r, path, resp); err != nil {
		return nil, err
	}
	resp.Header.Revision = v.rev
	return resp, nil
}

func compareToPath(v rangeReader, r *pb.TxnRequest) []bool {
	path := []bool{applyCompares(v, r.Compare)}
	ops := r.Success
	if !path[0] {
		ops = r.Failure
	}
	for _, op := range ops {
		if t := op.GetRequestTxn(); t != nil {
			path = append(path, compareToPath(v, t)...)
		}
	}
	return path
}

func applyCompares(v rangeReader, cmps []*pb.Compare) bool {
	for _, c := range cmps {
		if !applyCompare(v, c) {
			return false
		}
	}
	return true
}

func applyCompare(v rangeReader, c *pb.Compare) bool {
	rr, err := v.rangeKeys(c.Key, rangeEnd(c.RangeEnd), 0, 0, readValues, true)
	if err != nil {
		return false
	}
	if len(rr.kvs) == 0 {
		if c.Target == pb.Compare_VALUE {
			// A missing key has no value, and no value compares equal to
			// "missing": etcd fails every value compare on absent keys.
			return false
		}
		return compareKV(c, &mvccpb.KeyValue{})
	}
	for _, kv := range rr.kvs {
		if !compareKV(c, kv) {
			return false
		}
	}
	return true
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var result int
	switch c.Target {
	case pb.Compare_VALUE:
		result = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		result = cmpInt(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		result = cmpInt(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		result = cmpInt(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		result = cmpInt(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return result == 0
	case pb.Compare_NOT_EQUAL:
		return result != 0
	case pb.Compare_GREATER:
		return result > 0
	case pb.Compare_LESS:
		return result < 0
	}
	return true
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkTxn validates the ops on the chosen path before anything is
// written: range revisions, and leases and previous keys for puts.
func (s *Store) checkTxn(v rangeReader, r *pb.TxnRequest, path []bool) error {
	_, err := s.checkTxnPath(v, r, path)
	return err
}

func (s *Store) checkTxnPath(v rangeReader, r *pb.TxnRequest, path []bool) (int, error) {
	n := 0
	ops := r.Success
	if !path[0] {
		ops = r.Failure
	}
	for _, op := range ops {
		switch {
		case op.GetRequestRange() != nil:
			rr := op.GetRequestRange()
			if rr.Revision != 0 {
				if rr.Revision > s.rev.Load() {
					return 0, ErrFutureRev
				}
				if rr.Revision < s.compactRev.Load() {
					return 0, ErrCompacted
				}
			}
		case op.GetRequestPut() != nil:
			p := op.GetRequestPut()
			if err := s.checkLease(p); err != nil {
				return 0, err
			}
			if _, err := prevKV(v, p); err != nil {
				return 0, err
			}
		case op.GetRequestTxn() != nil:
			sub, err := s.checkTxnPath(v, op.GetRequestTxn(), path[1:])
			if err != nil {
				return 0, err
			}
			n += sub + 1
			path = path[sub+1:]
		}
	}
	return n, nil
}

// txnShell is a txn response with room for one op, allocated at once.
type txnShell struct {
	resp pb.TxnResponse
	hdr  pb.ResponseHeader
	ops  [1]*pb.ResponseOp
}

// putShell is one put's response inside a txn response, allocated with
// the txn's other puts: the five objects of a put's answer, wired up.
type putShell struct {
	op  pb.ResponseOp
	w   pb.ResponseOp_ResponsePut
	res pb.PutResponse
	hdr pb.ResponseHeader
}

// newTxnResp builds the response of the branches path chooses, with the
// responses of its puts ready to fill (putOp). Its objects are allocated
// a txn and its puts at a time: a txn-put's answer is two allocations,
// not seven.
func newTxnResp(r *pb.TxnRequest, path []bool) (*pb.TxnResponse, int) {
	ops := r.Success
	if !path[0] {
		ops = r.Failure
	}
	var resp *pb.TxnResponse
	if len(ops) == 1 {
		sh := &txnShell{}
		resp, sh.resp.Header, sh.resp.Responses = &sh.resp, &sh.hdr, sh.ops[:]
	} else {
		resp = &pb.TxnResponse{Header: &pb.ResponseHeader{}, Responses: make([]*pb.ResponseOp, len(ops))}
	}
	resp.Succeeded = path[0]
	nPuts := 0
	for _, op := range ops {
		if op.GetRequestPut() != nil {
			nPuts++
		}
	}
	var puts []putShell
	if nPuts > 0 {
		puts = make([]putShell, nPuts)
	}
	n := 0
	for i, op := range ops {
		switch {
		case op.GetRequestRange() != nil:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{}}
		case op.GetRequestPut() != nil:
			ps := &puts[0]
			puts = puts[1:]
			ps.res.Header = &ps.hdr
			ps.w.ResponsePut = &ps.res
			ps.op.Response = &ps.w
			resp.Responses[i] = &ps.op
		case op.GetRequestDeleteRange() != nil:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{}}
		case op.GetRequestTxn() != nil:
			sub, cnt := newTxnResp(op.GetRequestTxn(), path[1:])
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: sub}}
			path = path[1+cnt:]
			n += cnt + 1
		default:
			resp.Responses[i] = &pb.ResponseOp{}
		}
	}
	return resp, n
}

// executeTxn runs the chosen branch. v is a *txnWrite for write txns and
// a read view otherwise (then the txn has no writes).
func (s *Store) executeTxn(v rangeReader, r *pb.TxnRequest, path []bool, resp *pb.TxnResponse) (int, error) {
	ops := r.Success
	if !path[0] {
		ops = r.Failure
	}
	t, _ := v.(*txnWrite)
	n := 0
	for i, op := range ops {
		switch {
		case op.GetRequestRange() != nil:
			rr, err := executeRange(v, op.GetRequestRange())
			if err != nil {
				return 0, fmt.Errorf("txn range: %w", err)
			}
			resp.Responses[i].Response.(*pb.ResponseOp_ResponseRange).ResponseRange = rr
		case op.GetRequestPut() != nil:
			p := op.GetRequestPut()
			prev, err := prevKV(t, p)
			if err != nil {
				return 0, fmt.Errorf("txn put: %w", err)
			}
			putOp(t, p, prev, resp.Responses[i].Response.(*pb.ResponseOp_ResponsePut).ResponsePut)
		case op.GetRequestDeleteRange() != nil:
			dr, err := deleteOp(t, op.GetRequestDeleteRange())
			if err != nil {
				return 0, fmt.Errorf("txn delete: %w", err)
			}
			resp.Responses[i].Response.(*pb.ResponseOp_ResponseDeleteRange).ResponseDeleteRange = dr
		case op.GetRequestTxn() != nil:
			sub := resp.Responses[i].Response.(*pb.ResponseOp_ResponseTxn).ResponseTxn
			cnt, err := s.executeTxn(v, op.GetRequestTxn(), path[1:], sub)
			if err != nil {
				return 0, err
			}
			n += cnt + 1
			path = path[cnt+1:]
		}
	}
	return n, nil
}

// ApplyNoop records that raft entry ci was applied without a store change
// (an empty entry, a request that touched other state, or one that failed).
func (s *Store) ApplyNoop(ci, term uint64) { s.skip(ci, term) }
