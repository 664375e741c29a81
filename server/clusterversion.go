package server

// The cluster's version, the storage version and the downgrade state,
// kept as etcd 3.7 keeps them so that etcd and Strata members of one
// cluster agree on them and an operator's downgrade runs as etcd's does.
//
//   - The cluster version is decided by the leader and set through raft
//     (ClusterVersionSet), stored in the cluster bucket (clusterVersion:
//     "3.7.0"). The leader's monitor (runVersionMonitor, etcd's
//     monitorClusterVersions) asks every member for its server version
//     on the peer port every 4 s and when it starts to lead: the cluster
//     version is the lowest server version (3.0 while one is unknown and
//     none is set); with a downgrade enabled it is the downgrade's target.
//   - The storage version ("storageVersion" in meta, etcd's key) follows
//     the cluster version on every member. etcd's storage monitor writes
//     it within seconds of the change; here it is written by the apply of
//     ClusterVersionSet itself, in the same batch as the cluster version,
//     so the two never disagree after a crash. Once it has followed a
//     downgrade, the member logs etcd's "The server is ready to
//     downgrade". Strata's page store has nothing a 3.6 server would
//     read differently, so the migration is the version alone, as etcd
//     3.7's own migration to 3.6 is.
//   - The downgrade state is set through raft (DowngradeInfoSet) and
//     stored in the cluster bucket (downgrade: {"target-version":
//     "3.6.0","enabled":true}). The leader's downgrade monitor (every
//     --downgrade-check-time, etcd's monitorDowngrade) cancels it once
//     every member runs the target version.
//
// A Strata leader proposes, a Strata follower applies, exactly what an
// etcd leader or follower would, so mixed clusters move together.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/membershippb"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/raft/transport"
	"github.com/strata-db/strata/schema"
)

// minClusterVersion is etcd's MinClusterVersion: what a leader sets
// while some member's version is unknown.
const minClusterVersion = "3.0.0"

// versionMonitorInterval is etcd's monitorVersionInterval (its peer
// connection write timeout less a second).
const versionMonitorInterval = 4 * time.Second

// downgradeKey is etcd's key of the downgrade state in the cluster bucket.
var downgradeKey = []byte("downgrade")

// etcdDowngradeInfo is the stored downgrade state, in etcd's JSON.
type etcdDowngradeInfo struct {
	TargetVersion string `json:"target-version"`
	Enabled       bool   `json:"enabled"`
}

// clusterVersions holds the member's view of the three. Apply and
// restore write it; anything may read it.
type clusterVersions struct {
	mu sync.Mutex
	// cluster is the cluster version as stored ("3.7.0"), "" until one
	// is decided.
	cluster string
	// storage is the storage version as stored, "" where the page store
	// has none (a data dir older than the key, or no cluster version
	// set yet): the member then reports its cluster version.
	storage   string
	downgrade etcdDowngradeInfo
	// gauge is etcd_cluster_version, one series per version the member
	// has been at: 1 for the current one, 0 for the ones before.
	gauge *prometheus.GaugeVec
}

func newClusterVersions() *clusterVersions {
	return &clusterVersions{gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "cluster", Name: "version",
		Help: "Which version is running. 1 for 'cluster_version' label with current cluster version"}, []string{"cluster_version"})}
}

// Cluster is the cluster version, "" when none is decided.
func (v *clusterVersions) Cluster() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cluster
}

// Storage is the storage version: as stored, else the cluster version.
func (v *clusterVersions) Storage() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.storage != "" {
		return v.storage
	}
	return v.cluster
}

// Downgrade is the downgrade state.
func (v *clusterVersions) Downgrade() etcdDowngradeInfo {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.downgrade
}

func (v *clusterVersions) info() *pb.DowngradeInfo {
	d := v.Downgrade()
	return &pb.DowngradeInfo{Enabled: d.Enabled, TargetVersion: d.TargetVersion}
}

// reported is the cluster version as /version and the peers' /version
// show it: "not_decided" until there is one.
func (v *clusterVersions) reported() string {
	if c := v.Cluster(); c != "" {
		return c
	}
	return "not_decided"
}

// setGauge moves etcd_cluster_version from one version to another.
func (v *clusterVersions) setGauge(from, to string) {
	if from != "" && majorMinor(from) != majorMinor(to) {
		v.gauge.WithLabelValues(majorMinor(from)).Set(0)
	}
	v.gauge.WithLabelValues(majorMinor(to)).Set(1)
}

