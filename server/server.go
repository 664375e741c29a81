// Package server is Strata's etcd v3 API server: it validates requests,
// proposes writes through raft, serves reads from the MVCC store, and runs
// the client listeners (gRPC, the JSON gateway, health and metrics).
//
// The server is split by responsibility: server.go (lifecycle), apply.go
// (applying committed entries), kv.go (the KV service), maintenance.go,
// snapshot.go (Maintenance.Snapshot), bootdefrag.go (the defrag at
// start), cluster.go and membership.go (the Cluster service over package
// membership); the client side: serveclient.go (which address serves
// what), listen.go (routing a connection by its first bytes), access.go
// (etcd's HTTP access checks), http.go (health, version), debugvars.go
// and gateway.go; the cluster side: bootstrap.go (static bootstrap and
// publishing this member's attributes through raft), peer.go (the peer
// port: raft/transport wired to the raft node), leasefwd.go (lease
// keep-alives and time-to-live forwarded to the leader) and restore.go
// (installing a leader's snapshot in place). Server holds the parts; each
// service is a small type over it.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"google.golang.org/grpc/health"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/strata-db/strata/auth"
	"github.com/strata-db/strata/lease"
	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/schema"
	"github.com/strata-db/strata/server/config"
	"github.com/strata-db/strata/version"
	"github.com/strata-db/strata/vfs"
	"github.com/strata-db/strata/wal"
)

// Versions. EtcdVersion is what Status and /version report as the etcd
// server version, because clients (kube-apiserver above all) gate features
// on it; Version is Strata's own, shown in /version and the logs.
// They are defined in package version, shared with the tools.
const (
	EtcdVersion    = version.Etcd
	ClusterVersion = version.Cluster
	Version        = version.Strata
)

// Server is one running member.
type Server struct {
	cfg *config.Config
	lg  *slog.Logger

	id, cluster uint64
	members     *membership.Set
	alarms      *alarms
	// versions: the cluster and storage versions and the downgrade
	// state (clusterversion.go).
	versions *clusterVersions
	// initialized: the member started on a data dir that already held a
	// WAL (etcd's "member-initialized"); a new member has nothing to
	// compare in the initial corruption check.
	initialized bool
	// health is the gRPC health service (Serve); a defragmentation
	// stops it under the StopGRPCServiceOnDefrag gate.
	health *health.Server
	// leading wakes runVersionMonitor when this member starts to lead
	// with its term's entries applied.
	leading chan struct{}
	// compactChecked is the newest compaction revision whose hash the
	// compaction hash check found equal on every member.
	compactChecked atomic.Int64

	// db is the page store opened at start. A follower that installs a
	// leader's image swaps in another (applier.Restore): use s.be.DB()
	// once the backend exists.
	db   *pagestore.DB
	dbFS vfs.FS // the page store's file system (tests inject faults)
	// restoreMu keeps reads of the key space away from a snapshot
	// install: applier.Restore holds it for writing from the moment it
	// swaps in the leader's image until the key index and the watchers
	// are rebuilt from it; Range, read-only Txn, Hash and HashKV hold it
	// for reading. Without it a serializable read in between looked up
	// the old index's revisions in the new image. As etcd, where the
	// store's lock blocks reads during its restore.
	restoreMu sync.RWMutex
	// restoreWindow, if set (tests), runs inside that window;
	// readBlocked, if set (tests), runs when a read finds the window
	// open and has to wait for it.
	restoreWindow func()
	readBlocked   func()
	beforeApply   func()
	// requests counts unary client requests (for runIdleTrim);
	// idleTrimInterval and idleTrimmed are its test hooks.
	requests         atomic.Uint64
	idleTrimInterval time.Duration
	idleTrimmed      func()
	idleTrimAlways   bool
	healthInterval   time.Duration
	deleteWait       func(key []byte)
	removedOnce      sync.Once
	be               *mvcc.Backend
	kv               *mvcc.Store
	watch            *mvcc.WatchableStore
	lessor           *lease.Lessor
	auth             *auth.Store
	node             *raft.Node
	peers            *peers // the peer transport and listeners (peer.go)
	applier          *applier
	wait             *waitRegistry
	reqIDs           *idGenerator
	metrics          *metrics
	disk             diskBatching // the start-up disk probe and the batching sized from it
	// diskFull bounds and reports a backend that cannot commit (diskfull.go).
	diskFull *diskFull
	// fatalErr is why the member stopped by itself (fatal.go); set once.
	fatalErr  atomic.Pointer[error]
	fatalOnce sync.Once

	grpc      *grpc.Server
	httpSrv   []*http.Server
	listeners []net.Listener

	readyc   chan struct{}
	stopping chan struct{}
	bg       sync.WaitGroup // lease and auto-compaction loops; Stop waits for them
	stopOnce sync.Once
	done     chan struct{}
}

