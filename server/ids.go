package server

import (
	"fmt"
	"sync/atomic"
	"time"
)

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
