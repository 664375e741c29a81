package config

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// flagDef is one command-line flag: its name, where it shows in -h, and
// how to bind it to a Config. legacy lists older spellings (the 3.5
// --experimental-* names) that set the same setting; see mergeLegacy.
type flagDef struct {
	group  string
	name   string
	usage  string
	bind   func(c *Config, p *parseState) flag.Value
	legacy []string
}

// Help groups, in the order -h prints them.
const (
	gMember     = "Member"
	gCluster    = "Clustering"
	gSecurity   = "Security"
	gAuth       = "Auth"
	gMonitoring = "Profiling and Monitoring"
	gLogging    = "Logging"
	gTracing    = "Distributed tracing"
	gFeatures   = "Features"
	gUnsafe     = "Unsafe"
	gStrata     = "Strata"
)

var helpGroups = []string{gMember, gCluster, gSecurity, gAuth, gMonitoring, gLogging, gTracing, gFeatures, gUnsafe, gStrata}

func str(f func(c *Config) *string) func(*Config, *parseState) flag.Value {
	return func(c *Config, _ *parseState) flag.Value { return (*stringValue)(f(c)) }
}
func boolean(f func(c *Config) *bool) func(*Config, *parseState) flag.Value {
	return func(c *Config, _ *parseState) flag.Value { return (*boolValue)(f(c)) }
}
func uintv(f func(c *Config) *uint) func(*Config, *parseState) flag.Value {
	return func(c *Config, _ *parseState) flag.Value { return (*uintValue)(f(c)) }
}
func intv(f func(c *Config) *int) func(*Config, *parseState) flag.Value {
	return func(c *Config, _ *parseState) flag.Value { return (*intValue)(f(c)) }
}
func dur(f func(c *Config) *time.Duration) func(*Config, *parseState) flag.Value {
	return func(c *Config, _ *parseState) flag.Value { return (*durationValue)(f(c)) }
}
func urls(f func(c *Config) *[]url.URL) func(*Config, *parseState) flag.Value {
	return func(c *Config, _ *parseState) flag.Value { return &urlsValue{dst: f(c)} }
}
func strs(f func(c *Config) *[]string) func(*Config, *parseState) flag.Value {
	return func(c *Config, _ *parseState) flag.Value { return &stringsValue{dst: f(c)} }
}
func ustrs(f func(c *Config) *[]string) func(*Config, *parseState) flag.Value {
	return func(c *Config, _ *parseState) flag.Value { return &uniqueStringsValue{dst: f(c)} }
}

