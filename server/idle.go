package server

import (
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// defaultIdleTrimInterval is how long a member must go without a client
// request or a page-store commit to count as idle. A quarter of a second:
// a member gives its memory back within half a second of a burst's end,
// before the next burst (a benchmark's or a client's next batch) usually
// starts; worthTrimming keeps a trickle of requests, idle this long every
// few seconds, from paying a collection each time.
const defaultIdleTrimInterval = 250 * time.Millisecond

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
		hs := readHeapStats()
		kept := uint64(s.be.DB().KeptBytes())
		if !s.idleTrimAlways && !worthTrimming(hs.live, hs.garbage+hs.free, kept) {
			s.lg.Debug("idle: not worth giving memory back", "heap-live", hs.live, "garbage", hs.garbage,
				"heap-free", hs.free, "writer-buffers", kept)
			continue
		}
		start := time.Now()
		s.be.DB().TrimMemory()
		returnMemory()
		s.lg.Debug("idle: gave memory back to the operating system", "took", time.Since(start),
			"heap-live", hs.live, "garbage", hs.garbage, "heap-free", hs.free, "writer-buffers", kept)
		if s.idleTrimmed != nil {
			s.idleTrimmed()
		}
	}
}

// returnMemory collects the heap twice, then returns what is free to the
// operating system. One collection is not enough after a burst: it moves
// what the sync.Pools hold (gRPC's and the codec's buffers, the page
// store's) to their victim caches, and only the next one frees them.
// After bench/compare.sh's single-member workloads, a member trimmed with
// the one collection of debug.FreeOSMemory was left at 48.6-51.0 MiB
// resident, with two at 46.3-46.7 MiB (three runs each).
func returnMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// worthTrimming decides whether an idle trim pays: the forced collection
// costs time in proportion to the live heap, so what it gives back
// (reclaimable: the garbage, and the free heap the runtime has not yet
// returned; kept: the writer's buffers) must be at least a quarter of the
// live heap, and at least 4 MiB. The free heap counts because a
// collection that ran on its own near a burst's end leaves next to no
// garbage but its freed spans still resident (15 MiB of them after
// compare.sh's watch run), and the trim returns them. A member under a
// steady trickle of requests (a Kubernetes control plane's leases) goes
// idle every few seconds; without this bound it would run a full
// collection of a large heap each time to free next to nothing. With it,
// such a member trims at most about once per collection of its own: the
// garbage and free heap must build up again first.
func worthTrimming(live, reclaimable, kept uint64) bool {
	return reclaimable+kept >= max(live/4, 4<<20)
}

// heapStats is what an idle trim weighs: the heap live at the last
// collection, the bytes of heap objects allocated since that are not yet
// collected, and the free heap still resident (freed spans the runtime
// has not yet returned to the operating system).
type heapStats struct{ live, garbage, free uint64 }

func readHeapStats() heapStats {
	samples := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}}
	rtmetrics.Read(samples)
	for _, s := range samples {
		if s.Value.Kind() != rtmetrics.KindUint64 {
			return heapStats{garbage: 1 << 62} // unknown: trim
		}
	}
	hs := heapStats{live: samples[0].Value.Uint64(), free: samples[2].Value.Uint64()}
	if objects := samples[1].Value.Uint64(); objects > hs.live {
		hs.garbage = objects - hs.live
	}
	return hs
}
