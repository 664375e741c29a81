package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/raft/transport"
	"github.com/strata-db/strata/server/config"
)

// etcd's corruption checks between members, on its peer protocol: each
// member answers GET /members/hashkv on the peer port (a JSON
// HashKVRequest in, a JSON HashKVResponse out, as etcd's members do), and
//
//   - the initial check (feature gate InitialCorruptCheck, or
//     --experimental-initial-corrupt-check) compares this member's hash,
//     before it serves clients, with every peer's at the same revision:
//     a different hash at the same compact revision refuses the start
//     ("<id> found data inconsistency with peers");
//   - the periodic check (--corrupt-check-time > 0) runs on the leader:
//     its hash, the peers' at its revision, then its own again after a
//     linearizable read; a follower ahead of the leader, with a newer
//     compact revision, or with a different hash at the same compact
//     revision, raises the CORRUPT alarm for that member (the leader's own
//     when its two hashes differ), through raft like any alarm.
//   - the compaction hash check (feature gate CompactHashCheck, or
//     --experimental-compact-hash-check-enabled; every
//     --compact-hash-check-time) runs on the leader: each finished
//     compaction stores the hash of the key space at its revision
//     (mvcc.Store.Hashes), and the leader asks the peers for their hash at
//     the newest revisions it has not yet checked. Peers that compacted
//     from the same compact revision must agree; where they do not, the
//     members outside the majority hash get the CORRUPT alarm (member 0,
//     the whole cluster, when no hash has a majority).
//
// A raised CORRUPT alarm stops writes cluster-wide (corrupt.go), so a
// corrupt member's state never spreads: the others keep their data, and
// the operator replaces the member (member remove, member add, an empty
// data dir).

const peerHashKVPath = "/members/hashkv"

// allowOnlyGet answers anything but GET as etcd's peer endpoints do
// (405 with an Allow header) and reports whether r is a GET.
func allowOnlyGet(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet {
		return true
	}
	w.Header().Set("Allow", http.MethodGet)
	http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	return false
}

// hashKVHandler serves peerHashKVPath.
type hashKVHandler struct{ s *Server }

