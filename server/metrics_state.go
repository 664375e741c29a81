package server

import (
	"github.com/strata-db/strata/membership"
	"os"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// stateCollectors are the gauges etcd keeps up to date as its state
// changes and Strata reads from its state when scraped. Each read is a
// load of a few atomics or a short lock; none walks the database (the
// key count is kept by the index as keys come and go).
func stateCollectors(s *Server) []prometheus.Collector {
	gf := func(ns, sub, name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, f)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	info := func(sub, name, label, value, help string) prometheus.Collector {
		gv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: sub, Name: name, Help: help}, []string{label})
		gv.WithLabelValues(value).Set(1)
		return gv
	}
	quota := float64(s.quotaBytes())
	features := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "etcd_server_feature_enabled",
		Help: "Whether or not a feature is enabled. 1 is enabled, 0 is not."}, []string{"name", "stage"})
	for _, f := range s.cfg.FeatureGateList() {
		features.WithLabelValues(f.Name, f.Stage).Set(b2f(f.Enabled))
	}
	return []prometheus.Collector{
		// Raft. etcd sets the proposal gauges from raft's commit index and
		// its applied index, which count every entry, not only proposals.
		gf("etcd", "server", "has_leader", "Whether or not a leader exists. 1 is existence, 0 is not.",
			func() float64 { return b2f(s.node.Status().Leader != 0) }),
		gf("etcd", "server", "is_leader", "Whether or not this member is a leader. 1 if is, 0 otherwise.",
			func() float64 { return b2f(s.node.IsLeader()) }),
		gf("etcd", "server", "is_learner", "Whether or not this member is a learner. 1 if is, 0 otherwise.",
			func() float64 { m := s.members.Get(s.id); return b2f(m != nil && m.IsLearner) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: "leader_changes_seen_total",
			Help: "The number of leader changes seen."}, func() float64 { return float64(s.node.Status().LeaderChanges) }),
		gf("etcd", "server", "proposals_committed_total", "The total number of consensus proposals committed.",
			func() float64 { return float64(s.node.Status().Committed) }),
		gf("etcd", "server", "proposals_applied_total", "The total number of consensus proposals applied.",
			func() float64 { return float64(s.node.Status().Applied) }),
		gf("etcd", "server", "quota_backend_bytes", "Current backend storage quota size in bytes.", func() float64 { return quota }),
		info("server", "version", "server_version", EtcdVersion, "Which version is running. 1 for 'server_version' label with current version."),
		info("server", "go_version", "server_go_version", runtime.Version(),
			"Which Go version server is running with. 1 for 'server_go_version' label with current version."),
		info("server", "id", "server_id", hexID(s.id), "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID."),
		// etcd labels the cluster version major.minor.
		s.versions.gauge,
		features,
		&knownPeers{s: s},
		s.alarms.gauge,

		// The store.
		gf("etcd_debugging", "mvcc", "keys_total", "Total number of keys.", func() float64 { return float64(s.kv.KeyCount()) }),
		gf("etcd_debugging", "mvcc", "current_revision", "The current revision of store.", func() float64 { return float64(s.kv.Rev()) }),
		gf("etcd_debugging", "mvcc", "compact_revision", "The revision of the last compaction in store.",
			func() float64 { return float64(s.kv.CompactRev()) }),
		gf("etcd_debugging", "mvcc", "watcher_total", "Total number of watchers.", func() float64 { return float64(s.watch.WatcherTotal()) }),
		gf("etcd_debugging", "mvcc", "slow_watcher_total", "Total number of unsynced slow watchers.",
			func() float64 { return float64(s.watch.SlowWatcherTotal()) }),
		gf("etcd", "mvcc", "db_total_size_in_bytes", "Total size of the underlying database physically allocated in bytes.",
			func() float64 { return float64(s.be.DB().Stats().FileSize) }),
		gf("etcd", "mvcc", "db_total_size_in_use_in_bytes", "Total size of the underlying database logically in use in bytes.",
			func() float64 { return float64(s.be.DB().InUseBytes()) }),
		gf("etcd", "mvcc", "db_open_read_transactions", "The number of currently open read transactions",
			func() float64 { return float64(s.be.DB().Stats().OpenReadTxs) }),
		gf("etcd_debugging", "auth", "revision", "The current revision of auth store.", func() float64 { return float64(s.auth.Revision()) }),

		// The process, as etcd's fd monitor reports it.
		gf("os", "fd", "used", "The number of used file descriptors.", fdUsed),
		gf("os", "fd", "limit", "The file descriptor limit.", fdLimit),
	}
}

