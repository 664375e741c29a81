package config

import (
	"net/url"
	"path/filepath"
	"time"
)

// Defaults. Where etcd stores 0 to mean "use the built-in value", Strata
// stores the effective value instead, so a reader of Config never has to
// know the 0-means-default convention of each field.
const (
	DefaultName                        = "default"
	DefaultListenPeerURL               = "http://localhost:2380"
	DefaultListenClientURL             = "http://localhost:2379"
	DefaultInitialAdvertisePeerURL     = "http://localhost:2380"
	DefaultAdvertiseClientURL          = "http://localhost:2379"
	DefaultInitialClusterToken         = "etcd-cluster"
	DefaultSnapshotCount               = 10000
	DefaultSnapshotCatchUpEntries      = 5000
	DefaultMaxSnapshots                = 5
	DefaultMaxWALs                     = 5
	DefaultHeartbeatMs                 = 100
	DefaultElectionMs                  = 1000
	DefaultQuotaBackendBytes           = int64(2 << 30) // what 0 selects
	MaxSuggestedQuotaBackendBytes      = int64(8 << 30) // above this etcd warns
	DefaultMaxRequestBytes             = 1572864        // 1.5 MiB
	DefaultMaxTxnOps                   = 128
	DefaultMaxConcurrentStreams        = ^uint32(0)
	DefaultBackendBatchInterval        = 100 * time.Millisecond
	DefaultBackendBatchLimit           = 10000
	DefaultBackendBacklogBytes         = int64(64 << 20)
	DefaultGRPCKeepAliveMinTime        = 5 * time.Second
	DefaultGRPCKeepAliveInterval       = 2 * time.Hour
	DefaultGRPCKeepAliveTimeout        = 20 * time.Second
	DefaultRaftReadTimeout             = 5 * time.Second
	DefaultRaftWriteTimeout            = 5 * time.Second
	DefaultAutoCompactionMode          = "periodic"
	DefaultAutoCompactionRetention     = "0"
	DefaultAuthToken                   = "simple"
	DefaultAuthTokenTTL                = 300
	DefaultBcryptCost                  = 10
	DefaultCompactHashCheckTime        = time.Minute
	DefaultCompactionBatchLimit        = 1000
	DefaultCompactionSleepInterval     = 10 * time.Millisecond
	DefaultWatchProgressNotifyInterval = 10 * time.Minute
	DefaultDowngradeCheckTime          = 5 * time.Second
	DefaultWarningApplyDuration        = 100 * time.Millisecond
	DefaultWarningUnaryRequestDuration = 300 * time.Millisecond
	DefaultMaxLearners                 = 1
	DefaultLogOutput                   = "default"
	DefaultLogLevel                    = "info"
	DefaultLogFormat                   = "json"
	DefaultLogRotationConfigJSON       = `{"maxsize": 100, "maxage": 0, "maxbackups": 0, "localtime": false, "compress": false}`
	DefaultMetrics                     = "basic"
	DefaultTracingAddress              = "localhost:4317"
	DefaultTracingServiceName          = "etcd"
	DefaultSelfSignedCertValidity      = 1
	DefaultTLSMinVersion               = "TLS1.2"
	DefaultDiscoveryDialTimeout        = 2 * time.Second
	DefaultDiscoveryRequestTimeout     = 5 * time.Second
	DefaultDiscoveryKeepAliveTime      = 2 * time.Second
	DefaultDiscoveryKeepAliveTimeout   = 6 * time.Second

	ClusterStateNew      = "new"
	ClusterStateExisting = "existing"

	CompactionModePeriodic = "periodic"
	CompactionModeRevision = "revision"
)