// flagDefs is every flag Strata accepts: all of etcd 3.7.3's server flags
// (embed.Config.AddFlags plus etcdmain's newConfig), the 3.5/3.6
// --experimental-* spellings as legacy aliases, the 3.5-only flags etcd
// has since dropped (see removedFlags), and Strata's own (--disk-probe,
// --backend-backlog-bytes).
var flagDefs = []flagDef{
	// Member
	{gMember, "name", "Human-readable name of this member.", str(func(c *Config) *string { return &c.Name }), nil},
	{gMember, "data-dir", "Data directory (default ${name}.strata).", str(func(c *Config) *string { return &c.DataDir }), nil},
	{gMember, "wal-dir", "Dedicated WAL directory (default ${data-dir}/member/wal).", str(func(c *Config) *string { return &c.DedicatedWALDir }), nil},
	{gMember, "snapshot-count", "Applied entries between raft snapshots.", func(c *Config, _ *parseState) flag.Value { return (*uint64Value)(&c.SnapshotCount) }, nil},
	{gMember, "snapshot-catchup-entries", "Entries kept after a snapshot for slow followers.", func(c *Config, _ *parseState) flag.Value { return (*uint64Value)(&c.SnapshotCatchUpEntries) }, []string{"experimental-snapshot-catchup-entries"}},
	{gMember, "heartbeat-interval", "Heartbeat interval in milliseconds.", uintv(func(c *Config) *uint { return &c.HeartbeatMs }), nil},
	{gMember, "election-timeout", "Election timeout in milliseconds (>= 5x heartbeat, <= 50000).", uintv(func(c *Config) *uint { return &c.ElectionMs }), nil},
	{gMember, "initial-election-tick-advance", "Fast-forward election ticks at boot.", boolean(func(c *Config) *bool { return &c.InitialElectionTickAdvance }), nil},
	{gMember, "listen-peer-urls", "URLs to listen on for peer traffic.", urls(func(c *Config) *[]url.URL { return &c.ListenPeerURLs }), nil},
	{gMember, "listen-client-urls", "URLs to listen on for client gRPC and HTTP traffic.", urls(func(c *Config) *[]url.URL { return &c.ListenClientURLs }), nil},
	{gMember, "listen-client-http-urls", "URLs to listen on for client HTTP only (moves HTTP off --listen-client-urls).", urls(func(c *Config) *[]url.URL { return &c.ListenClientHTTPURLs }), nil},
	{gMember, "max-snapshots", "Snapshot files to keep, 0 = unlimited (deprecated in etcd 3.6).", uintv(func(c *Config) *uint { return &c.MaxSnapshots }), nil},
	{gMember, "max-wals", "WAL files to keep, 0 = unlimited.", uintv(func(c *Config) *uint { return &c.MaxWALs }), nil},
	{gMember, "memory-mlock", "Lock server memory in RAM.", boolean(func(c *Config) *bool { return &c.MemoryMlock }), []string{"experimental-memory-mlock"}},
	{gMember, "quota-backend-bytes", "Backend size in bytes that raises the NOSPACE alarm; 0 = 2 GiB, negative = no quota.", func(c *Config, _ *parseState) flag.Value { return (*int64Value)(&c.QuotaBackendBytes) }, nil},
	{gMember, "backend-bbolt-freelist-type", "bbolt freelist type (accepted, unused by Strata's page store).", str(func(c *Config) *string { return &c.BackendFreelistType }), nil},
	{gMember, "backend-batch-interval", "Longest wait before a backend commit.", dur(func(c *Config) *time.Duration { return &c.BackendBatchInterval }), nil},
	{gMember, "backend-batch-limit", "Most operations per backend commit.", intv(func(c *Config) *int { return &c.BackendBatchLimit }), nil},
	{gMember, "max-txn-ops", "Most operations in one transaction.", uintv(func(c *Config) *uint { return &c.MaxTxnOps }), nil},
	{gMember, "max-request-bytes", "Largest client request in bytes.", uintv(func(c *Config) *uint { return &c.MaxRequestBytes }), nil},
	{gMember, "max-concurrent-streams", "Most concurrent gRPC streams per client connection.", func(c *Config, _ *parseState) flag.Value { return (*uint32Value)(&c.MaxConcurrentStreams) }, nil},
	{gMember, "grpc-keepalive-min-time", "Least interval a client may ping at.", dur(func(c *Config) *time.Duration { return &c.GRPCKeepAliveMinTime }), nil},
	{gMember, "grpc-keepalive-interval", "Server-to-client ping interval (0 disables).", dur(func(c *Config) *time.Duration { return &c.GRPCKeepAliveInterval }), nil},
	{gMember, "grpc-keepalive-timeout", "Close a connection whose ping is unanswered this long (0 disables).", dur(func(c *Config) *time.Duration { return &c.GRPCKeepAliveTimeout }), nil},
	{gMember, "socket-reuse-port", "Set SO_REUSEPORT on listeners.", boolean(func(c *Config) *bool { return &c.SocketReusePort }), nil},
	{gMember, "socket-reuse-address", "Set SO_REUSEADDR on listeners.", boolean(func(c *Config) *bool { return &c.SocketReuseAddress }), nil},
	{gMember, "enable-grpc-gateway", "Serve the JSON gateway (/v3/...).", boolean(func(c *Config) *bool { return &c.EnableGRPCGateway }), nil},
	{gMember, "raft-read-timeout", "Read timeout on peer connections (at least 5s).", dur(func(c *Config) *time.Duration { return &c.RaftReadTimeout }), nil},
	{gMember, "raft-write-timeout", "Write timeout on peer connections (at least 5s).", dur(func(c *Config) *time.Duration { return &c.RaftWriteTimeout }), nil},
	{gMember, "feature-gates", "Comma-separated Gate=true|false pairs; known gates:\n" + strings.Join(KnownFeatureGates(), "\n"), func(c *Config, p *parseState) flag.Value {
		return newFeatureGatesValue(c, &p.featureGatesRaw)
	}, nil},

	// Clustering
	{gCluster, "initial-advertise-peer-urls", "This member's peer URLs as advertised to the cluster.", urls(func(c *Config) *[]url.URL { return &c.AdvertisePeerURLs }), nil},
	{gCluster, "initial-cluster", "Bootstrap cluster as name=peerURL,...", str(func(c *Config) *string { return &c.InitialCluster }), nil},
	{gCluster, "initial-cluster-state", "'new' to bootstrap, 'existing' to join; ignored once initialized.", func(c *Config, _ *parseState) flag.Value {
		return &choiceValue{dst: &c.InitialClusterState, valids: []string{ClusterStateNew, ClusterStateExisting}}
	}, nil},
	{gCluster, "initial-cluster-token", "Token that keeps clusters apart during bootstrap.", str(func(c *Config) *string { return &c.InitialClusterToken }), nil},
	{gCluster, "advertise-client-urls", "This member's client URLs as advertised to clients.", urls(func(c *Config) *[]url.URL { return &c.AdvertiseClientURLs }), nil},
	{gCluster, "discovery-token", "V3 discovery: token of the cluster to bootstrap.", str(func(c *Config) *string { return &c.Discovery.Token }), nil},
	{gCluster, "discovery-endpoints", "V3 discovery: gRPC endpoints of the discovery service.", ustrs(func(c *Config) *[]string { return &c.Discovery.Endpoints }), nil},
	{gCluster, "discovery-dial-timeout", "V3 discovery: dial timeout.", dur(func(c *Config) *time.Duration { return &c.Discovery.DialTimeout }), nil},
	{gCluster, "discovery-request-timeout", "V3 discovery: request timeout.", dur(func(c *Config) *time.Duration { return &c.Discovery.RequestTimeout }), nil},
	{gCluster, "discovery-keepalive-time", "V3 discovery: keepalive time.", dur(func(c *Config) *time.Duration { return &c.Discovery.KeepAliveTime }), nil},
	{gCluster, "discovery-keepalive-timeout", "V3 discovery: keepalive timeout.", dur(func(c *Config) *time.Duration { return &c.Discovery.KeepAliveTimeout }), nil},
	{gCluster, "discovery-insecure-transport", "V3 discovery: plaintext connections.", boolean(func(c *Config) *bool { return &c.Discovery.InsecureTransport }), nil},
	{gCluster, "discovery-insecure-skip-tls-verify", "V3 discovery: skip server certificate checks (testing only).", boolean(func(c *Config) *bool { return &c.Discovery.InsecureSkipVerify }), nil},
	{gCluster, "discovery-cert", "V3 discovery: client certificate.", str(func(c *Config) *string { return &c.Discovery.Cert }), nil},
	{gCluster, "discovery-key", "V3 discovery: client key.", str(func(c *Config) *string { return &c.Discovery.Key }), nil},
	{gCluster, "discovery-cacert", "V3 discovery: CA bundle.", str(func(c *Config) *string { return &c.Discovery.CACert }), nil},
	{gCluster, "discovery-user", "V3 discovery: user[:password].", str(func(c *Config) *string { return &c.Discovery.User }), nil},
	{gCluster, "discovery-password", "V3 discovery: password.", str(func(c *Config) *string { return &c.Discovery.Password }), nil},
	{gCluster, "discovery-fallback", "What to do when discovery fails; only 'exit' is supported.", func(c *Config, _ *parseState) flag.Value {
		return &choiceValue{dst: &c.Discovery.Fallback, valids: []string{"exit", "proxy"}}
	}, nil},
	{gCluster, "discovery-srv", "DNS SRV domain to bootstrap from.", str(func(c *Config) *string { return &c.DiscoverySRV }), nil},
	{gCluster, "discovery-srv-name", "Suffix of the DNS SRV name.", str(func(c *Config) *string { return &c.DiscoverySRVName }), nil},
	{gCluster, "strict-reconfig-check", "Refuse membership changes that would lose quorum.", boolean(func(c *Config) *bool { return &c.StrictReconfigCheck }), nil},
	{gCluster, "pre-vote", "Use raft pre-vote.", boolean(func(c *Config) *bool { return &c.PreVote }), nil},
	{gCluster, "auto-compaction-retention", "Retention: duration or hours (periodic), revisions (revision); 0 disables.", str(func(c *Config) *string { return &c.AutoCompactionRetention }), nil},
	{gCluster, "auto-compaction-mode", "'periodic' or 'revision'.", str(func(c *Config) *string { return &c.AutoCompactionMode }), nil},
	{gCluster, "v2-deprecation", "Accepted and ignored: etcd 3.7 enforces its default.", func(c *Config, _ *parseState) flag.Value {
		return &choicesValue{dst: &c.V2Deprecation, valids: []string{"write-only", "write-only-skip-check", "write-only-drop-data", "gone"}}
	}, nil},

	// Security
	{gSecurity, "cert-file", "Client-side server certificate.", str(func(c *Config) *string { return &c.ClientSecurity.CertFile }), nil},
	{gSecurity, "key-file", "Client-side server key.", str(func(c *Config) *string { return &c.ClientSecurity.KeyFile }), nil},
	{gSecurity, "client-cert-auth", "Require client certificates signed by --trusted-ca-file.", boolean(func(c *Config) *bool { return &c.ClientSecurity.ClientCertAuth }), nil},
	{gSecurity, "client-cert-file", "Certificate used when this member dials as a client.", str(func(c *Config) *string { return &c.ClientSecurity.ClientCertFile }), nil},
	{gSecurity, "client-key-file", "Key used when this member dials as a client.", str(func(c *Config) *string { return &c.ClientSecurity.ClientKeyFile }), nil},
	{gSecurity, "client-crl-file", "Client certificate revocation list.", str(func(c *Config) *string { return &c.ClientSecurity.CRLFile }), nil},
	{gSecurity, "client-cert-allowed-hostname", "Comma-separated SAN hostnames allowed in client certificates.", strs(func(c *Config) *[]string { return &c.ClientSecurity.AllowedHostnames }), nil},
	{gSecurity, "trusted-ca-file", "CA bundle that verifies client certificates.", str(func(c *Config) *string { return &c.ClientSecurity.TrustedCAFile }), nil},
	{gSecurity, "auto-tls", "Generate a self-signed client certificate.", boolean(func(c *Config) *bool { return &c.ClientSecurity.AutoTLS }), nil},
	{gSecurity, "peer-cert-file", "Peer certificate.", str(func(c *Config) *string { return &c.PeerSecurity.CertFile }), nil},
	{gSecurity, "peer-key-file", "Peer key.", str(func(c *Config) *string { return &c.PeerSecurity.KeyFile }), nil},
	{gSecurity, "peer-client-cert-auth", "Require peer client certificates.", boolean(func(c *Config) *bool { return &c.PeerSecurity.ClientCertAuth }), nil},
	{gSecurity, "peer-client-cert-file", "Certificate used when dialing peers.", str(func(c *Config) *string { return &c.PeerSecurity.ClientCertFile }), nil},
	{gSecurity, "peer-client-key-file", "Key used when dialing peers.", str(func(c *Config) *string { return &c.PeerSecurity.ClientKeyFile }), nil},
	{gSecurity, "peer-trusted-ca-file", "CA bundle that verifies peers.", str(func(c *Config) *string { return &c.PeerSecurity.TrustedCAFile }), nil},
	{gSecurity, "peer-cert-allowed-cn", "Comma-separated CNs allowed for peers.", strs(func(c *Config) *[]string { return &c.PeerSecurity.AllowedCNs }), nil},
	{gSecurity, "peer-cert-allowed-hostname", "Comma-separated SAN hostnames allowed for peers.", strs(func(c *Config) *[]string { return &c.PeerSecurity.AllowedHostnames }), nil},
	{gSecurity, "peer-auto-tls", "Generate a self-signed peer certificate.", boolean(func(c *Config) *bool { return &c.PeerSecurity.AutoTLS }), nil},
	{gSecurity, "peer-crl-file", "Peer certificate revocation list.", str(func(c *Config) *string { return &c.PeerSecurity.CRLFile }), nil},
	{gSecurity, "peer-skip-client-san-verification", "Skip SAN checks of peer client certificates.", boolean(func(c *Config) *bool { return &c.PeerSecurity.SkipClientSANVerify }), []string{"experimental-peer-skip-client-san-verification"}},
	{gSecurity, "self-signed-cert-validity", "Lifetime of auto-tls certificates in years.", uintv(func(c *Config) *uint { return &c.SelfSignedCertValidity }), nil},
	{gSecurity, "cipher-suites", "Comma-separated TLS 1.2 cipher suites (Go names); empty = Go's defaults.", strs(func(c *Config) *[]string { return &c.CipherSuites }), nil},
	{gSecurity, "cors", "Comma-separated CORS origins, * = all.", func(c *Config, _ *parseState) flag.Value { return &corsValue{dst: &c.CORS} }, nil},
	{gSecurity, "host-whitelist", "Comma-separated Host headers accepted on insecure listeners, * = all.", ustrs(func(c *Config) *[]string { return &c.HostWhitelist }), nil},
	{gSecurity, "tls-min-version", "Minimum TLS version: TLS1.2 or TLS1.3.", str(func(c *Config) *string { return &c.TLSMinVersion }), nil},
	{gSecurity, "tls-max-version", "Maximum TLS version: TLS1.2 or TLS1.3; empty = Go's highest.", str(func(c *Config) *string { return &c.TLSMaxVersion }), nil},

	// Auth
	{gAuth, "auth-token", "'simple' or 'jwt,pub-key=FILE,priv-key=FILE,sign-method=RS256,ttl=5m'.", str(func(c *Config) *string { return &c.AuthToken }), nil},
	{gAuth, "bcrypt-cost", "bcrypt cost for password hashes (4..31).", uintv(func(c *Config) *uint { return &c.BcryptCost }), nil},
	{gAuth, "auth-token-ttl", "Lifetime of simple tokens in seconds.", uintv(func(c *Config) *uint { return &c.AuthTokenTTL }), nil},

	// Profiling and monitoring
	{gMonitoring, "enable-pprof", "Serve /debug/pprof on the client URLs.", boolean(func(c *Config) *bool { return &c.EnablePprof }), nil},
	{gMonitoring, "metrics", "'basic' or 'extensive' (adds gRPC histograms).", str(func(c *Config) *string { return &c.Metrics }), nil},
	{gMonitoring, "listen-metrics-urls", "URLs serving only /metrics and health endpoints.", urls(func(c *Config) *[]url.URL { return &c.ListenMetricsURLs }), nil},

	// Logging
	{gLogging, "logger", "Only 'zap' is accepted (etcd's value); output is structured JSON.", str(func(c *Config) *string { return &c.Logger }), nil},
	{gLogging, "log-outputs", "Comma-separated: default, stderr, stdout, systemd/journal or file paths.", ustrs(func(c *Config) *[]string { return &c.LogOutputs }), nil},
	{gLogging, "log-level", "debug, info, warn, error, dpanic, panic or fatal.", str(func(c *Config) *string { return &c.LogLevel }), nil},
	{gLogging, "log-format", "json or console.", str(func(c *Config) *string { return &c.LogFormat }), nil},
	{gLogging, "enable-log-rotation", "Rotate the single file in --log-outputs.", boolean(func(c *Config) *bool { return &c.EnableLogRotation }), nil},
	{gLogging, "log-rotation-config-json", "Rotation settings as JSON.", str(func(c *Config) *string { return &c.LogRotationConfigJSON }), nil},
	{gLogging, "warning-unary-request-duration", "Log unary requests slower than this.", dur(func(c *Config) *time.Duration { return &c.WarningUnaryRequestDuration }), []string{"experimental-warning-unary-request-duration"}},

	// Distributed tracing
	{gTracing, "enable-distributed-tracing", "Enable OpenTelemetry tracing.", boolean(func(c *Config) *bool { return &c.EnableDistributedTracing }), []string{"experimental-enable-distributed-tracing"}},
	{gTracing, "distributed-tracing-address", "Collector address.", str(func(c *Config) *string { return &c.DistributedTracingAddress }), []string{"experimental-distributed-tracing-address"}},
	{gTracing, "distributed-tracing-service-name", "Service name, the same on every member.", str(func(c *Config) *string { return &c.DistributedTracingServiceName }), []string{"experimental-distributed-tracing-service-name"}},
	{gTracing, "distributed-tracing-instance-id", "Instance ID, unique per member.", str(func(c *Config) *string { return &c.DistributedTracingInstanceID }), []string{"experimental-distributed-tracing-instance-id"}},
	{gTracing, "distributed-tracing-sampling-rate", "Samples per million spans.", intv(func(c *Config) *int { return &c.DistributedTracingSamplingRate }), []string{"experimental-distributed-tracing-sampling-rate"}},

	// Features
	{gFeatures, "corrupt-check-time", "Interval between cluster corruption checks (0 disables).", dur(func(c *Config) *time.Duration { return &c.CorruptCheckTime }), []string{"experimental-corrupt-check-time"}},
	{gFeatures, "compact-hash-check-time", "Interval of the leader's compaction hash check.", dur(func(c *Config) *time.Duration { return &c.CompactHashCheckTime }), []string{"experimental-compact-hash-check-time"}},
	{gFeatures, "compaction-batch-limit", "Most revisions deleted per compaction batch.", intv(func(c *Config) *int { return &c.CompactionBatchLimit }), []string{"experimental-compaction-batch-limit"}},
	{gFeatures, "compaction-sleep-interval", "Pause between compaction batches.", dur(func(c *Config) *time.Duration { return &c.CompactionSleepInterval }), []string{"experimental-compaction-sleep-interval"}},
	{gFeatures, "watch-progress-notify-interval", "Period of watch progress notifications.", dur(func(c *Config) *time.Duration { return &c.WatchProgressNotifyInterval }), []string{"experimental-watch-progress-notify-interval"}},
	{gFeatures, "downgrade-check-time", "Interval between downgrade status checks.", dur(func(c *Config) *time.Duration { return &c.DowngradeCheckTime }), []string{"experimental-downgrade-check-time"}},
	{gFeatures, "warning-apply-duration", "Log applies slower than this.", dur(func(c *Config) *time.Duration { return &c.WarningApplyDuration }), []string{"experimental-warning-apply-duration"}},
	{gFeatures, "bootstrap-defrag-threshold-megabytes", "Defragment at start when this many MiB would be freed (0 = off).", uintv(func(c *Config) *uint { return &c.BootstrapDefragThresholdMegabytes }), []string{"experimental-bootstrap-defrag-threshold-megabytes"}},
	{gFeatures, "max-learners", "Most learner members.", intv(func(c *Config) *int { return &c.MaxLearners }), nil},

	// Unsafe
	{gUnsafe, "force-new-cluster", "Rewrite membership to this one member (disaster recovery).", boolean(func(c *Config) *bool { return &c.ForceNewCluster }), nil},
	{gUnsafe, "unsafe-no-fsync", "Never fsync; loses data on crash.", boolean(func(c *Config) *bool { return &c.UnsafeNoFsync }), nil},

	// Strata
	{gStrata, "disk-probe", "Measure WAL fdatasync latency at start and size batching from it.", boolean(func(c *Config) *bool { return &c.DiskProbe }), nil},
	{gStrata, "adaptive-procs", "Run on one CPU (GOMAXPROCS 1) while the load uses less than 0.9 of one, on all under load; ignored when GOMAXPROCS is set.", boolean(func(c *Config) *bool { return &c.AdaptiveProcs }), nil},
	{gStrata, "discovery-srv-server", "DNS server (host:port) for --discovery-srv lookups instead of the system resolver.", str(func(c *Config) *string { return &c.DiscoverySRVServer }), nil},
	{gStrata, "index-base-records", "Least number of records written between two writes of the key index base (member/snap/db.index), which a restart reads instead of every record; a base is due after max(this, keys / 8) records. 0 = 50,000.", intv(func(c *Config) *int { return &c.IndexBaseRecords }), nil},
	{gStrata, "backend-backlog-bytes", "Most bytes of acknowledged writes held in memory while backend commits fail (a full data disk); past it writes get NOSPACE. 0 = 64 MiB.", func(c *Config, _ *parseState) flag.Value { return (*int64Value)(&c.BackendBacklogBytes) }, nil},
}