// fdUsed counts this process's open file descriptors as etcd does (the
// entries of /proc/self/fd, the one reading it included).
func fdUsed() float64 {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return float64(len(ents))
}

func fdLimit() float64 {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return float64(r.Cur)
}

var knownPeersDesc = prometheus.NewDesc("etcd_network_known_peers", "The current number of known peers.", []string{"Local", "Remote"}, nil)

// knownPeers is etcd_network_known_peers as etcd's membership keeps it:
// 1 for every member of the cluster (this one included), 0 for every
// removed one, labeled with this member's id and the peer's.
type knownPeers struct{ s *Server }

func (k *knownPeers) Describe(ch chan<- *prometheus.Desc) { ch <- knownPeersDesc }

func (k *knownPeers) Collect(ch chan<- prometheus.Metric) {
	local := hexID(k.s.id)
	for _, m := range k.s.members.List() {
		ch <- prometheus.MustNewConstMetric(knownPeersDesc, prometheus.GaugeValue, 1, local, hexID(m.ID))
	}
	for _, id := range k.s.members.Removed() {
		ch <- prometheus.MustNewConstMetric(knownPeersDesc, prometheus.GaugeValue, 0, local, hexID(id))
	}
}

// v2StoreSnapshot counts the retired v2 store's operations that etcd
// makes for every snapshot it takes: it writes the membership into a new
// v2 store (the snapshot's Data, see etcdsnap.V2Store), first checking
// that the store holds no members (a recursive get), then creating each
// member's raftAttributes and setting its attributes (once published)
// and the cluster version. etcd_debugging_store_reads_total and
// writes_total count them by action, as etcd's do.
func (m *metrics) v2StoreSnapshot(members []*membership.Member, version bool) {
	m.v2Reads.WithLabelValues("getRecursive").Inc()
	creates, sets := 0, 0
	for _, mb := range members {
		creates++
		if mb.ClientURLs != nil {
			sets++
		}
	}
	if version {
		sets++
	}
	m.v2Writes.WithLabelValues("create").Add(float64(creates))
	if sets > 0 {
		m.v2Writes.WithLabelValues("set").Add(float64(sets))
	}
}

// etcdOnlyCollectors are families an etcd 3.7 member exports for parts
// Strata does not have, each with the value that is true of Strata: a
// series of the right type that stays at zero. Dashboards and etcd's own
// tests find them; docs/monitoring.md lists them.
func etcdOnlyCollectors() []prometheus.Collector {
	c := func(ns, sub, name, help string) prometheus.Collector {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help})
	}
	g := func(ns, sub, name, help string) prometheus.Collector {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help})
	}
	return []prometheus.Collector{
		// The v2 store: etcd 3.7 still links it (for v2 membership data);
		// Strata has none, so it has no keys to expire and no watchers.
		c("etcd_debugging", "store", "expires_total", "Total number of expired keys."),
		c("etcd_debugging", "store", "watch_requests_total", "Total number of incoming watch requests (new or reestablished)."),
		g("etcd_debugging", "store", "watchers", "Count of currently active watchers."),
		// The gRPC proxy (etcd grpc-proxy) is another program; etcd's member
		// exports its cache and coalescing figures at zero too.
		g("etcd", "grpc_proxy", "cache_hits_total", "Total number of cache hits"),
		g("etcd", "grpc_proxy", "cache_keys_total", "Total number of keys/ranges cached"),
		g("etcd", "grpc_proxy", "cache_misses_total", "Total number of cache misses"),
		c("etcd", "grpc_proxy", "events_coalescing_total", "Total number of events coalescing"),
		g("etcd", "grpc_proxy", "watchers_coalescing_total", "Total number of current watchers coalescing"),
	}
}
