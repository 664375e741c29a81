package server

import (
	"context"
	"errors"
	"syscall"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/server/config"
	"github.com/strata-db/strata/wal"
)

// A member whose WAL cannot be written, or whose page store needs a
// reopen, cannot recover in process: the WAL is failed for good (a failed
// fdatasync may have dropped dirty pages, so retrying is unsafe) and raft
// has stopped. Staying up would leave a half-alive process that answers
// "server stopped" until someone restarts it by hand. So the member logs
// one fatal line (the cause, the file, what to do), stops, and the process
// exits non-zero (cmd/strata), for systemd or the kubelet to restart it.
// A restart recovers everything acknowledged from the WAL. This is etcd's
// behaviour (it calls zap's Fatal on a failed WAL save), with a message
// that says what to do.

// watchNode turns a raft node that stopped on its own (a fatal error) into
// a stopped member. Started by Serve.
func (s *Server) watchNode() {
	select {
	case <-s.node.Done():
	case <-s.peers.tr.Removed():
		// A peer told this member it was removed from the cluster: etcd
		// stops then, and so does Strata.
		s.removedFromCluster()
		return
	case <-s.stopping:
		return
	}
	if err := s.node.Err(); err != nil {
		s.fatal(err)
	}
}

// fatal reports err once as the reason the member stops, and stops it in
// the background; Done closes when it has stopped and Err returns err.
func (s *Server) fatal(err error) {
	s.fatalOnce.Do(func() {
		s.fatalErr.Store(&err)
		msg, attrs := s.describeFatal(err)
		s.lg.Log(context.Background(), config.LevelFatal, msg, attrs...)
		go func() {
			if serr := s.Stop(); serr != nil {
				s.lg.Warn("while stopping after the fatal error", "error", serr)
			}
		}()
	})
}

// Err returns the error the member stopped on by itself, or nil.
func (s *Server) Err() error {
	if e := s.fatalErr.Load(); e != nil {
		return *e
	}
	return nil
}

// describeFatal is the fatal line for err: its message and attributes.
func (s *Server) describeFatal(err error) (string, []any) {
	restart := "restart strata (systemd or the kubelet does it on this exit): every acknowledged write is in the WAL and is recovered at start"
	var ioErr *wal.IOError
	if errors.As(err, &ioErr) {
		remedy := "check the disk holding the WAL (the kernel log names the device), then " + restart
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			remedy = "free space on the disk holding the WAL directory, then " + restart
		}
		return "cannot write the WAL; the member stops and the process exits",
			[]any{"error", ioErr.Error(), "file", ioErr.File, "wal-dir", s.cfg.WALDir(), "remedy", remedy}
	}
	if errors.Is(err, pagestore.ErrFailed) {
		return "the page store needs to be reopened after a failed commit; the member stops and the process exits",
			[]any{"error", err.Error(), "file", s.cfg.BackendPath(),
				"remedy", "check the disk holding the data directory, then " + restart}
	}
	if errors.Is(err, errRemoved) {
		return "the member has been permanently removed from the cluster; the member stops and the process exits",
			[]any{"remedy", "the data directory is no longer valid; to rejoin, remove it, add the member again ('etcdctl member add') and start it with --initial-cluster-state existing"}
	}
	return "raft stopped on an error; the member stops and the process exits",
		[]any{"error", err.Error(), "remedy", restart + "; if it happens again, report it with this log"}
}
