package server

import (
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// memberID derives a member's id the way etcd does for the members of an
// initial cluster: the first 8 bytes of SHA-1 over its sorted peer URLs and
// the cluster token. Equal flags give equal ids, in Strata and in etcd.
func memberID(peerURLs []url.URL, token string) uint64 {
	us := make([]string, len(peerURLs))
	for i, u := range peerURLs {
		us[i] = u.String()
	}
	sort.Strings(us)
	h := sha1.Sum([]byte(strings.Join(us, "") + token))
	return binary.BigEndian.Uint64(h[:8])
}

// clusterID derives the cluster id from the member ids, as etcd does: the
// first 8 bytes of SHA-1 over the sorted ids, each 8 bytes big-endian.
func clusterID(ids []uint64) uint64 {
	s := append([]uint64(nil), ids...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	b := make([]byte, 8*len(s))
	for i, id := range s {
		binary.BigEndian.PutUint64(b[8*i:], id)
	}
	h := sha1.Sum(b)
	return binary.BigEndian.Uint64(h[:8])
}

// idGenerator makes request ids unique across members and restarts: the
// top 2 bytes are the low bits of the member id, the next 5 the start time
// in milliseconds, the low 6 bytes a counter (etcd's layout).
type idGenerator struct {
	prefix uint64
	suffix atomic.Uint64
}

func newIDGenerator(member uint64, now time.Time) *idGenerator {
	g := &idGenerator{prefix: member << 48}
	g.suffix.Store(uint64(now.UnixMilli()) << 8 & (1<<48 - 1))
	return g
}

func (g *idGenerator) next() uint64 {
	return g.prefix | (g.suffix.Add(1) & (1<<48 - 1))
}

func hexID(id uint64) string { return fmt.Sprintf("%x", id) }