// New opens (or creates) the member's data and starts raft. Call Serve to
// accept clients.
func New(cfg *config.Config, lg *slog.Logger) (*Server, error) {
	return newServer(cfg, lg, storageHooks{})
}

// storageHooks lets tests put a vfs.FaultFS under the WAL and the page
// store, and shorten the lease checkpoint interval (etcd fixes it at 5
// minutes, too long for a test). The zero value is the operating system's
// file system and the default interval.
type storageHooks struct {
	walFS, dbFS vfs.FS

	leaseCheckpointInterval time.Duration
	// indexBaseEvery replaces the key index base's default interval
	// (mvcc.StoreConfig.IndexBaseEvery), so that short tests write bases.
	indexBaseEvery int
	// restoreWindow runs during a snapshot install, after the image is
	// swapped in and before the state is rebuilt from it.
	restoreWindow func()
	// readBlocked runs when a read of the key space has to wait for a
	// snapshot install to finish.
	readBlocked func()
	// idleTrimInterval replaces defaultIdleTrimInterval; idleTrimmed runs
	// after each idle trim; idleTrimAlways skips worthTrimming.
	idleTrimInterval time.Duration
	idleTrimmed      func()
	idleTrimAlways   bool
	// healthInterval replaces the 5 s a peer link must have been up to
	// count in the strict reconfiguration checks.
	healthInterval time.Duration
	// deleteWait runs when a lock or campaign starts waiting for the
	// deletion of key (the holder before it).
	deleteWait func(key []byte)
	// beforeDiskProbe runs in newServer right before the WAL disk probe,
	// the slow part of a start.
	beforeDiskProbe func()
	// beforeApply runs on the apply goroutine before each batch of
	// committed entries: a test holds apply back with it.
	beforeApply func()
}

