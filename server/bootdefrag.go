package server

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/strata-db/strata/pagestore"
)

// bootstrapDefrag is etcd's --bootstrap-defrag-threshold-megabytes: at
// start, before raft replays anything, the page store is defragmented if
// that would free at least the threshold (file size minus the bytes in
// use); otherwise etcd's "Skipping defragmentation" line says why not,
// with etcd's fields. A threshold of 0 (the default) turns it off. The
// defrag is the online one (mvcc.Backend.Defrag) run to the end: no client
// is being served yet, so nothing waits behind it.
func (s *Server) bootstrapDefrag() error {
	mb := s.cfg.BootstrapDefragThresholdMegabytes
	if mb == 0 {
		return nil
	}
	threshold := uint64(mb) * 1024 * 1024
	before := s.be.DB().Stats()
	freeable := uint64(max(0, before.FileSize-before.InUseBytes))
	if freeable < threshold {
		s.lg.Info("Skipping defragmentation",
			"current-db-size-bytes", before.FileSize,
			"current-db-size", humanBytes(uint64(before.FileSize)),
			"current-db-size-in-use-bytes", before.InUseBytes,
			"current-db-size-in-use", humanBytes(uint64(before.InUseBytes)),
			"bootstrap-defrag-threshold-bytes", threshold,
			"bootstrap-defrag-threshold", humanBytes(threshold))
		return nil
	}
	start := time.Now()
	s.logDefragStart(before)
	if err := s.be.Defrag(context.Background(), nil); err != nil {
		s.lg.Warn("failed to defragment", "path", s.cfg.BackendPath(), "error", err, "took", time.Since(start))
		return fmt.Errorf("server: bootstrap defragmentation of %s: %w", s.cfg.BackendPath(), err)
	}
	s.logDefragDone(before, time.Since(start))
	return nil
}

// logDefragStart and logDefragDone are etcd's backend lines around a
// defragmentation ("defragmenting", "finished defragmenting directory"),
// with etcd's fields.
func (s *Server) logDefragStart(before pagestore.Stats) {
	s.lg.Info("defragmenting", "path", s.cfg.BackendPath(),
		"current-db-size-bytes", before.FileSize,
		"current-db-size", humanBytes(uint64(before.FileSize)),
		"current-db-size-in-use-bytes", before.InUseBytes,
		"current-db-size-in-use", humanBytes(uint64(before.InUseBytes)))
}

func (s *Server) logDefragDone(before pagestore.Stats, took time.Duration) {
	after := s.be.DB().Stats()
	s.lg.Info("finished defragmenting directory", "path", s.cfg.BackendPath(),
		"current-db-size-bytes-diff", after.FileSize-before.FileSize,
		"current-db-size-bytes", after.FileSize,
		"current-db-size", humanBytes(uint64(after.FileSize)),
		"current-db-size-in-use-bytes-diff", after.InUseBytes-before.InUseBytes,
		"current-db-size-in-use-bytes", after.InUseBytes,
		"current-db-size-in-use", humanBytes(uint64(after.InUseBytes)),
		"took", took)
}

// humanBytes formats a byte count as etcd's logs do (go-humanize's
// Bytes): SI units of 1000, one decimal below 10 ("1.5 MB", "33 kB"),
// "n B" below 10 bytes.
func humanBytes(n uint64) string {
	if n < 10 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"B", "kB", "MB", "GB", "TB", "PB", "EB"}
	e := math.Floor(math.Log(float64(n)) / math.Log(1000))
	val := math.Floor(float64(n)/math.Pow(1000, e)*10+0.5) / 10
	if val < 10 {
		return fmt.Sprintf("%.1f %s", val, units[int(e)])
	}
	return fmt.Sprintf("%.0f %s", val, units[int(e)])
}
