package server

// The cluster's version and downgrade state, kept as etcd keeps them so
// that etcd and Strata members of one cluster agree on them: both are
// decided through raft (ClusterVersionSet, DowngradeInfoSet) and stored in
// the cluster bucket, under etcd's keys (clusterVersion: "3.7.0";
// downgrade: {"target-version":"3.6.0","enabled":true}). A Strata leader
// proposes the cluster version when none is stored yet, as etcd's leader
// does once it has decided, so an etcd member that joins a cluster
// bootstrapped by Strata learns it from the log, not only from a
// snapshot.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/membershippb"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/raft/transport"
	"github.com/strata-db/strata/schema"
)

// downgradeKey is etcd's key of the downgrade state in the cluster bucket.
var downgradeKey = []byte("downgrade")

// etcdDowngradeInfo is the stored downgrade state, in etcd's JSON.
type etcdDowngradeInfo struct {
	TargetVersion string `json:"target-version"`
	Enabled       bool   `json:"enabled"`
}

// loadClusterState reads the stored cluster version and downgrade state
// (at start, and after a snapshot replaced the state).
func (s *Server) loadClusterState(db *pagestore.DB) error {
	var ver string
	var d etcdDowngradeInfo
	err := db.View(func(tx *pagestore.Tx) error {
		b, err := tx.Bucket(schema.Cluster)
		if errors.Is(err, pagestore.ErrBucketNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := b.Get(schema.ClusterVersionKey)
		if err != nil {
			return err
		}
		ver = string(v)
		raw, err := b.Get(downgradeKey)
		if err != nil || raw == nil {
			return err
		}
		return json.Unmarshal(raw, &d)
	})
	if err != nil {
		return err
	}
	s.clusterVersionSet.Store(ver != "")
	s.downgrade.mu.Lock()
	s.downgrade.enabled, s.downgrade.target = d.Enabled, d.TargetVersion
	s.downgrade.mu.Unlock()
	return nil
}

// applyClusterVersion stores the version the leader decided.
func (s *Server) applyClusterVersion(idx, term uint64, r *membershippb.ClusterVersionSetRequest) {
	w := s.be.BeginWrite()
	w.Put(schema.Cluster, schema.ClusterVersionKey, []byte(r.Ver))
	w.End(idx, term)
	s.clusterVersionSet.Store(true)
}

// applyDowngradeInfo stores and takes the downgrade state, as etcd does:
// a disabled downgrade has no target.
func (s *Server) applyDowngradeInfo(idx, term uint64, r *membershippb.DowngradeInfoSetRequest) {
	d := etcdDowngradeInfo{}
	if r.Enabled {
		d = etcdDowngradeInfo{Enabled: true, TargetVersion: r.Ver}
	}
	raw, _ := json.Marshal(d)
	w := s.be.BeginWrite()
	w.Put(schema.Cluster, downgradeKey, raw)
	w.End(idx, term)
	s.downgrade.mu.Lock()
	s.downgrade.enabled, s.downgrade.target = d.Enabled, d.TargetVersion
	s.downgrade.mu.Unlock()
}

// decideClusterVersion is the leader's part: once it leads and has
// applied its term's entries, it proposes the cluster version if the
// cluster has none stored.
func (s *Server) decideClusterVersion(ctx context.Context) error {
	if s.clusterVersionSet.Load() || !s.node.IsLeader() {
		return nil
	}
	res, err := s.propose(ctx, &pb.InternalRaftRequest{ClusterVersionSet: &membershippb.ClusterVersionSetRequest{Ver: ClusterVersion}})
	if err == nil {
		err = res.err
	}
	if err == nil {
		s.lg.Info("set initial cluster version", "cluster-version", majorMinor(ClusterVersion))
	}
	return err
}

// downgradeEnabledPath is etcd's peer endpoint that a member joining the
// cluster reads before it starts (is a downgrade enabled?).
const downgradeEnabledPath = "/downgrade/enabled"

// downgradeEnabledHandler answers downgradeEnabledPath as etcd does: a
// linearizable read, then "true" or "false" as text/plain.
type downgradeEnabledHandler struct{ s *Server }

func (h downgradeEnabledHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	if !allowOnlyGet(w, r) {
		return
	}
	w.Header().Set("X-Etcd-Cluster-ID", transport.FormatID(s.cluster))
	if r.URL.Path != downgradeEnabledPath {
		http.Error(w, "bad path", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.requestTimeout())
	defer cancel()
	if err := s.linearizableRead(ctx); err != nil {
		http.Error(w, fmt.Sprintf("failed linearized read: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Write([]byte(strconv.FormatBool(s.downgrade.info().Enabled)))
}