// Config is every setting the Strata server reads. It is filled once by
// Parse (flags, then ETCD_* environment, or a --config-file instead) and
// validated once; the server treats it as read-only afterwards.
//
// The json tags are the etcd --config-file keys whose YAML form is the Go
// type itself (durations are integer nanoseconds in the file, as in etcd).
// Keys whose file form differs (comma-separated URL lists, the
// *-transport-security blocks, feature-gates) are decoded by file.go and
// carry json:"-" here.
type Config struct {
	// ---- member ----

	// Name is this member's human-readable name; it must appear in
	// InitialCluster when bootstrapping. Default "default". Set it on every
	// multi-member deployment: duplicate "default" names confuse membership.
	Name string `json:"name"`
	// DataDir holds member/wal, member/snap/db and fixtures/. Default
	// "<name>.strata" (etcd uses "<name>.etcd"; Strata's on-disk format
	// differs, so it must never pick up an etcd directory by accident).
	DataDir string `json:"data-dir"`
	// DedicatedWALDir, when set, puts the WAL on another path (usually a
	// separate, faster disk). Default "" = <data-dir>/member/wal; see WALDir.
	DedicatedWALDir string `json:"wal-dir"`
	// SnapshotCount is how many applied entries trigger a raft snapshot and
	// WAL release. Default 10000. Lower it to bound WAL replay time on
	// restart; raise it to reduce snapshot overhead under heavy writes.
	SnapshotCount uint64 `json:"snapshot-count"`
	// SnapshotCatchUpEntries is how many entries are kept after a snapshot
	// for slow followers. Default 5000.
	SnapshotCatchUpEntries uint64 `json:"snapshot-catchup-entries"`
	// MaxSnapshots is the number of snapshot files to keep (0 = unlimited).
	// Default 5. Deprecated in etcd 3.6; accepted for compatibility.
	MaxSnapshots uint `json:"max-snapshots"`
	// MaxWALs is the number of WAL segments to keep beyond what recovery
	// needs (0 = unlimited). Default 5.
	MaxWALs uint `json:"max-wals"`
	// HeartbeatMs is the raft tick/heartbeat in milliseconds. Default 100.
	// Set it near the round-trip time between members.
	HeartbeatMs uint `json:"heartbeat-interval"`
	// ElectionMs is the raft election timeout in milliseconds. Default 1000.
	// Must be >= 5x HeartbeatMs and <= 50000.
	ElectionMs uint `json:"election-timeout"`
	// InitialElectionTickAdvance fast-forwards election ticks on boot so a
	// fresh member elects sooner. Default true.
	InitialElectionTickAdvance bool `json:"initial-election-tick-advance"`

	// ListenPeerURLs are bound for peer traffic. Default http://localhost:2380.
	ListenPeerURLs []url.URL `json:"-"`
	// ListenClientURLs are bound for gRPC and HTTP client traffic. Default
	// http://localhost:2379. https/unixs URLs need certificates or auto-tls.
	ListenClientURLs []url.URL `json:"-"`
	// ListenClientHTTPURLs, when set, serve HTTP only (gateway, health,
	// metrics) and remove HTTP from ListenClientURLs. Default none.
	ListenClientHTTPURLs []url.URL `json:"-"`
	// ListenMetricsURLs serve /metrics, /health, /livez, /readyz only.
	// Default none. kubeadm sets http://127.0.0.1:2381.
	ListenMetricsURLs []url.URL `json:"-"`
	// AdvertisePeerURLs (--initial-advertise-peer-urls) are this member's
	// peer URLs as told to the cluster. Default http://localhost:2380.
	AdvertisePeerURLs []url.URL `json:"-"`
	// AdvertiseClientURLs are this member's client URLs as told to clients.
	// Default http://localhost:2379; required once ListenClientURLs is set
	// on the command line or in the environment.
	AdvertiseClientURLs []url.URL `json:"-"`

	// ---- storage ----

	// QuotaBackendBytes is the page-store size that raises the NOSPACE
	// alarm. 0 (the default) selects 2 GiB; negative disables the quota;
	// above 8 GiB is allowed with a warning. See QuotaBytes.
	QuotaBackendBytes int64 `json:"quota-backend-bytes"`
	// BackendBatchInterval is the longest the page store waits before it
	// commits a batch. Default 100ms; 0 from the user also means 100ms.
	BackendBatchInterval time.Duration `json:"backend-batch-interval"`
	// BackendBatchLimit is the most operations per page-store commit.
	// Default 10000; 0 from the user also means 10000.
	BackendBatchLimit int `json:"backend-batch-limit"`
	// BackendFreelistType is bbolt's freelist kind (array|map). Accepted for
	// etcd compatibility; Strata's page store ignores it.
	BackendFreelistType string `json:"backend-bbolt-freelist-type"`
	// MaxTxnOps is the most operations one Txn may hold. Default 128.
	MaxTxnOps uint `json:"max-txn-ops"`
	// MaxRequestBytes is the largest client request accepted, in bytes.
	// Default 1572864 (1.5 MiB). Raising it raises raft entry sizes too.
	MaxRequestBytes uint `json:"max-request-bytes"`
	// MaxConcurrentStreams caps gRPC streams per client connection.
	// Default 2^32-1 (no limit).
	MaxConcurrentStreams uint32 `json:"max-concurrent-streams"`
	// BackendBacklogBytes bounds the acknowledged writes held in memory
	// while page-store commits fail (a full data disk; Strata only): past
	// it new writes are refused with NOSPACE ("mvcc: database space
	// exceeded"), while reads and deletes keep working. The writes held
	// are safe in the WAL either way; the bound keeps the member from
	// running out of memory. Default 64 MiB; 0 also means 64 MiB. Raise
	// it only with memory to spare.
	BackendBacklogBytes int64 `json:"backend-backlog-bytes"`
	// IndexBaseRecords is the least number of records written between two
	// writes of the key index's base (member/snap/db.index, Strata only;
	// mvcc/indexbase.go), which a restart reads instead of every record,
	// replaying only the records written since: a base is due once
	// max(IndexBaseRecords, keys / 8) records have been written. Lower,
	// restarts replay less and the base (the whole key index) is written
	// more often. Default 0: 50,000.
	IndexBaseRecords int `json:"index-base-records"`
	// DiskProbe measures fdatasync latency of the WAL directory at start and
	// sizes group commit and batching from it (Strata only). Default true;
	// turn it off for tests on tmpfs or when start-up time matters.
	DiskProbe bool `json:"disk-probe"`
	// AdaptiveProcs runs the member on one P (GOMAXPROCS 1) while it uses
	// less than 0.9 of a CPU, and on all of them under load (Strata
	// only; package internal/procs). Default true; ignored when the
	// GOMAXPROCS environment variable is set.
	AdaptiveProcs bool `json:"adaptive-procs"`
	// UnsafeNoFsync disables fsync. Default false. Never in production.
	UnsafeNoFsync bool `json:"unsafe-no-fsync"`
	// ForceNewCluster rewrites membership to this single member. Default
	// false. Disaster recovery only.
	ForceNewCluster bool `json:"force-new-cluster"`
	// MemoryMlock locks server memory in RAM. Default false.
	MemoryMlock bool `json:"memory-mlock"`
	// BootstrapDefragThresholdMegabytes defragments at start when that many
	// MiB would be freed. Default 0 (off).
	BootstrapDefragThresholdMegabytes uint `json:"bootstrap-defrag-threshold-megabytes"`

	// ---- gRPC and sockets ----

	// GRPCKeepAliveMinTime is the least interval a client may ping at.
	// Default 5s.
	GRPCKeepAliveMinTime time.Duration `json:"grpc-keepalive-min-time"`
	// GRPCKeepAliveInterval is how often the server pings idle connections
	// (0 disables). Default 2h.
	GRPCKeepAliveInterval time.Duration `json:"grpc-keepalive-interval"`
	// GRPCKeepAliveTimeout closes a connection whose ping is unanswered for
	// this long (0 disables). Default 20s.
	GRPCKeepAliveTimeout time.Duration `json:"grpc-keepalive-timeout"`
	// SocketReusePort sets SO_REUSEPORT on listeners. Default false.
	SocketReusePort bool `json:"-"`
	// SocketReuseAddress sets SO_REUSEADDR on listeners. Default false.
	SocketReuseAddress bool `json:"-"`
	// RaftReadTimeout and RaftWriteTimeout bound peer connection I/O.
	// Default 5s each; etcd raises smaller values to the default, so do we.
	RaftReadTimeout  time.Duration `json:"-"`
	RaftWriteTimeout time.Duration `json:"-"`
	// EnableGRPCGateway serves the JSON gateway (/v3/...). Default true.
	EnableGRPCGateway bool `json:"enable-grpc-gateway"`
	// CORS lists allowed CORS origins ("*" = all). Default ["*"].
	CORS []string `json:"-"`
	// HostWhitelist lists Host headers accepted on insecure listeners
	// ("*" = all). Default ["*"].
	HostWhitelist []string `json:"-"`

	// ---- clustering ----

	// InitialCluster is "name=peerURL,..." for bootstrapping. Default
	// "default=http://localhost:2380"; when only --name is changed it
	// becomes "<name>=<initial-advertise-peer-urls>", as in etcd.
	InitialCluster string `json:"initial-cluster"`
	// InitialClusterState is "new" to bootstrap or "existing" to join.
	// Default "new". Ignored once the data dir is initialized.
	InitialClusterState string `json:"initial-cluster-state"`
	// InitialClusterToken keeps separate clusters from talking to each other
	// by accident. Default "etcd-cluster".
	InitialClusterToken string `json:"initial-cluster-token"`
	// StrictReconfigCheck rejects membership changes that would lose quorum.
	// Default true.
	StrictReconfigCheck bool `json:"strict-reconfig-check"`
	// PreVote enables raft pre-vote. Default true.
	PreVote bool `json:"pre-vote"`
	// MaxLearners caps learner members. Default 1.
	MaxLearners int `json:"max-learners"`
	// Discovery holds the v3 discovery settings (file key discovery-config).
	// Strata stores them; they exclude InitialCluster as in etcd.
	Discovery Discovery `json:"-"`
	// DiscoverySRV is a DNS domain whose SRV records list the members.
	DiscoverySRV string `json:"discovery-srv"`
	// DiscoverySRVName is a suffix for the SRV service names.
	DiscoverySRVName string `json:"discovery-srv-name"`
	// DiscoverySRVServer is the DNS server (host:port) that --discovery-srv
	// asks, instead of the system resolver (Strata only).
	DiscoverySRVServer string `json:"discovery-srv-server"`
	// DowngradeCheckTime is the interval between downgrade status checks.
	// Default 5s.
	DowngradeCheckTime time.Duration `json:"downgrade-check-time"`

	// ---- compaction, corruption checks, watch ----

	// AutoCompactionMode is "periodic" (retention is a duration) or
	// "revision" (retention is a revision count). Default "periodic".
	AutoCompactionMode string `json:"auto-compaction-mode"`
	// AutoCompactionRetention as given: "0" disables, "1h"/"5m" durations or
	// a bare number of hours in periodic mode, an integer in revision mode.
	// Default "0". See AutoCompaction for the parsed value.
	AutoCompactionRetention string `json:"auto-compaction-retention"`
	// CompactionBatchLimit is the most revisions deleted per compaction
	// batch. Default 1000.
	CompactionBatchLimit int `json:"compaction-batch-limit"`
	// CompactionSleepInterval is the pause between compaction batches.
	// Default 10ms.
	CompactionSleepInterval time.Duration `json:"compaction-sleep-interval"`
	// CorruptCheckTime is the interval between cluster corruption checks
	// (0 disables). Default 0.
	CorruptCheckTime time.Duration `json:"corrupt-check-time"`
	// CompactHashCheckTime is the interval of the leader's compaction hash
	// check (feature gate CompactHashCheck). Default 1m; must be > 0.
	CompactHashCheckTime time.Duration `json:"compact-hash-check-time"`
	// WatchProgressNotifyInterval is the period of watch progress
	// notifications. Default 10m; kubeadm uses 5s.
	WatchProgressNotifyInterval time.Duration `json:"watch-progress-notify-interval"`
	// WarningApplyDuration logs applies slower than this. Default 100ms.
	WarningApplyDuration time.Duration `json:"warning-apply-duration"`
	// WarningUnaryRequestDuration logs unary requests slower than this.
	// Default 300ms.
	WarningUnaryRequestDuration time.Duration `json:"warning-unary-request-duration"`
	// FeatureGates is the effective value of every known server feature
	// gate (see KnownFeatureGates), defaults merged with --feature-gates and
	// the 3.5 --experimental-* boolean flags.
	FeatureGates map[string]bool `json:"-"`
	// FeatureGatesGiven holds only the gates the user named (--feature-gates,
	// the file key, the --experimental-* booleans), with the value given;
	// etcd's start-up line lists exactly these.
	FeatureGatesGiven map[string]bool `json:"-"`
	// allGates holds the AllAlpha and AllBeta values --feature-gates
	// set, which FeatureGates resolves away (see FeatureGateList).
	allGates map[string]bool

	// ---- security ----

	// ClientSecurity is TLS for the client listeners (--cert-file, ...).
	ClientSecurity TLSInfo `json:"-"`
	// PeerSecurity is TLS for the peer listeners and dials (--peer-*).
	PeerSecurity TLSInfo `json:"-"`
	// SelfSignedCertValidity is the auto-tls certificate lifetime in years.
	// Default 1.
	SelfSignedCertValidity uint `json:"self-signed-cert-validity"`
	// CipherSuites are the allowed TLS 1.2 suites by Go name, in priority
	// order. Default empty = Go's secure defaults. Insecure suites are
	// refused (etcd accepts them).
	CipherSuites []string `json:"cipher-suites"`
	// TLSMinVersion is "TLS1.2" (default) or "TLS1.3".
	TLSMinVersion string `json:"tls-min-version"`
	// TLSMaxVersion is "", "TLS1.2" or "TLS1.3". Default "" = Go's highest.
	TLSMaxVersion string `json:"tls-max-version"`

	// ---- auth ----

	// AuthToken is "simple" (default) or "jwt,pub-key=...,priv-key=...,
	// sign-method=...,ttl=..."; see AuthTokenOptions for the parsed form.
	AuthToken string `json:"auth-token"`
	// BcryptCost is the password hashing cost, 4..31. Default 10.
	BcryptCost uint `json:"bcrypt-cost"`
	// AuthTokenTTL is the simple-token lifetime in seconds. Default 300.
	AuthTokenTTL uint `json:"auth-token-ttl"`

	// ---- logging, metrics, tracing ----

	// Logger must be "zap" (etcd's only accepted value; Strata logs with
	// slog in the same JSON shape).
	Logger string `json:"logger"`
	// LogLevel is debug, info (default), warn, error, dpanic, panic, fatal.
	LogLevel string `json:"log-level"`
	// LogFormat is "json" (default) or "console".
	LogFormat string `json:"log-format"`
	// LogOutputs are "default" (= stderr, the default), "stderr", "stdout",
	// "systemd/journal" or file paths (appended to).
	LogOutputs []string `json:"log-outputs"`
	// EnableLogRotation rotates the single file in LogOutputs. Default false.
	EnableLogRotation bool `json:"enable-log-rotation"`
	// LogRotationConfigJSON is the rotation settings as JSON.
	LogRotationConfigJSON string `json:"log-rotation-config-json"`
	// EnablePprof serves /debug/pprof on the client URLs. Default false.
	EnablePprof bool `json:"enable-pprof"`
	// Metrics is "basic" (default) or "extensive" (adds gRPC histograms).
	Metrics string `json:"metrics"`
	// EnableDistributedTracing turns on OpenTelemetry tracing. Default
	// false. The four settings below only matter when it is on.
	EnableDistributedTracing bool `json:"enable-distributed-tracing"`
	// DistributedTracingAddress is the collector. Default localhost:4317.
	DistributedTracingAddress string `json:"distributed-tracing-address"`
	// DistributedTracingServiceName is the same on every member. Default
	// "etcd" (kept so dashboards built for etcd keep working).
	DistributedTracingServiceName string `json:"distributed-tracing-service-name"`
	// DistributedTracingInstanceID is unique per member. Default "".
	DistributedTracingInstanceID string `json:"distributed-tracing-instance-id"`
	// DistributedTracingSamplingRate is samples per million spans, 0..1e6.
	DistributedTracingSamplingRate int `json:"distributed-tracing-sampling-rate"`
	// V2Deprecation is accepted and ignored: etcd 3.7 enforces its default.
	V2Deprecation string `json:"-"`

	// ---- invocation ----

	// ConfigFile is the --config-file (or ETCD_CONFIG_FILE) that was loaded,
	// or "" when flags and environment were used.
	ConfigFile string `json:"-"`
	// PrintVersion is --version: the caller prints versions and exits 0.
	// Nothing else is parsed or validated when it is set.
	PrintVersion bool `json:"-"`
	// ExplicitlySet names every setting the user gave (flag names, with
	// experimental spellings mapped to their 3.6 names as well), from the
	// command line, the environment or file keys.
	ExplicitlySet map[string]bool `json:"-"`
}

