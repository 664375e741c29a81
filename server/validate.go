package server

import (
	"bytes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Request validation done before anything is proposed, with etcd's exact
// errors and rules (including their quirks: a from-key delete in a txn is
// not checked against the txn's puts, as in etcd).

func checkRangeRequest(r *pb.RangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return nil
}

func checkPutRequest(r *pb.PutRequest) error {
	switch {
	case len(r.Key) == 0:
		return rpctypes.ErrGRPCEmptyKey
	case r.IgnoreValue && len(r.Value) != 0:
		return rpctypes.ErrGRPCValueProvided
	case r.IgnoreLease && r.Lease != 0:
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

func checkDeleteRequest(r *pb.DeleteRangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return nil
}

func checkTxnRequest(r *pb.TxnRequest, maxTxnOps int) error {
	opc := max(len(r.Compare), len(r.Success), len(r.Failure))
	if opc > maxTxnOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, u := range ops {
			if err := checkRequestOp(u, maxTxnOps-opc); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkRequestOp(u *pb.RequestOp, maxTxnOps int) error {
	switch {
	case u.GetRequestRange() != nil:
		return checkRangeRequest(u.GetRequestRange())
	case u.GetRequestPut() != nil:
		return checkPutRequest(u.GetRequestPut())
	case u.GetRequestDeleteRange() != nil:
		return checkDeleteRequest(u.GetRequestDeleteRange())
	case u.GetRequestTxn() != nil:
		return checkTxnRequest(u.GetRequestTxn(), maxTxnOps)
	}
	return rpctypes.ErrGRPCKeyNotFound
}

// interval is [begin, end) over strings where an empty end means +inf
// and a point has end == begin + "\x00".
type interval struct{ begin, end string }

func (iv interval) contains(k string) bool {
	return k >= iv.begin && (iv.end == "" || k < iv.end)
}

func pointOrRange(key, end []byte) interval {
	if len(end) == 0 {
		return interval{string(key), string(key) + "\x00"}
	}
	return interval{string(key), string(end)}
}

func anyContains(ivs []interval, k string) bool {
	for _, iv := range ivs {
		if iv.contains(k) {
			return true
		}
	}
	return false
}

// checkBranch is checkIntervals for a txn's top-level branch, whose puts
// and deletes are not needed after: a branch of reads and at most
// pairwiseBranch puts, with no delete and no nested txn (most txns), is
// checked pair by pair without building the map.
func checkBranch(reqs []*pb.RequestOp) error {
	var puts [pairwiseBranch][]byte
	n := 0
	for _, req := range reqs {
		switch {
		case req.GetRequestTxn() != nil, req.GetRequestDeleteRange() != nil:
			_, _, err := checkIntervals(reqs)
			return err
		case req.GetRequestPut() != nil:
			if n == len(puts) {
				_, _, err := checkIntervals(reqs)
				return err
			}
			k := req.GetRequestPut().GetKey()
			for _, p := range puts[:n] {
				if bytes.Equal(p, k) {
					return rpctypes.ErrGRPCDuplicateKey
				}
			}
			puts[n] = k
			n++
		}
	}
	return nil
}

// pairwiseBranch is the most puts checkBranch compares pair by pair.
const pairwiseBranch = 8

// checkIntervals rejects a txn branch that puts one key twice or puts a
// key that a delete in the same branch (or a nested txn's) covers.
func checkIntervals(reqs []*pb.RequestOp) (map[string]struct{}, []interval, error) {
	var dels []interval
	for _, req := range reqs {
		if d := req.GetRequestDeleteRange(); d != nil {
			dels = append(dels, pointOrRange(d.Key, d.RangeEnd))
		}
	}
	puts := map[string]struct{}{}
	for _, req := range reqs {
		t := req.GetRequestTxn()
		if t == nil {
			continue
		}
		putsThen, delsThen, err := checkIntervals(t.Success)
		if err != nil {
			return nil, dels, err
		}
		putsElse, delsElse, err := checkIntervals(t.Failure)
		if err != nil {
			return nil, dels, err
		}
		for k := range putsThen {
			if _, ok := puts[k]; ok || anyContains(dels, k) {
				return nil, dels, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		for k := range putsElse {
			if _, ok := puts[k]; ok {
				if _, same := putsThen[k]; !same {
					return nil, dels, rpctypes.ErrGRPCDuplicateKey
				}
			}
			if anyContains(dels, k) {
				return nil, dels, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		dels = append(dels, delsThen...)
		dels = append(dels, delsElse...)
	}
	for _, req := range reqs {
		p := req.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.Key)
		if _, ok := puts[k]; ok || anyContains(dels, k) {
			return nil, dels, rpctypes.ErrGRPCDuplicateKey
		}
		puts[k] = struct{}{}
	}
	return puts, dels, nil
}
