package load

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// keyGen writes the keys of etcd's benchmark: a --key-size buffer holding
// the varint of the key number, zero-padded, after an optional prefix.
type keyGen struct {
	prefix []byte
	buf    []byte
}

func newKeyGen(prefix string, size int) *keyGen {
	return &keyGen{prefix: []byte(prefix), buf: make([]byte, size)}
}

// key returns a fresh slice holding key number n.
func (g *keyGen) key(n int) []byte {
	clear(g.buf)
	binary.PutVarint(g.buf, int64(n))
	k := make([]byte, 0, len(g.prefix)+len(g.buf))
	return append(append(k, g.prefix...), g.buf...)
}

func newRand() *rand.Rand { return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())) }

func (e *env) put(ctx context.Context) *Summary {
	o := e.o
	rec := NewRecorder("put", &e.done)
	val := randBytes(o.ValSize)
	lim := newLimiter(o.Rate, 1)
	cctx, stopCompact := context.WithCancel(ctx)
	var cwg sync.WaitGroup
	if o.CompactInterval > 0 {
		cwg.Go(func() { e.compactLoop(cctx) })
	}
	finish := e.phase("put", int64(o.Total), "puts")
	start, end := e.pool(ctx, o.Total, func(c *conn) func(int) {
		sh, rng, kg := rec.Shard(), newRand(), newKeyGen(o.KeyPrefix, o.KeySize)
		return func(i int) {
			if lim.wait(ctx) != nil {
				return
			}
			n := i % o.KeySpaceSize
			if !o.SeqKeys {
				n = rng.IntN(o.KeySpaceSize)
			}
			v := val
			if o.ValKind == "pod" {
				v = podValue(rng, i, o.ValSize)
			}
			req := &pb.PutRequest{Key: kg.key(n), Value: v}
			st := time.Now()
			_, err := c.kv.Put(ctx, req)
			sh.Observe(time.Since(st), err)
		}
	})
	stopCompact()
	cwg.Wait()
	finish()
	rec.SetInterval(start, end)
	return rec.Summary()
}

// compactLoop compacts to --compact-index-delta revisions behind the
// current one every --compact-interval.
func (e *env) compactLoop(ctx context.Context) {
	t := time.NewTicker(e.o.CompactInterval)
	defer t.Stop()
	c := e.conns[0]
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := c.kv.Range(rctx, &pb.RangeRequest{Key: []byte("foo")})
		if err == nil {
			if rev := resp.Header.Revision - e.o.CompactIndexDelta; rev > 0 {
				_, err = c.kv.Compact(rctx, &pb.CompactionRequest{Revision: rev})
			}
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(e.stderr, "stratabench put: compaction: %v\n", errText(err))
		}
	}
}

// prefixEnd is the range end that covers every key starting with key.
func prefixEnd(key []byte) []byte {
	end := append([]byte(nil), key...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// rangeRequest is the request of the range workload.
func (o *Options) rangeRequest() *pb.RangeRequest {
	r := &pb.RangeRequest{
		Key: []byte(o.RangeKey), Limit: o.Limit,
		Serializable: o.Consistency == "s", CountOnly: o.CountOnly, KeysOnly: o.KeysOnly,
	}
	switch {
	case o.RangePrefix && o.RangeKey == "":
		r.Key, r.RangeEnd = []byte{0}, []byte{0}
	case o.RangePrefix:
		r.RangeEnd = prefixEnd(r.Key)
	case o.RangeEnd != "":
		r.RangeEnd = []byte(o.RangeEnd)
	}
	return r
}

func (e *env) rangeLoad(ctx context.Context) *Summary {
	o := e.o
	rec := NewRecorder("range", &e.done)
	lim := newLimiter(o.Rate, 1)
	req := o.rangeRequest()
	finish := e.phase("range", int64(o.Total), "ranges")
	start, end := e.pool(ctx, o.Total, func(c *conn) func(int) {
		sh := rec.Shard()
		return func(int) {
			if lim.wait(ctx) != nil {
				return
			}
			st := time.Now()
			_, err := c.kv.Range(ctx, req)
			sh.Observe(time.Since(st), err)
		}
	})
	finish()
	rec.SetInterval(start, end)
	return rec.Summary()
}

func (e *env) txnPut(ctx context.Context) *Summary {
	o := e.o
	rec := NewRecorder("txn-put", &e.done)
	val := randBytes(o.ValSize)
	lim := newLimiter(o.Rate, 1)
	finish := e.phase("txn-put", int64(o.Total), "txns")
	start, end := e.pool(ctx, o.Total, func(c *conn) func(int) {
		sh, kg := rec.Shard(), newKeyGen("", o.KeySize)
		return func(i int) {
			if lim.wait(ctx) != nil {
				return
			}
			ops := make([]*pb.RequestOp, o.TxnOps)
			for j := range ops {
				k := kg.key((i*o.TxnOps + j) % o.KeySpaceSize)
				ops[j] = &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: val}}}
			}
			st := time.Now()
			_, err := c.kv.Txn(ctx, &pb.TxnRequest{Success: ops})
			sh.Observe(time.Since(st), err)
		}
	})
	finish()
	rec.SetInterval(start, end)
	return rec.Summary()
}