// TLSInfo is one side's TLS material (client or peer).
type TLSInfo struct {
	CertFile string // server certificate, PEM
	KeyFile  string // its key
	// ClientCertFile/ClientKeyFile are used when this member dials as a
	// client (peer dials, gateway); default CertFile/KeyFile.
	ClientCertFile string
	ClientKeyFile  string
	TrustedCAFile  string // CA bundle that verifies the other side
	ClientCertAuth bool   // require and verify a client certificate
	CRLFile        string // certificate revocation list, PEM or DER
	AutoTLS        bool   // generate a self-signed cert under <data-dir>/fixtures
	// AllowedCNs and AllowedHostnames restrict accepted client certificates
	// by common name or SAN host (peer side, and client hostnames).
	AllowedCNs          []string
	AllowedHostnames    []string
	SkipClientSANVerify bool // peer side only
}

// Empty reports whether no certificate was configured (auto-tls aside).
func (t TLSInfo) Empty() bool { return t.CertFile == "" && t.KeyFile == "" }

// Discovery is the v3 discovery and DNS SRV bootstrap configuration.
type Discovery struct {
	Endpoints          []string
	Token              string
	DialTimeout        time.Duration
	RequestTimeout     time.Duration
	KeepAliveTime      time.Duration
	KeepAliveTimeout   time.Duration
	InsecureTransport  bool
	InsecureSkipVerify bool
	Cert, Key, CACert  string
	User, Password     string
	Fallback           string // "exit"; "proxy" is refused as in etcd
}

