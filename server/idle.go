package server

import (
	"runtime/debug"
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
// long as it stayed idle. Once per burst: an idle member does no work.
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
		start := time.Now()
		s.be.DB().TrimMemory()
		debug.FreeOSMemory()
		s.lg.Debug("idle: gave memory back to the operating system", "took", time.Since(start))
		if s.idleTrimmed != nil {
			s.idleTrimmed()
		}
	}
}
