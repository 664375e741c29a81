package server

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestCheckBranchMatchesCheckIntervals: the pairwise check of a plain
// branch refuses exactly what the full interval check refuses, over
// random branches of puts, reads, deletes and nested txns on a few keys
// (so that duplicates are common), below and above the pairwise limit.
func TestCheckBranchMatchesCheckIntervals(t *testing.T) {
	seed := uint64(rand.Int64())
	if s := os.Getenv("STRATA_SERVER_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay with STRATA_SERVER_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	key := func() []byte { return []byte{'a' + byte(rng.IntN(12))} }
	var branch func(depth, maxOps int, plain bool) []*pb.RequestOp
	branch = func(depth, maxOps int, plain bool) []*pb.RequestOp {
		ops := make([]*pb.RequestOp, rng.IntN(maxOps+1))
		for i := range ops {
			kind := rng.IntN(10)
			if plain && kind >= 7 {
				kind = rng.IntN(7)
			}
			switch {
			case kind < 5:
				ops[i] = &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key()}}}
			case kind < 7:
				ops[i] = &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key()}}}
			case kind < 9 || depth > 1:
				d := &pb.DeleteRangeRequest{Key: key()}
				if rng.IntN(2) == 0 {
					d.RangeEnd = []byte{d.Key[0] + byte(1+rng.IntN(3))}
				}
				ops[i] = &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: d}}
			default:
				ops[i] = &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
					Success: branch(depth+1, 3, false), Failure: branch(depth+1, 3, false)}}}
			}
		}
		return ops
	}
	refused, fast := 0, 0
	for i := 0; i < 20000; i++ {
		plain := rng.IntN(2) == 0
		ops := branch(0, 12, plain)
		_, _, want := checkIntervals(ops)
		if got := checkBranch(ops); got != want {
			t.Fatalf("branch %d (%d ops): checkBranch = %v, checkIntervals = %v", i, len(ops), got, want)
		}
		if want != nil {
			refused++
		}
		if plain && len(ops) <= pairwiseBranch {
			fast++
		}
	}
	t.Logf("20000 branches agreed, %d refused, %d on the pairwise path", refused, fast)
}