func newServer(cfg *config.Config, lg *slog.Logger, hooks storageHooks) (_ *Server, err error) {
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, lg: lg, wait: newWaitRegistry(), versions: newClusterVersions(), leading: make(chan struct{}, 1),
		readyc: make(chan struct{}), stopping: make(chan struct{}), done: make(chan struct{}),
		initialized: MemberInitialized(cfg)}
	var peerListeners []net.Listener // the peers' until newPeers
	var walPreload *raft.WALPreload  // until raft.Start takes it
	defer func() {
		if err != nil {
			walPreload.Discard()
			if s.peers != nil {
				s.peers.stop()
			} else {
				for _, l := range peerListeners {
					l.Close()
				}
			}
			if s.node != nil {
				s.node.Stop()
			}
			s.closeStorage()
		}
	}()
	if err := prepareDataDir(cfg.DataDir, lg); err != nil {
		return nil, err
	}
	if err := refuseForeignData(cfg); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.SnapDir(), 0o700); err != nil {
		return nil, err
	}
	removeStaleSnapshotTemps(cfg.SnapDir())
	s.metrics = newMetrics(cfg.Metrics == "extensive")
	s.dbFS = hooks.dbFS
	s.restoreWindow, s.readBlocked = hooks.restoreWindow, hooks.readBlocked
	s.beforeApply = hooks.beforeApply
	s.idleTrimInterval, s.idleTrimmed, s.idleTrimAlways = hooks.idleTrimInterval, hooks.idleTrimmed, hooks.idleTrimAlways
	s.healthInterval, s.deleteWait = hooks.healthInterval, hooks.deleteWait
	if s.healthInterval == 0 {
		s.healthInterval = defaultHealthInterval
	}
	if s.db, err = s.openPageStore(); err != nil {
		return nil, fmt.Errorf("open backend %s: %w", cfg.BackendPath(), err)
	}
	// Bound before the disk probe and the WAL (see listenPeers); served
	// once raft runs.
	if peerListeners, err = listenPeers(cfg); err != nil {
		return nil, err
	}
	if hooks.beforeDiskProbe != nil {
		hooks.beforeDiskProbe()
	}
	// After the page store's lock, so a second server on this data dir
	// fails before it writes anything in the WAL dir.
	s.disk = sizeBatching(cfg, lg)
	maxWALs := int(cfg.MaxWALs)
	if maxWALs == 0 {
		maxWALs = -1 // etcd's --max-wals=0: keep every segment
	}
	walOpts := &wal.Options{MaxWALs: maxWALs, Logger: lg, Metrics: s.metrics.wal,
		GroupCommitWindow: s.disk.walGroupCommitWindow, FS: hooks.walFS}
	// A restart reads its log while the store, the leases, auth and the
	// key index open below (raft.WALPreload).
	walPreload = raft.PreloadWAL(cfg.WALDir(), walOpts)
	s.diskFull = newDiskFull(s, cfg.BackendBacklogBytes)
	s.be, err = mvcc.NewBackend(s.db, mvcc.BackendConfig{
		BatchInterval: s.disk.backendBatchInterval, BatchLimit: cfg.BackendBatchLimit, Logger: lg,
		OnCommit: s.metrics.observeBackendCommit,
		// Commit early once a quarter of the backlog bound is pending, so
		// a healthy disk never comes near the bound.
		CommitBytes:    cfg.BackendBacklogBytes / 4,
		OnCommitHealth: s.diskFull.onCommitHealth,
		Metrics:        s.metrics.mvcc,
	})
	if err != nil {
		return nil, err
	}
	if err := s.bootstrapDefrag(); err != nil {
		return nil, err
	}
	s.lessor, err = lease.Open(s.be, lease.Config{
		MinTTL: lease.MinTTL(cfg.ElectionTimeout(), cfg.HeartbeatInterval()), Logger: lg, Metrics: s.metrics.lease,
		CheckpointInterval: hooks.leaseCheckpointInterval})
	if err != nil {
		return nil, err
	}
	// As etcd, the LeaseCheckpoint gate (off by default) decides whether
	// the leader checkpoints remaining TTLs, so that they survive leader
	// changes and restarts; without it a lease starts its TTL over on a
	// new leader. Only leases longer than the interval (5 min) are
	// checkpointed. Every member applies the LeaseCheckpoint entries it
	// is sent, whatever its own gate says, as etcd's do.
	if cfg.FeatureEnabled(config.FeatureLeaseCheckpoint) {
		s.lessor.SetCheckpointer(s.checkpointLeases)
	}
	if err := s.openAuth(); err != nil {
		return nil, err
	}
	s.watch, err = mvcc.NewWatchableStore(s.be, mvcc.StoreConfig{Logger: lg, Leases: s.lessor, Metrics: s.metrics.mvcc,
		CompactBatch: cfg.CompactionBatchLimit, CompactPause: cfg.CompactionSleepInterval,
		// The key index's base, beside the page store (mvcc/indexbase.go):
		// what lets a restart read only what was written since.
		IndexBase: cfg.BackendPath() + ".index", FS: s.dbFS, IndexBaseEvery: cmp.Or(hooks.indexBaseEvery, cfg.IndexBaseRecords)},
		mvcc.WatchConfig{ProgressNotifyInterval: cfg.WatchProgressNotifyInterval})
	if err != nil {
		return nil, err
	}
	s.kv = s.watch.Store
	s.alarms = newAlarms()
	if err := s.alarms.load(s.be.DB()); err != nil {
		return nil, err
	}
	if err := s.diskFull.load(s.be.DB()); err != nil {
		return nil, err
	}
	if err := s.loadClusterState(s.be.DB()); err != nil {
		return nil, err
	}
	if err := s.bootstrapIDs(); err != nil {
		return nil, err
	}
	s.reqIDs = newIDGenerator(s.id, time.Now())
	s.applier = newApplier(s)
	if s.peers, err = newPeers(s); err != nil {
		return nil, err
	}
	s.peers.listeners = peerListeners
	peers := s.bootstrapPeers()
	preload := walPreload
	walPreload = nil // raft.Start takes it, and closes its log if it fails
	s.node, err = raft.Start(raft.Config{
		ID: s.id, ClusterID: s.cluster, Peers: peers,
		WALDir: cfg.WALDir(), StatePath: cfg.BackendPath(), SnapshotDir: cfg.SnapDir(),
		WAL: walOpts, Preload: preload,
		TickInterval: cfg.HeartbeatInterval(), ElectionTicks: cfg.ElectionTicks(), HeartbeatTicks: 1,
		SnapshotCount: cfg.SnapshotCount, CatchUpEntries: cfg.SnapshotCatchUpEntries,
		PreVote:         cfg.PreVote,
		ForceNewCluster: cfg.ForceNewCluster,
		StateMachine:    s.applier,
		SnapshotSaved:   func(uint64) { s.metrics.v2StoreSnapshot(s.members.List(), s.versions.Cluster() != "") },
		ConfChecker:     &confChecker{s: s},
		Transport:       s.peers,
		Logger:          lg,
		Metrics:         s.metrics.raft,
	})
	if err != nil {
		return nil, err
	}
	s.peers.serve()
	s.metrics.register(s)
	return s, nil
}

