package server

import (
	"context"
	"errors"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/server/config"
)

// Automatic compaction (--auto-compaction-mode / -retention), as etcd
// does it, on the leader only:
//
//   - revision mode: every 5 minutes, compact to the current revision
//     minus the retention, unless that was already done;
//   - periodic mode, retention P: sample the revision every min(P, 1h)/10
//     and compact to the revision sampled P ago; the first compaction
//     waits P, later ones come every min(P, 1h).

// revisionCompactInterval is etcd's check interval in revision mode.
var revisionCompactInterval = 5 * time.Minute

func (s *Server) runAutoCompaction() {
	ac, err := s.cfg.AutoCompaction()
	if err != nil || (ac.Period == 0 && ac.Revisions == 0) {
		return
	}
	s.lg.Info("auto compaction enabled", "mode", ac.Mode, "retention", s.cfg.AutoCompactionRetention)
	compact := func(rev int64) bool {
		if !s.node.IsLeader() {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
		defer cancel()
		res, err := s.propose(ctx, &pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: rev}})
		if err == nil {
			err = res.err
		}
		if err != nil && !errors.Is(err, mvcc.ErrCompacted) {
			s.lg.Warn("failed auto compaction", "revision", rev, "error", err)
			return false
		}
		s.lg.Info("completed auto compaction", "revision", rev)
		return true
	}
	switch ac.Mode {
	case config.CompactionModeRevision:
		prev := int64(0)
		for {
			select {
			case <-s.stopping:
				return
			case <-time.After(revisionCompactInterval):
			}
			rev := s.kv.Rev() - ac.Revisions
			if rev <= 0 || rev == prev {
				continue
			}
			if compact(rev) {
				prev = rev
			}
		}
	case config.CompactionModePeriodic:
		interval := min(ac.Period, time.Hour)
		sample := interval / 10
		keep := int(ac.Period/sample) + 1
		revs := make([]int64, 0, keep)
		wait := ac.Period // the first compaction waits a whole period
		last, lastDone := int64(0), time.Now()
		for {
			revs = append(revs, s.kv.Rev())
			if len(revs) > keep {
				revs = revs[1:] // revs[0] is the revision one period ago
			}
			select {
			case <-s.stopping:
				return
			case <-time.After(sample):
			}
			rev := revs[0]
			if time.Since(lastDone) < wait || rev == last {
				continue
			}
			wait = interval
			if compact(rev) {
				last, lastDone = rev, time.Now()
			}
		}
	}
}
