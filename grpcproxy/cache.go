package grpcproxy

import (
	"bytes"
	"container/list"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// rangeCache is etcd's proxy cache of ranges: every range answered
// through the proxy is kept (as if it had been serializable), and a
// serializable range is answered from it when the same request is there.
// A put, delete or txn through the proxy drops the entries whose range it
// touches; a compaction through the proxy makes requests at revisions
// below it fail with "compacted", and stops caching requests at or below
// it. As in etcd, writes that reach the members some other way do not
// invalidate it: serializable reads through a proxy may be that stale.
type rangeCache struct {
	mu        sync.Mutex
	max       int
	lru       *list.List // of *cacheEntry, most recent first
	byKey     map[string]*list.Element
	compacted int64
}

type cacheEntry struct {
	key        string
	begin, end []byte // the request's range; end nil: one key
	pinned     bool   // asked at a revision: never invalidated
	resp       *pb.RangeResponse
}

// cacheMaxEntries is etcd's default size of the proxy cache.
const cacheMaxEntries = 2048

func newRangeCache() *rangeCache {
	return &rangeCache{max: cacheMaxEntries, lru: list.New(), byKey: map[string]*list.Element{}, compacted: -1}
}

func cacheKey(r *pb.RangeRequest) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	return string(b)
}

// get returns the cached answer to r (a serializable range), or
// rpctypes.ErrGRPCCompacted for a revision below the last compaction.
func (c *rangeCache) get(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	k := cacheKey(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Revision > 0 && r.Revision < c.compacted {
		if e, ok := c.byKey[k]; ok {
			c.remove(e)
		}
		return nil, rpctypes.ErrGRPCCompacted
	}
	e, ok := c.byKey[k]
	if !ok {
		return nil, nil
	}
	c.lru.MoveToFront(e)
	return e.Value.(*cacheEntry).resp, nil
}

// add keeps resp as the answer to r (marked serializable).
func (c *rangeCache) add(r *pb.RangeRequest, resp *pb.RangeResponse) {
	if r.Revision <= c.compactedRev() {
		return
	}
	k := cacheKey(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[k]; ok {
		e.Value.(*cacheEntry).resp = resp
		c.lru.MoveToFront(e)
		return
	}
	ent := &cacheEntry{key: k, begin: r.Key, end: r.RangeEnd, pinned: r.Revision != 0, resp: resp}
	c.byKey[k] = c.lru.PushFront(ent)
	for c.lru.Len() > c.max {
		c.remove(c.lru.Back())
	}
}

func (c *rangeCache) compactedRev() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.compacted
}

func (c *rangeCache) remove(e *list.Element) {
	c.lru.Remove(e)
	delete(c.byKey, e.Value.(*cacheEntry).key)
}

// invalidate drops the entries (asked at the current revision) whose
// range meets [key, end) (end nil: the key alone; "\x00": to the end).
func (c *rangeCache) invalidate(key, end []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.lru.Front(); e != nil; {
		next := e.Next()
		ent := e.Value.(*cacheEntry)
		if !ent.pinned && overlaps(ent.begin, ent.end, key, end) {
			c.remove(e)
		}
		e = next
	}
}

func (c *rangeCache) compact(rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev > c.compacted {
		c.compacted = rev
	}
}

func (c *rangeCache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// overlaps reports whether two key ranges meet. A range is [begin, end),
// [begin] alone when end is empty, and unbounded when end is "\x00".
func overlaps(b1, e1, b2, e2 []byte) bool {
	// below reports whether every key of range (b, e) is below k.
	below := func(b, e, k []byte) bool {
		switch {
		case len(e) == 0:
			return bytes.Compare(b, k) < 0
		case len(e) == 1 && e[0] == 0:
			return false
		default:
			return bytes.Compare(e, k) <= 0
		}
	}
	return !below(b1, e1, b2) && !below(b2, e2, b1)
}