// loadClusterState reads the stored cluster version, storage version
// and downgrade state (at start, and after a snapshot replaced the
// state).
func (s *Server) loadClusterState(db *pagestore.DB) error {
	var cluster, storage string
	var d etcdDowngradeInfo
	err := db.View(func(tx *pagestore.Tx) error {
		if m, err := tx.Bucket(schema.Meta); err == nil {
			v, err := m.Get(schema.MetaStorageVersion)
			if err != nil {
				return err
			}
			storage = string(v)
		} else if !errors.Is(err, pagestore.ErrBucketNotFound) {
			return err
		}
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
		cluster = string(v)
		raw, err := b.Get(downgradeKey)
		if err != nil || raw == nil {
			return err
		}
		return json.Unmarshal(raw, &d)
	})
	if err != nil {
		return err
	}
	v := s.versions
	v.mu.Lock()
	prev := v.cluster
	v.cluster, v.storage, v.downgrade = cluster, storage, d
	v.mu.Unlock()
	if cluster != "" {
		v.setGauge(prev, cluster)
	}
	return nil
}

// applyClusterVersion takes the version the leader decided, and the
// storage version with it, as etcd's SetVersion and storage monitor do
// (with their log lines).
func (s *Server) applyClusterVersion(idx, term uint64, r *membershippb.ClusterVersionSetRequest) {
	v := s.versions
	major, minor, ok := parseSemver(r.Ver)
	if !ok {
		// etcd's apply panics on a version it cannot parse; a leader
		// never proposes one.
		s.lg.Error("ignored a cluster version that is not a version", "cluster-version", r.Ver)
		s.be.BeginWrite().End(idx, term)
		return
	}
	ver := fmt.Sprintf("%d.%d.0", major, minor)
	prev, storage := v.Cluster(), v.Storage()
	if prev != "" {
		s.lg.Info("updated cluster version", "cluster-id", transport.FormatID(s.cluster), "local-member-id", transport.FormatID(s.id),
			"from", majorMinor(prev), "to", majorMinor(ver))
	} else {
		s.lg.Info("set initial cluster version", "cluster-id", transport.FormatID(s.cluster), "local-member-id", transport.FormatID(s.id),
			"cluster-version", majorMinor(ver))
	}
	smaj, smin, _ := parseSemver(EtcdVersion)
	if smaj < major || smaj == major && smin < minor {
		// etcd's MustDetectDowngrade: this binary is older than the
		// cluster. etcd panics; the member stops the same way a fatal
		// error stops it.
		s.lg.Error("invalid downgrade; server version is lower than determined cluster version",
			"current-server-version", fmt.Sprintf("%d.%d.0", smaj, smin), "determined-cluster-version", majorMinor(ver))
		go s.fatal(fmt.Errorf("server version %s is lower than the cluster version %s", EtcdVersion, ver))
	}
	w := s.be.BeginWrite()
	w.Put(schema.Cluster, schema.ClusterVersionKey, []byte(ver))
	newStorage := ""
	if ver != minClusterVersion && majorMinor(storage) != majorMinor(ver) {
		if storage != "" && prev != "" {
			s.lg.Info("cluster version differs from storage version.", "cluster-version", ver, "storage-version", storage)
		}
		newStorage = ver
		w.Put(schema.Meta, schema.MetaStorageVersion, []byte(ver))
	}
	w.End(idx, term)
	v.mu.Lock()
	v.cluster = ver
	if newStorage != "" {
		v.storage = newStorage
	}
	d := v.downgrade
	v.mu.Unlock()
	v.setGauge(prev, ver)
	s.lg.Info("enabled capabilities for version", "cluster-version", majorMinor(ver))
	if pmaj, pmin, ok := parseSemver(prev); ok && versionLess(major, minor, pmaj, pmin) {
		// As etcd: a snapshot right away, so that the log a member of
		// the older version reads at start holds nothing from before.
		s.lg.Info("Cluster version downgrade detected, forcing snapshot", "prev-cluster-version", prev, "new-cluster-version", ver)
		s.node.ForceSnapshot()
	}
	if newStorage != "" {
		s.lg.Info("updated storage version", "new-storage-version", newStorage)
		if d.Enabled {
			s.lg.Info("The server is ready to downgrade", "target-version", d.TargetVersion, "server-version", EtcdVersion)
		}
	}
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
	s.versions.mu.Lock()
	s.versions.downgrade = d
	s.versions.mu.Unlock()
}