// Default returns a Config holding every default, before any input. Parse
// starts from it; tests use it as the expected baseline.
func Default() *Config {
	mustURL := func(s string) []url.URL {
		u, err := parseURLs(s)
		if err != nil {
			panic(err)
		}
		return u
	}
	c := &Config{
		Name:                       DefaultName,
		SnapshotCount:              DefaultSnapshotCount,
		SnapshotCatchUpEntries:     DefaultSnapshotCatchUpEntries,
		MaxSnapshots:               DefaultMaxSnapshots,
		MaxWALs:                    DefaultMaxWALs,
		HeartbeatMs:                DefaultHeartbeatMs,
		ElectionMs:                 DefaultElectionMs,
		InitialElectionTickAdvance: true,
		ListenPeerURLs:             mustURL(DefaultListenPeerURL),
		ListenClientURLs:           mustURL(DefaultListenClientURL),
		AdvertisePeerURLs:          mustURL(DefaultInitialAdvertisePeerURL),
		AdvertiseClientURLs:        mustURL(DefaultAdvertiseClientURL),
		BackendBatchInterval:       DefaultBackendBatchInterval,
		BackendBatchLimit:          DefaultBackendBatchLimit,
		MaxTxnOps:                  DefaultMaxTxnOps,
		MaxRequestBytes:            DefaultMaxRequestBytes,
		MaxConcurrentStreams:       DefaultMaxConcurrentStreams,
		DiskProbe:                  true,
		AdaptiveProcs:              true,
		BackendBacklogBytes:        DefaultBackendBacklogBytes,
		GRPCKeepAliveMinTime:       DefaultGRPCKeepAliveMinTime,
		GRPCKeepAliveInterval:      DefaultGRPCKeepAliveInterval,
		GRPCKeepAliveTimeout:       DefaultGRPCKeepAliveTimeout,
		RaftReadTimeout:            DefaultRaftReadTimeout,
		RaftWriteTimeout:           DefaultRaftWriteTimeout,
		EnableGRPCGateway:          true,
		CORS:                       []string{"*"},
		HostWhitelist:              []string{"*"},
		InitialClusterState:        ClusterStateNew,
		InitialClusterToken:        DefaultInitialClusterToken,
		StrictReconfigCheck:        true,
		PreVote:                    true,
		MaxLearners:                DefaultMaxLearners,
		Discovery: Discovery{
			DialTimeout:       DefaultDiscoveryDialTimeout,
			RequestTimeout:    DefaultDiscoveryRequestTimeout,
			KeepAliveTime:     DefaultDiscoveryKeepAliveTime,
			KeepAliveTimeout:  DefaultDiscoveryKeepAliveTimeout,
			InsecureTransport: true,
			Fallback:          "exit",
		},
		DowngradeCheckTime:            DefaultDowngradeCheckTime,
		AutoCompactionMode:            DefaultAutoCompactionMode,
		AutoCompactionRetention:       DefaultAutoCompactionRetention,
		CompactionBatchLimit:          DefaultCompactionBatchLimit,
		CompactionSleepInterval:       DefaultCompactionSleepInterval,
		CompactHashCheckTime:          DefaultCompactHashCheckTime,
		WatchProgressNotifyInterval:   DefaultWatchProgressNotifyInterval,
		WarningApplyDuration:          DefaultWarningApplyDuration,
		WarningUnaryRequestDuration:   DefaultWarningUnaryRequestDuration,
		FeatureGates:                  defaultFeatureGates(),
		FeatureGatesGiven:             map[string]bool{},
		SelfSignedCertValidity:        DefaultSelfSignedCertValidity,
		TLSMinVersion:                 DefaultTLSMinVersion,
		AuthToken:                     DefaultAuthToken,
		BcryptCost:                    DefaultBcryptCost,
		AuthTokenTTL:                  DefaultAuthTokenTTL,
		Logger:                        "zap",
		LogLevel:                      DefaultLogLevel,
		LogFormat:                     DefaultLogFormat,
		LogOutputs:                    []string{DefaultLogOutput},
		LogRotationConfigJSON:         DefaultLogRotationConfigJSON,
		Metrics:                       DefaultMetrics,
		DistributedTracingAddress:     DefaultTracingAddress,
		DistributedTracingServiceName: DefaultTracingServiceName,
		ExplicitlySet:                 map[string]bool{},
	}
	c.InitialCluster = initialClusterFromName(c.Name, c.AdvertisePeerURLs)
	return c
}