func (h hashKVHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	if !allowOnlyGet(w, r) {
		return
	}
	cid := transport.FormatID(s.cluster)
	if g := r.Header.Get("X-Etcd-Cluster-ID"); g != "" && g != cid {
		http.Error(w, "cluster ID mismatch", http.StatusPreconditionFailed)
		return
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "error reading body", http.StatusBadRequest)
		return
	}
	req := &pb.HashKVRequest{}
	if err := json.Unmarshal(b, req); err != nil {
		http.Error(w, "error unmarshalling request", http.StatusBadRequest)
		return
	}
	hash, rev, err := s.localHashKV(req.Revision)
	if err != nil {
		s.lg.Warn("failed to get hashKV", "requested-revision", req.Revision, "error", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := json.Marshal(&pb.HashKVResponse{Header: &pb.ResponseHeader{Revision: rev, MemberId: s.id},
		Hash: hash.Hash, CompactRevision: hash.CompactRevision, HashRevision: hash.Revision})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("X-Etcd-Cluster-ID", cid)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// localHashKV is this member's HashKV at rev (0: the current revision).
func (s *Server) localHashKV(rev int64) (mvcc.KeyValueHash, int64, error) {
	s.lockForRead()
	defer s.restoreMu.RUnlock()
	return s.kv.HashKV(rev)
}

// peerHash is one peer's answer to a hash request.
type peerHash struct {
	id   uint64
	urls []string
	resp *pb.HashKVResponse
	err  error
}

// peerHashes asks every other member for its hash at rev.
func (s *Server) peerHashes(rev int64) []peerHash {
	cc := &http.Client{Transport: s.peers.rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var out []peerHash
	for _, m := range s.members.List() {
		if m.ID == s.id || len(m.PeerURLs) == 0 {
			continue
		}
		p := peerHash{id: m.ID, urls: m.PeerURLs}
		for _, u := range m.PeerURLs {
			ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
			p.resp, p.err = s.hashByRev(ctx, cc, u, rev)
			cancel()
			if p.err == nil {
				break
			}
			s.lg.Warn("failed hash kv request", "local-member-id", transport.FormatID(s.id),
				"requested-revision", rev, "remote-peer-endpoint", u, "error", p.err)
		}
		out = append(out, p)
	}
	return out
}

// hashByRev asks the peer at url for its hash at rev (etcd's HashByRev).
func (s *Server) hashByRev(ctx context.Context, cc *http.Client, url string, rev int64) (*pb.HashKVResponse, error) {
	body, err := json.Marshal(&pb.HashKVRequest{Revision: rev})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+peerHashKVPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Etcd-Cluster-ID", transport.FormatID(s.cluster))
	resp, err := cc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusBadRequest && strings.Contains(string(b), mvcc.ErrCompacted.Error()):
		return nil, rpctypes.ErrCompacted
	case resp.StatusCode == http.StatusBadRequest && strings.Contains(string(b), mvcc.ErrFutureRev.Error()):
		return nil, rpctypes.ErrFutureRev
	case resp.StatusCode == http.StatusPreconditionFailed:
		return nil, rpctypes.ErrClusterIDMismatch
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("unknown error: %s", b)
	}
	out := &pb.HashKVResponse{}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, err
	}
	return out, nil
}

// initialCorruptCheck is etcd's InitialCheck; run before clients are
// served when the InitialCorruptCheck gate is on.
func (s *Server) initialCorruptCheck() error {
	id := transport.FormatID(s.id)
	s.lg.Info("starting initial corruption check", "local-member-id", id, "timeout", s.requestTimeout().String())
	h, _, err := s.localHashKV(0)
	if err != nil {
		return fmt.Errorf("%s failed to fetch hash (%w)", id, err)
	}
	mismatch := 0
	for _, p := range s.peerHashes(h.Revision) {
		if p.resp == nil {
			switch {
			case errors.Is(p.err, rpctypes.ErrFutureRev):
				s.lg.Warn("cannot fetch hash from slow remote peer", "local-member-id", id, "remote-peer-id", transport.FormatID(p.id))
			case errors.Is(p.err, rpctypes.ErrCompacted):
				s.lg.Warn("cannot fetch hash from remote peer; local member is behind", "local-member-id", id, "remote-peer-id", transport.FormatID(p.id))
			case errors.Is(p.err, rpctypes.ErrClusterIDMismatch):
				s.lg.Warn("cluster ID mismatch", "local-member-id", id, "remote-peer-id", transport.FormatID(p.id))
			}
			continue
		}
		if h.Hash == p.resp.Hash {
			continue
		}
		attrs := []any{"local-member-id", id, "local-member-revision", h.Revision,
			"local-member-compact-revision", h.CompactRevision, "local-member-hash", h.Hash,
			"remote-peer-id", transport.FormatID(p.id), "remote-peer-endpoints", p.urls,
			"remote-peer-revision", p.resp.Header.GetRevision(), "remote-peer-compact-revision", p.resp.CompactRevision,
			"remote-peer-hash", p.resp.Hash}
		if h.CompactRevision == p.resp.CompactRevision {
			s.lg.Warn("found different hash values from remote peer", attrs...)
			mismatch++
		} else {
			s.lg.Warn("found different compact revision values from remote peer", attrs...)
		}
	}
	if mismatch > 0 {
		return fmt.Errorf("%s found data inconsistency with peers", id)
	}
	s.lg.Info("initial corruption checking passed; no corruption", "local-member-id", id)
	return nil
}

// runCorruptCheck runs the periodic check every --corrupt-check-time on
// the leader, until the member stops.
func (s *Server) runCorruptCheck() {
	every := s.cfg.CorruptCheckTime
	if every <= 0 {
		return
	}
	s.lg.Info("enabled corruption checking", "local-member-id", transport.FormatID(s.id), "interval", every.String())
	s.everyOnLeader(every, func() {
		if err := s.periodicCorruptCheck(); err != nil {
			s.lg.Warn("failed to check hash KV", "error", err)
		}
	})
}

// everyOnLeader runs check every interval while this member leads, until
// the member stops.
func (s *Server) everyOnLeader(every time.Duration, check func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.stopping:
			return
		}
		if s.node.IsLeader() {
			check()
		}
	}
}