// memberVersions is etcd's version.Versions as a peer's /version gives
// it.
type memberVersions struct {
	Server  string `json:"etcdserver"`
	Cluster string `json:"etcdcluster"`
}

// membersVersions asks every member for its versions (etcd's
// getMembersVersions): this member answers itself; a member that cannot
// be reached is nil.
func (s *Server) membersVersions() map[uint64]*memberVersions {
	cc, done, err := s.peerHTTPClient(s.requestTimeout())
	if err != nil {
		s.lg.Warn("failed to get version", "error", err)
		return nil
	}
	defer done()
	out := map[uint64]*memberVersions{}
	for _, m := range s.members.List() {
		if m.ID == s.id {
			out[m.ID] = &memberVersions{Server: EtcdVersion, Cluster: s.versions.reported()}
			continue
		}
		var v *memberVersions
		var lastErr error
		for _, u := range m.PeerURLs {
			addr := u + "/version"
			resp, err := cc.Get(addr)
			if err != nil {
				s.lg.Warn("failed to reach the peer URL", "address", addr, "remote-member-id", transport.FormatID(m.ID), "error", err)
				lastErr = err
				continue
			}
			b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if err != nil {
				s.lg.Warn("failed to read body of response", "address", addr, "remote-member-id", transport.FormatID(m.ID), "error", err)
				lastErr = err
				continue
			}
			var mv memberVersions
			if err := json.Unmarshal(b, &mv); err != nil {
				s.lg.Warn("failed to unmarshal response", "address", addr, "remote-member-id", transport.FormatID(m.ID), "error", err)
				lastErr = err
				continue
			}
			v = &mv
			break
		}
		if v == nil {
			s.lg.Warn("failed to get version", "remote-member-id", transport.FormatID(m.ID), "error", lastErr)
		}
		out[m.ID] = v
	}
	return out
}

// minServerVersion is the lowest server version of vers (major.minor),
// ok false when one is unknown (etcd's membersMinimalServerVersion,
// which also warns of a member newer than this one).
func (s *Server) minServerVersion(vers map[uint64]*memberVersions) (major, minor int64, ok bool) {
	lmaj, lmin, _ := parseSemver(EtcdVersion)
	first := true
	for id, v := range vers {
		if v == nil {
			return 0, 0, false
		}
		maj, min, parsed := parseSemver(v.Server)
		if !parsed {
			s.lg.Warn("failed to parse server version of remote member", "remote-member-id", transport.FormatID(id), "remote-member-version", v.Server)
			return 0, 0, false
		}
		if versionLess(lmaj, lmin, maj, min) {
			s.lg.Warn("leader found higher-versioned member", "local-member-version", EtcdVersion,
				"remote-member-id", transport.FormatID(id), "remote-member-version", v.Server)
		}
		if first || versionLess(maj, min, major, minor) {
			major, minor, first = maj, min, false
		}
	}
	return major, minor, !first
}

func versionLess(amaj, amin, bmaj, bmin int64) bool {
	return amaj < bmaj || amaj == bmaj && amin < bmin
}

// decideClusterVersion is etcd's: the version the cluster should be at
// now, or "" to leave it as it is.
func (s *Server) decideClusterVersion(vers map[uint64]*memberVersions) (string, error) {
	cur := s.versions.Cluster()
	minMaj, minMin, known := s.minServerVersion(vers)
	if cur == "" {
		if known {
			return fmt.Sprintf("%d.%d.0", minMaj, minMin), nil
		}
		return minClusterVersion, nil
	}
	if !known {
		return "", nil
	}
	cmaj, cmin, _ := parseSemver(cur)
	if d := s.versions.Downgrade(); d.Enabled {
		tmaj, tmin, _ := parseSemver(d.TargetVersion)
		if tmaj == cmaj && tmin == cmin {
			return "", nil
		}
		if !(tmaj == cmaj && tmin == cmin-1) {
			s.lg.Error("Cannot downgrade from cluster-version to downgrade-target", "downgrade-target", d.TargetVersion, "cluster-version", cur)
			return "", errors.New("invalid downgrade target")
		}
		if !(tmaj == minMaj && tmin == minMin-1) {
			s.lg.Error("Cannot downgrade from minimal-server-version to downgrade-target", "downgrade-target", d.TargetVersion,
				"minimal-server-version", fmt.Sprintf("%d.%d.0", minMaj, minMin))
			return "", errors.New("invalid downgrade target")
		}
		return fmt.Sprintf("%d.%d.0", tmaj, tmin), nil
	}
	// etcd's IsValidClusterVersionChange: up within the major version,
	// or one minor down.
	if versionLess(cmaj, cmin, minMaj, minMin) && cmaj == minMaj {
		return fmt.Sprintf("%d.%d.0", minMaj, minMin), nil
	}
	return "", nil
}