// initialClusterFromName builds "name=url,name=url" for the given peer
// URLs, the form etcd uses as --initial-cluster's default.
func initialClusterFromName(name string, peers []url.URL) string {
	if name == "" {
		name = DefaultName
	}
	s := ""
	for i, u := range peers {
		if i > 0 {
			s += ","
		}
		s += name + "=" + u.String()
	}
	return s
}

// WALDir is where the WAL lives: --wal-dir, else <data-dir>/member/wal.
func (c *Config) WALDir() string {
	if c.DedicatedWALDir != "" {
		return c.DedicatedWALDir
	}
	return filepath.Join(c.DataDir, "member", "wal")
}

// SnapDir is <data-dir>/member/snap, the page store's directory.
func (c *Config) SnapDir() string { return filepath.Join(c.DataDir, "member", "snap") }

// BackendPath is the page-store file, <data-dir>/member/snap/db (etcd's
// path, so tooling that looks for it finds it).
func (c *Config) BackendPath() string { return filepath.Join(c.SnapDir(), "db") }

// HeartbeatInterval is HeartbeatMs as a duration.
func (c *Config) HeartbeatInterval() time.Duration {
	return time.Duration(c.HeartbeatMs) * time.Millisecond
}

// ElectionTimeout is ElectionMs as a duration.
func (c *Config) ElectionTimeout() time.Duration {
	return time.Duration(c.ElectionMs) * time.Millisecond
}

// ElectionTicks is the raft election timeout in heartbeat ticks.
func (c *Config) ElectionTicks() int { return int(c.ElectionMs / c.HeartbeatMs) }

// IsNewCluster reports whether --initial-cluster-state is "new".
func (c *Config) IsNewCluster() bool { return c.InitialClusterState == ClusterStateNew }

// QuotaBytes is the effective backend quota: 2 GiB when 0 was given, and
// enabled=false when the user gave a negative value.
func (c *Config) QuotaBytes() (limit int64, enabled bool) {
	switch {
	case c.QuotaBackendBytes < 0:
		return 0, false
	case c.QuotaBackendBytes == 0:
		return DefaultQuotaBackendBytes, true
	}
	return c.QuotaBackendBytes, true
}

// FeatureEnabled reports a feature gate's effective value.
func (c *Config) FeatureEnabled(name string) bool { return c.FeatureGates[name] }