// periodicCorruptCheck is etcd's PeriodicCheck.
func (s *Server) periodicCorruptCheck() error {
	h, _, err := s.localHashKV(0)
	if err != nil {
		return err
	}
	peers := s.peerHashes(h.Revision)
	ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
	err = s.linearizableRead(ctx)
	cancel()
	if err != nil {
		return err
	}
	h2, rev2, err := s.localHashKV(0)
	if err != nil {
		return err
	}
	alarmed := false
	mismatch := func(id uint64) {
		if !alarmed {
			alarmed = true
			s.raiseCorruptAlarm(id)
		}
	}
	if h2.Hash != h.Hash && h2.Revision == h.Revision && h.CompactRevision == h2.CompactRevision {
		s.lg.Warn("found hash mismatch", "revision-1", h.Revision, "compact-revision-1", h.CompactRevision, "hash-1", h.Hash,
			"revision-2", h2.Revision, "compact-revision-2", h2.CompactRevision, "hash-2", h2.Hash)
		mismatch(s.id)
	}
	checked := 0
	for _, p := range peers {
		if p.resp == nil {
			continue
		}
		checked++
		peer := transport.FormatID(p.id)
		switch {
		case p.resp.Header.GetRevision() > rev2:
			s.lg.Warn("revision from follower must be less than or equal to leader's",
				"leader-revision", rev2, "follower-revision", p.resp.Header.GetRevision(), "follower-peer-id", peer)
			mismatch(p.id)
		case p.resp.CompactRevision > h2.CompactRevision:
			s.lg.Warn("compact revision from follower must be less than or equal to leader's",
				"leader-compact-revision", h2.CompactRevision, "follower-compact-revision", p.resp.CompactRevision, "follower-peer-id", peer)
			mismatch(p.id)
		case p.resp.CompactRevision == h.CompactRevision && p.resp.Hash != h.Hash:
			s.lg.Warn("same compact revision then hashes must match",
				"leader-compact-revision", h2.CompactRevision, "leader-hash", h.Hash,
				"follower-compact-revision", p.resp.CompactRevision, "follower-hash", p.resp.Hash, "follower-peer-id", peer)
			mismatch(p.id)
		}
	}
	s.lg.Info("finished peer corruption check", "number-of-peers-checked", checked)
	return nil
}

// runCompactHashCheck runs the compaction hash check every
// --compact-hash-check-time on the leader while its gate is on.
func (s *Server) runCompactHashCheck() {
	if !s.cfg.FeatureEnabled(config.FeatureCompactHashCheck) {
		return
	}
	every := s.cfg.CompactHashCheckTime
	s.lg.Info("enabled compaction hash check", "local-member-id", transport.FormatID(s.id), "interval", every.String())
	s.everyOnLeader(every, s.compactHashCheck)
}

// compactHashCheck is one round of the compaction hash check (etcd's
// CompactHashCheck): the stored compaction hashes newer than the last
// revision checked on every member, newest first, until one could be
// compared with every peer (or raised an alarm).
func (s *Server) compactHashCheck() {
	s.lg.Info("starting compact hash check", "local-member-id", transport.FormatID(s.id), "timeout", s.requestTimeout().String())
	hashes := s.kv.Hashes()
	checked := 0
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i]
		if h.Revision <= s.compactChecked.Load() {
			break
		}
		checked++
		peers := s.peerHashes(h.Revision)
		if len(peers) == 0 {
			continue
		}
		if s.comparePeerHashes(h, peers) {
			break
		}
	}
	s.lg.Info("finished compaction hash check", "number-of-hashes-checked", checked)
}

