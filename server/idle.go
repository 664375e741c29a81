package server

import (
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// defaultIdleTrimInterval is how long a member must go without a client
// request or a page-store commit to count as idle.
const defaultIdleTrimInterval = time.Second

// runIdleTrim gives memory back once a burst of work is over: after a
// whole interval with no unary client request and no page-store commit
// following a busy one, it drops the page store's writer buffers
// (pagestore.DB.TrimMemory) and runs a garbage collection that returns
// the freed heap to the operating system. The collector otherwise runs
// only when the program allocates, so an idle member kept the garbage of
// its last burst, and the buffers kept for the next one, resident for as
// long as it stayed idle. Once per burst, and only when it frees enough
// to pay for the collection (worthTrimming): an idle member does no work.
func (s *Server) runIdleTrim() {
	interval := s.idleTrimInterval
	if interval <= 0 {
		interval = defaultIdleTrimInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	activity := func() (uint64, uint64) { return s.requests.Load(), s.be.DB().Stats().Commits }
	lastReq, lastCommits := activity()
	busy := false
	for {
		select {
		case <-s.stopping:
			return
		case <-t.C:
		}
		req, commits := activity()
		if req != lastReq || commits != lastCommits {
			busy, lastReq, lastCommits = true, req, commits
			continue
		}
		if !busy {
			continue
		}
		busy = false
		live, garbage := heapLiveAndGarbage()
		kept := uint64(s.be.DB().KeptBytes())
		if !s.idleTrimAlways && !worthTrimming(live, garbage, kept) {
			continue
		}
		start := time.Now()
		s.be.DB().TrimMemory()
		debug.FreeOSMemory()
		s.lg.Debug("idle: gave memory back to the operating system", "took", time.Since(start),
			"heap-live", live, "garbage", garbage, "writer-buffers", kept)
		if s.idleTrimmed != nil {
			s.idleTrimmed()
		}
	}
}

// worthTrimming decides whether an idle trim pays: the forced collection
// costs time in proportion to the live heap, so what it frees (the
// garbage and the writer's kept buffers) must be at least a quarter of
// the live heap, and at least 4 MiB. A member under a steady trickle of
// requests (a Kubernetes control plane's leases) goes idle every few
// seconds; without this bound it would run a full collection of a large
// heap each time to free next to nothing.
func worthTrimming(live, garbage, kept uint64) bool {
	return garbage+kept >= max(live/4, 4<<20)
}

// heapLiveAndGarbage reads the heap live at the last collection and the
// bytes of heap objects allocated since that are not yet collected.
func heapLiveAndGarbage() (live, garbage uint64) {
	samples := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	rtmetrics.Read(samples)
	if samples[0].Value.Kind() != rtmetrics.KindUint64 || samples[1].Value.Kind() != rtmetrics.KindUint64 {
		return 0, 1 << 62 // unknown: trim
	}
	live, objects := samples[0].Value.Uint64(), samples[1].Value.Uint64()
	if objects > live {
		garbage = objects - live
	}
	return live, garbage
}