// updateClusterVersion proposes ver, as etcd's updateClusterVersionV3.
func (s *Server) updateClusterVersion(ver string) {
	if cur := s.versions.Cluster(); cur == "" {
		s.lg.Info("setting up initial cluster version using v3 API", "cluster-version", majorMinor(ver))
	} else {
		s.lg.Info("updating cluster version using v3 API", "from", majorMinor(cur), "to", majorMinor(ver))
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
	res, err := s.propose(ctx, &pb.InternalRaftRequest{ClusterVersionSet: &membershippb.ClusterVersionSetRequest{Ver: ver}})
	cancel()
	if err == nil {
		err = res.err
	}
	switch {
	case err == nil:
		s.lg.Info("cluster version is updated", "cluster-version", majorMinor(ver))
	case errors.Is(err, errStopped):
		s.lg.Warn("aborting cluster version update; server is stopped", "error", err)
	default:
		s.lg.Warn("failed to update cluster version", "error", err)
	}
}

// runVersionMonitor is the leader's version duty (etcd's
// monitorClusterVersions), every versionMonitorInterval and as soon as
// this member starts to lead with its term's entries applied (lead).
func (s *Server) runVersionMonitor(lead <-chan struct{}) {
	t := time.NewTicker(versionMonitorInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopping:
			s.lg.Info("server has stopped; stopping cluster version's monitor")
			return
		case <-lead:
		case <-t.C:
		}
		if !s.node.IsLeader() {
			continue
		}
		ver, err := s.decideClusterVersion(s.membersVersions())
		if ver != "" {
			s.updateClusterVersion(ver)
		}
		if err != nil {
			s.lg.Error("Failed to monitor cluster version", "error", err)
		}
	}
}

// runDowngradeMonitor is etcd's monitorDowngrade: every
// --downgrade-check-time the leader cancels an enabled downgrade once
// every member's server version is the target's.
func (s *Server) runDowngradeMonitor() {
	every := s.cfg.DowngradeCheckTime
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stopping:
			return
		case <-t.C:
		}
		d := s.versions.Downgrade()
		if !s.node.IsLeader() || !d.Enabled {
			continue
		}
		if !s.versionsMatch(d.TargetVersion, s.membersVersions()) {
			continue
		}
		s.lg.Info("the cluster has been downgraded", "cluster-version", d.TargetVersion)
		ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
		if err := s.proposeDowngrade(ctx, false, ""); err != nil {
			s.lg.Warn("failed to cancel downgrade", "error", err)
		}
		cancel()
	}
}

// versionsMatch reports whether every member runs target's major.minor
// (etcd's versionsMatchTarget, with its warning for the first that does
// not).
func (s *Server) versionsMatch(target string, vers map[uint64]*memberVersions) bool {
	tmaj, tmin, _ := parseSemver(target)
	for id, v := range vers {
		if v == nil {
			return false
		}
		maj, min, ok := parseSemver(v.Server)
		if !ok {
			s.lg.Warn("failed to parse server version of remote member", "remote-member-id", transport.FormatID(id), "remote-member-version", v.Server)
			return false
		}
		if maj != tmaj || min != tmin {
			s.lg.Warn("remotes server has mismatching etcd version", "remote-member-id", transport.FormatID(id),
				"current-server-version", fmt.Sprintf("%d.%d.0", maj, min), "target-version", fmt.Sprintf("%d.%d.0", tmaj, tmin))
			return false
		}
	}
	return true
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
	w.Write([]byte(strconv.FormatBool(s.versions.Downgrade().Enabled)))
}