// ignoredFlags are flags etcd 3.7 registers and ignores (etcdmain's
// "ignored" list): pre-3.0 and test-harness flags.
var ignoredFlags = []string{
	"cluster-active-size", "cluster-remove-delay", "cluster-sync-interval",
	"config", "force", "max-result-buffer", "max-retry-attempts",
	"peer-heartbeat-interval", "peer-election-timeout", "retry-interval",
	"snapshot", "v", "vv", "test.coverprofile", "test.outputdir",
}

// removedFlags are etcd 3.5 flags dropped by 3.6/3.7 (v2 API, v2 proxy,
// v2 discovery). They are accepted so 3.5 command lines still start, and
// checked in mergeLegacy: a value that would need the v2 machinery is an
// error, anything else is logged and ignored.
var removedFlags = []string{
	"enable-v2", "experimental-enable-v2v3", "proxy", "proxy-failure-wait",
	"proxy-refresh-interval", "proxy-dial-timeout", "proxy-write-timeout",
	"proxy-read-timeout", "discovery", "discovery-proxy",
}

// newFlagSet binds every flag to c. Legacy spellings are bound to the
// parse state so mergeLegacy can see which spelling the user chose.
func newFlagSet(c *Config, p *parseState, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("strata", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usageLine) }
	for _, d := range flagDefs {
		fs.Var(d.bind(c, p), d.name, d.usage)
		for _, old := range d.legacy {
			fs.Var(d.bind(p.legacyCfg, p), old, "Deprecated: use --"+d.name+".")
		}
	}
	for old := range experimentalFeatureFlags {
		v := new(bool)
		p.expBools[old] = v
		fs.Var((*boolValue)(v), old, "Deprecated: use --feature-gates="+experimentalFeatureFlags[old]+"=true.")
	}
	fs.Var((*stringValue)(&p.configFile), "config-file", "Path to a YAML configuration file; when given, other flags and ETCD_* variables are ignored.")
	fs.Var((*boolValue)(&c.PrintVersion), "version", "Print the version and exit.")
	for _, name := range ignoredFlags {
		fs.Var(&ignoredValue{}, name, "")
	}
	for _, name := range removedFlags {
		v := &removedValue{isBool: name == "enable-v2"}
		p.removed[name] = v
		fs.Var(v, name, "Removed in etcd 3.6; accepted and ignored.")
	}
	return fs
}

// removedValue keeps the raw text of a removed 3.5 flag. enable-v2 was a
// bool flag, so it must still parse bare.
type removedValue struct {
	val    string
	isBool bool
}

func (v *removedValue) Set(s string) error { v.val = s; return nil }
func (v *removedValue) String() string     { return v.val }
func (v *removedValue) IsBoolFlag() bool   { return v.isBool }