// comparePeerHashes compares the leader's compaction hash h with the
// peers' answers for its revision. It reports whether the round is over:
// every peer agreed (the revision counts as checked), or a mismatch
// raised alarms. A peer that did not answer, or whose hash is from
// another compact revision (its compaction was interrupted, or has not
// finished), is skipped; then the next older hash is tried.
func (s *Server) comparePeerHashes(h mvcc.KeyValueHash, peers []peerHash) bool {
	byHash := map[uint32][]uint64{h.Hash: {s.id}}
	compared := 0
	for _, p := range peers {
		reason := ""
		switch {
		case p.resp == nil:
			reason = "no response"
		case p.resp.CompactRevision != h.CompactRevision:
			reason = fmt.Sprintf("the peer's compact revision %d is not the leader's %d", p.resp.CompactRevision, h.CompactRevision)
		}
		if reason != "" {
			s.lg.Warn("skipped peer's hash", "number-of-peers", len(peers), "leader-id", transport.FormatID(s.id),
				"peer-id", transport.FormatID(p.id), "reason", reason)
			continue
		}
		compared++
		byHash[p.resp.Hash] = append(byHash[p.resp.Hash], p.id)
	}
	if len(byHash) == 1 {
		if compared < len(peers) {
			s.lg.Warn("skipped revision in compaction hash check; was not able to check all peers",
				"number-of-peers-checked", compared, "number-of-peers", len(peers), "revision", h.Revision, "compact-revision", h.CompactRevision)
			return false
		}
		s.lg.Info("successfully checked hash on whole cluster", "number-of-peers-checked", compared,
			"revision", h.Revision, "compact-revision", h.CompactRevision)
		for {
			old := s.compactChecked.Load()
			if h.Revision <= old || s.compactChecked.CompareAndSwap(old, h.Revision) {
				break
			}
		}
		return true
	}
	// A mismatch: the members outside a majority hash are the corrupt
	// ones. With no majority nobody can tell; the alarm names member 0.
	quorum := (len(peers)+1)/2 + 1
	majority, found := uint32(0), false
	for hv, ids := range byHash {
		if len(ids) >= quorum {
			majority, found = hv, true
			break
		}
	}
	if !found {
		s.lg.Error("detected compaction hash mismatch but cannot identify the corrupted members, so the alarm names member 0",
			"leader-id", transport.FormatID(s.id), "leader-revision", h.Revision, "leader-compact-revision", h.CompactRevision, "leader-hash", h.Hash)
		s.raiseCorruptAlarm(0)
	}
	for hv, ids := range byHash {
		if found && hv == majority {
			continue
		}
		if found {
			for _, id := range ids {
				s.raiseCorruptAlarm(id)
			}
		}
		names := make([]string, len(ids))
		for i, id := range ids {
			names[i] = transport.FormatID(id)
		}
		s.lg.Error("detected compaction hash mismatch", "leader-id", transport.FormatID(s.id), "leader-revision", h.Revision,
			"leader-compact-revision", h.CompactRevision, "leader-hash", h.Hash, "peer-hash", hv,
			"peer-ids", strings.Join(names, ","), "quorum-exist", found)
	}
	return true
}

// raiseCorruptAlarm proposes the CORRUPT alarm for member id.
func (s *Server) raiseCorruptAlarm(id uint64) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
		defer cancel()
		_, err := s.propose(ctx, &pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{
			MemberID: id, Action: pb.AlarmRequest_ACTIVATE, Alarm: pb.AlarmType_CORRUPT}})
		if err != nil {
			s.lg.Warn("failed to raise the CORRUPT alarm", "member-id", transport.FormatID(id), "error", err)
		}
	}()
}

// corruptChecksAtStart runs the initial check if its gate is on.
func (s *Server) corruptChecksAtStart() error {
	// As etcd, only a member that was already initialized is checked: a
	// new one holds nothing yet.
	if !s.cfg.FeatureEnabled(config.FeatureInitialCorruptCheck) || !s.initialized {
		return nil
	}
	return s.initialCorruptCheck()
}