// openPageStore opens the page store at the backend path.
func (s *Server) openPageStore() (*pagestore.DB, error) {
	return pagestore.Open(s.cfg.BackendPath(), &pagestore.Options{Logger: s.lg, FS: s.dbFS,
		OnCommit: s.metrics.observeCommitPhases})
}

// MemberInitialized reports whether cfg's data dir already holds a WAL:
// etcd's test for a member that has joined its cluster, which then
// ignores the --initial-cluster settings.
func MemberInitialized(cfg *config.Config) bool { return wal.Exist(nil, cfg.WALDir()) }

// prepareDataDir creates the data dir with mode 0700 and warns about a
// looser existing mode.
func prepareDataDir(dir string, lg *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create data directory: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o077 != 0 {
		lg.Warn("check file permission: directory is accessible by other users; it should be 0700",
			"path", dir, "mode", st.Mode().Perm().String())
	}
	return nil
}

// refuseForeignData refuses a data dir written by etcd: its bbolt db
// would be destroyed by an attempt to open it as a page store.
func refuseForeignData(cfg *config.Config) error {
	if f, _ := schema.DetectFile(cfg.BackendPath()); f == schema.FormatEtcd {
		return fmt.Errorf("data directory %s holds an etcd (bbolt) database at %s, which Strata does not open in place; "+
			"migrate it through a snapshot: 'etcdctl snapshot save snap.db' (or, with etcd stopped, use %s itself with --skip-hash-check), then "+
			"'stratautl snapshot restore snap.db --data-dir NEW-DIR --name %s --initial-cluster ... --initial-advertise-peer-urls ...' "+
			"with this member's cluster flags, and start strata on NEW-DIR",
			cfg.DataDir, cfg.BackendPath(), cfg.BackendPath(), cfg.Name)
	}
	return nil
}

// Ready is closed once the member has a leader and has applied what was
// committed when it started: it then serves requests.
func (s *Server) Ready() <-chan struct{} { return s.readyc }

// waitReady closes readyc when the member can serve: once it knows a
// leader, has applied what was committed then, and has published its
// name and client URLs through raft (as etcd's member becomes ready only
// once published). It wakes on raft's leader-change notification.
func (s *Server) waitReady() {
	for {
		changed := s.node.LeaderChanged()
		if st := s.node.Status(); st.Leader != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ElectionTimeout()*5)
			err := s.node.WaitApplied(ctx, st.Committed)
			cancel()
			if err == nil {
				if s.publish() {
					close(s.readyc)
				}
				return
			}
			continue
		}
		select {
		case <-changed:
		case <-s.stopping:
			return
		case <-s.node.Done():
			return
		}
	}
}

// ID returns the member id.
func (s *Server) ID() uint64 { return s.id }

// ClusterID returns the cluster id.
func (s *Server) ClusterID() uint64 { return s.cluster }

// Stop shuts the server down gracefully: a leader first hands its
// leadership to another member (handOffLeadership), listeners stop
// accepting, running RPCs finish (up to a few seconds), raft stops, and
// the WAL and page store are closed cleanly.
func (s *Server) Stop() error {
	var err error
	s.stopOnce.Do(func() {
		s.handOffLeadership()
		close(s.stopping)
		s.stopListeners()
		// Before the node: nothing is stepped into a stopped node, and
		// the transport's reports never wait for one.
		s.peers.stop()
		err = s.node.Stop()
		s.bg.Wait() // after the node: a loop blocked in raft returns at once
		if cerr := s.closeStorage(); err == nil {
			err = cerr
		}
		close(s.done)
	})
	return err
}

// Done is closed once Stop has finished, also when the member stopped by
// itself on a fatal error (then Err says why).
func (s *Server) Done() <-chan struct{} { return s.done }

func (s *Server) closeStorage() error {
	var errs []error
	if s.lessor != nil {
		s.lessor.Stop()
	}
	if s.watch != nil {
		errs = append(errs, s.watch.Close())
	} else if s.kv != nil {
		errs = append(errs, s.kv.Close())
	}
	if s.be != nil {
		errs = append(errs, s.be.Close())
	}
	// The page store in use: a follower that installed a leader's image
	// runs on another one than it opened (applier.Restore).
	db := s.db
	if s.be != nil {
		db = s.be.DB()
	}
	if db != nil {
		errs = append(errs, db.Close())
	}
	return errors.Join(errs...)
}

// requestTimeout is how long a proposal may wait, as etcd computes it.
func (s *Server) requestTimeout() time.Duration {
	return 5*time.Second + 2*s.cfg.ElectionTimeout()
}