// txnMixed sends one-operation transactions: a range read with probability
// rw/(1+rw), else a put of key i mod --key-space-size. Reads cover every
// key (up to --end-key when set), limited to --limit keys.
func (e *env) txnMixed(ctx context.Context) *Summary {
	o := e.o
	reads := NewRecorder("txn-mixed-read", &e.done)
	writes := NewRecorder("txn-mixed-write", &e.done)
	all := NewRecorder("txn-mixed", nil)
	val := randBytes(o.ValSize)
	lim := newLimiter(o.Rate, 1)
	readEnd := []byte{0}
	if o.EndKey != "" {
		readEnd = []byte(o.EndKey)
	}
	read := &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{
		Key: []byte{0}, RangeEnd: readEnd, Limit: o.Limit, Serializable: o.Consistency == "s",
	}}}}}
	pRead := o.RWRatio / (1 + o.RWRatio)
	finish := e.phase("txn-mixed", int64(o.Total), "txns")
	start, end := e.pool(ctx, o.Total, func(c *conn) func(int) {
		rs, ws, as, rng, kg := reads.Shard(), writes.Shard(), all.Shard(), newRand(), newKeyGen("", o.KeySize)
		return func(i int) {
			if lim.wait(ctx) != nil {
				return
			}
			req, sh := read, rs
			if rng.Float64() >= pRead {
				put := &pb.PutRequest{Key: kg.key(i % o.KeySpaceSize), Value: val}
				req = &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: put}}}}
				sh = ws
			}
			st := time.Now()
			_, err := c.kv.Txn(ctx, req)
			lat := time.Since(st)
			sh.Observe(lat, err)
			as.Observe(lat, err)
		}
	})
	finish()
	for _, r := range []*Recorder{reads, writes, all} {
		r.SetInterval(start, end)
	}
	s := all.Summary()
	s.Parts = []*Summary{reads.Summary(), writes.Summary()}
	return s
}

// errLeaseNotFound is a keep-alive answered with TTL 0: the lease is gone.
var errLeaseNotFound = errors.New("requested lease not found")

// leaseTTL is the TTL of the leases the keep-alives renew (etcd
// benchmark's).
const leaseTTL = 100

func (e *env) leaseKeepalive(ctx context.Context) *Summary {
	o := e.o
	rec := NewRecorder("lease-keepalive", &e.done)
	type grant struct {
		c  *conn
		id int64
	}
	var mu sync.Mutex
	var leases []grant
	finish := e.phase("lease-keepalive", int64(o.Total), "keepalives")
	start, end := e.pool(ctx, o.Total, func(c *conn) func(int) {
		sh := rec.Shard()
		resp, gerr := c.lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: leaseTTL})
		if gerr == nil && resp.Error != "" {
			gerr = errors.New(resp.Error)
		}
		if gerr != nil {
			gerr = fmt.Errorf("lease grant: %s", errText(gerr))
			return func(int) { sh.Observe(0, gerr) }
		}
		mu.Lock()
		leases = append(leases, grant{c, resp.ID})
		mu.Unlock()
		return func(int) {
			st := time.Now()
			err := keepAliveOnce(ctx, c, resp.ID)
			sh.Observe(time.Since(st), err)
		}
	})
	finish()
	rec.SetInterval(start, end)
	// Leave no leases behind.
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, l := range leases {
		_, _ = l.c.lease.LeaseRevoke(rctx, &pb.LeaseRevokeRequest{ID: l.id})
	}
	return rec.Summary()
}

// keepAliveOnce renews a lease once on a stream of its own, as clientv3's
// KeepAliveOnce does.
func keepAliveOnce(ctx context.Context, c *conn, id int64) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.lease.LeaseKeepAlive(sctx)
	if err != nil {
		return err
	}
	if err := s.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
		return err
	}
	resp, err := s.Recv()
	if err != nil {
		return err
	}
	if resp.TTL <= 0 {
		return errLeaseNotFound
	}
	return nil
}
