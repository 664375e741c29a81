package config

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
)

// Errors with etcd's exact text, for callers that match on them.
var (
	ErrConflictBootstrapFlags       = errors.New(`multiple discovery or bootstrap flags are set. Choose one of "initial-cluster", "discovery-endpoints" or "discovery-srv"`)
	ErrUnsetAdvertiseClientURLsFlag = errors.New("--advertise-client-urls is required when --listen-client-urls is set explicitly")
	ErrLogRotationInvalidLogOutput  = errors.New("--log-outputs requires a single file path when --log-rotate-config-json is defined")
)

const (
	maxElectionMs             = 50000
	maxSamplingRatePerMillion = 1000000
	minBcryptCost             = 4
	maxBcryptCost             = 31
)

// Validate checks the whole Config. Parse runs it once; it never changes
// the Config. Checks that etcd makes, in embed.Config.Validate, in etcdmain
// or later while starting (listeners, bootstrap), use etcd's messages; the
// ones etcd lacks (insecure cipher suites, bcrypt range) are Strata's.
func (c *Config) Validate() error {
	checks := []func() error{
		c.validateLogging,
		c.validateURLs,
		c.validateCluster,
		c.validateRaft,
		c.validateFeatures,
		c.validateTLS,
		c.validateAuth,
		c.validateStrata,
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) validateLogging() error {
	switch c.Logger {
	case "zap":
	case "capnslog":
		return errors.New("--logger=capnslog is removed in v3.5")
	default:
		return fmt.Errorf("unknown logger option %q", c.Logger)
	}
	if _, err := c.SlogLevel(); err != nil {
		return err
	}
	switch c.LogFormat {
	case "json", "console", "":
	default:
		return fmt.Errorf("unknown log format: %s, supported values json, console", c.LogFormat)
	}
	if len(c.LogOutputs) > 1 && slices.Contains(c.LogOutputs, DefaultLogOutput) {
		return fmt.Errorf("multi logoutput for %q is not supported yet", DefaultLogOutput)
	}
	if c.EnableLogRotation {
		files := 0
		for _, o := range c.LogOutputs {
			if !isStdOutput(o) {
				files++
			}
		}
		if files != 1 {
			return ErrLogRotationInvalidLogOutput
		}
		var rot map[string]any
		if err := json.Unmarshal([]byte(c.LogRotationConfigJSON), &rot); err != nil {
			return fmt.Errorf("improperly formatted log rotation config: %w", err)
		}
	}
	return nil
}

func isStdOutput(o string) bool {
	return o == DefaultLogOutput || o == "stderr" || o == "stdout" || o == "systemd/journal"
}

func (c *Config) validateURLs() error {
	for _, l := range [][]url.URL{c.ListenPeerURLs, c.ListenClientURLs, c.ListenClientHTTPURLs, c.ListenMetricsURLs} {
		if err := checkBindURLs(l); err != nil {
			return err
		}
	}
	if err := checkHostURLs(c.AdvertisePeerURLs); err != nil {
		return fmt.Errorf(`--initial-advertise-peer-urls %q must be "host:port" (%w)`, urlsString(c.AdvertisePeerURLs), err)
	}
	if err := checkHostURLs(c.AdvertiseClientURLs); err != nil {
		return fmt.Errorf(`--advertise-client-urls %q must be in the format "host:port", "unix:/path/to/socket" or "unixs:/path/to/socket" (%w)`, urlsString(c.AdvertiseClientURLs), err)
	}
	if len(c.ListenClientURLs) > 0 && len(c.AdvertiseClientURLs) == 0 {
		return ErrUnsetAdvertiseClientURLsFlag
	}
	for _, h := range c.ListenClientHTTPURLs {
		for _, g := range c.ListenClientURLs {
			if h.Host == g.Host && h.Host != "" {
				return fmt.Errorf("cannot bind both --listen-client-urls and --listen-client-http-urls on the same url %s", h.String())
			}
		}
	}
	return nil
}

// validateStrata checks Strata's own settings.
func (c *Config) validateStrata() error {
	if c.IndexBaseRecords < 0 {
		return fmt.Errorf("--index-base-records %d must not be negative", c.IndexBaseRecords)
	}
	if c.BackendBacklogBytes < 0 {
		return fmt.Errorf("--backend-backlog-bytes %d must not be negative", c.BackendBacklogBytes)
	}
	return nil
}

// checkBindURLs refuses host names other than localhost in listen URLs:
// a name could resolve to an address this machine does not own.
func checkBindURLs(urls []url.URL) error {
	for _, u := range urls {
		if u.Scheme == "unix" || u.Scheme == "unixs" {
			continue
		}
		host, _, err := net.SplitHostPort(u.Host)
		if err != nil {
			return err
		}
		if host != "localhost" && net.ParseIP(host) == nil {
			return fmt.Errorf("expected IP in URL for binding (%s)", u.String())
		}
	}
	return nil
}

func checkHostURLs(urls []url.URL) error {
	for _, u := range urls {
		if u.Scheme == "unix" || u.Scheme == "unixs" {
			continue
		}
		host, _, err := net.SplitHostPort(u.Host)
		if err != nil {
			return err
		}
		if host == "" {
			return fmt.Errorf("unexpected empty host (%s)", u.String())
		}
	}
	return nil
}

func (c *Config) validateCluster() error {
	if c.InitialClusterState != ClusterStateNew && c.InitialClusterState != ClusterStateExisting {
		return fmt.Errorf("unexpected clusterState %q", c.InitialClusterState)
	}
	n := 0
	for _, set := range []bool{c.InitialCluster != "", c.DiscoverySRV != "", len(c.Discovery.Endpoints) > 0} {
		if set {
			n++
		}
	}
	if n > 1 {
		return ErrConflictBootstrapFlags
	}
	if (c.Discovery.Token != "") != (len(c.Discovery.Endpoints) > 0) {
		return errors.New("both --discovery-token and --discovery-endpoints must be set")
	}
	for _, ep := range c.Discovery.Endpoints {
		if strings.TrimSpace(ep) == "" {
			return errors.New("--discovery-endpoints must not contain empty endpoints")
		}
	}
	if c.Discovery.Fallback == "proxy" {
		return fmt.Errorf("v2 proxy is deprecated, and --discovery-fallback can't be configured as %q", "proxy")
	}
	if c.InitialCluster == "" {
		if n == 0 {
			return errors.New("initial cluster unset and no discovery endpoints found")
		}
		return nil
	}
	return c.verifyInitialCluster()
}

// verifyInitialCluster is etcd's bootstrap check (config.VerifyBootstrap /
// VerifyJoinExisting), done here so a bad --initial-cluster fails before
// anything touches the disk. etcd skips it when the data dir already has
// a WAL; the server may likewise ignore InitialCluster then.
func (c *Config) verifyInitialCluster() error {
	m, err := c.InitialClusterMap()
	if err != nil {
		return fmt.Errorf("--initial-cluster %q: %w", c.InitialCluster, err)
	}
	mine, ok := m[c.Name]
	if !ok {
		return fmt.Errorf("couldn't find local name %q in the initial cluster configuration", c.Name)
	}
	seen := map[string]bool{}
	for _, us := range m {
		for _, u := range us {
			if seen[u.String()] {
				return fmt.Errorf("initial cluster %s has duplicate url", c.InitialCluster)
			}
			seen[u.String()] = true
		}
	}
	if !c.IsNewCluster() {
		return nil
	}
	// Compared as strings: etcd also resolves host names before giving up,
	// which a config check should not do.
	adv := map[string]bool{}
	for _, u := range c.AdvertisePeerURLs {
		adv[u.String()] = true
	}
	var missing []string
	for _, u := range mine {
		if !adv[u.String()] {
			missing = append(missing, c.Name+"="+u.String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("--initial-cluster has %s but missing from --initial-advertise-peer-urls=%s", strings.Join(missing, ","), urlsString(c.AdvertisePeerURLs))
	}
	inCluster := map[string]bool{}
	for _, u := range mine {
		inCluster[u.String()] = true
	}
	for _, u := range c.AdvertisePeerURLs {
		if !inCluster[u.String()] {
			return fmt.Errorf("--initial-advertise-peer-urls has %s but missing from --initial-cluster=%s", u.String(), initialClusterFromName(c.Name, c.AdvertisePeerURLs))
		}
	}
	return nil
}

// InitialClusterMap parses InitialCluster ("a=http://h:2380,a=...,b=...")
// into member name -> peer URLs, with etcd's URL rules. Names may repeat
// to give a member several URLs.
func (c *Config) InitialClusterMap() (map[string][]url.URL, error) {
	out := map[string][]url.URL{}
	for _, kv := range strings.Split(c.InitialCluster, ",") {
		if kv == "" {
			continue
		}
		name, raw, _ := strings.Cut(kv, "=")
		us, err := parseURLs(raw)
		if err != nil {
			return nil, err
		}
		out[name] = append(out[name], us...)
	}
	return out, nil
}

func (c *Config) validateRaft() error {
	if c.HeartbeatMs == 0 {
		return fmt.Errorf("--heartbeat-interval must be >0 (set to %dms)", c.HeartbeatMs)
	}
	if c.ElectionMs == 0 {
		return fmt.Errorf("--election-timeout must be >0 (set to %dms)", c.ElectionMs)
	}
	if 5*c.HeartbeatMs > c.ElectionMs {
		return fmt.Errorf("--election-timeout[%vms] should be at least as 5 times as --heartbeat-interval[%vms]", c.ElectionMs, c.HeartbeatMs)
	}
	if c.ElectionMs > maxElectionMs {
		return fmt.Errorf("--election-timeout[%vms] is too long, and should be set less than %vms", c.ElectionMs, maxElectionMs)
	}
	if _, err := c.AutoCompaction(); err != nil {
		return err
	}
	if c.CompactHashCheckTime <= 0 {
		return fmt.Errorf("--compact-hash-check-time must be >0 (set to %v)", c.CompactHashCheckTime)
	}
	return nil
}

func (c *Config) validateFeatures() error {
	for name := range c.FeatureGates {
		if _, ok := knownFeatures[name]; !ok {
			return fmt.Errorf("unrecognized feature gate: %s", name)
		}
	}
	if c.FeatureGates[FeatureLeaseCheckpointPersist] && !c.FeatureGates[FeatureLeaseCheckpoint] {
		return errors.New("enabling feature gate LeaseCheckpointPersist requires enabling feature gate LeaseCheckpoint")
	}
	if c.EnableDistributedTracing {
		switch r := c.DistributedTracingSamplingRate; {
		case r < 0:
			return errors.New("distributed tracing configurition is not valid: (tracing sampling rate must be positive)")
		case r > maxSamplingRatePerMillion:
			return fmt.Errorf("distributed tracing configurition is not valid: (tracing sampling rate must be less than %d)", maxSamplingRatePerMillion)
		}
	}
	return nil
}

func (c *Config) validateTLS() error {
	minV, err := tlsVersion(c.TLSMinVersion)
	if err != nil {
		return err
	}
	maxV, err := tlsVersion(c.TLSMaxVersion)
	if err != nil {
		return err
	}
	if maxV != 0 && minV > maxV {
		return fmt.Errorf("min version (%s) is greater than max version (%s)", c.TLSMinVersion, c.TLSMaxVersion)
	}
	if minV == tls.VersionTLS13 && len(c.CipherSuites) > 0 {
		return errors.New("cipher suites cannot be configured when only TLS1.3 is enabled")
	}
	if _, err := cipherSuites(c.CipherSuites); err != nil {
		return err
	}
	for _, side := range []struct {
		name, certFlag, keyFlag string
		info                    TLSInfo
	}{
		{"client", "--cert-file", "--key-file", c.ClientSecurity},
		{"peer", "--peer-cert-file", "--peer-key-file", c.PeerSecurity},
	} {
		if (side.info.CertFile == "") != (side.info.KeyFile == "") {
			return fmt.Errorf("%s and %s must be given together", side.certFlag, side.keyFlag)
		}
	}
	clientTLS := !c.ClientSecurity.Empty() || c.ClientSecurity.AutoTLS
	for _, u := range append(slices.Clone(c.ListenClientURLs), c.ListenClientHTTPURLs...) {
		if (u.Scheme == "https" || u.Scheme == "unixs") && !clientTLS {
			return fmt.Errorf("TLS key/cert (--cert-file, --key-file) must be provided for client url %s with HTTPS scheme", u.String())
		}
	}
	for _, u := range c.ListenMetricsURLs {
		if (u.Scheme == "https" || u.Scheme == "unixs") && !clientTLS {
			return errors.New("client TLS key/cert (--cert-file, --key-file) must be provided for metrics secure url")
		}
	}
	peerTLS := !c.PeerSecurity.Empty() || c.PeerSecurity.AutoTLS
	for _, u := range c.ListenPeerURLs {
		if (u.Scheme == "https" || u.Scheme == "unixs") && !peerTLS {
			return fmt.Errorf("TLS key/cert (--peer-cert-file, --peer-key-file) must be provided for peer url %s with HTTPS scheme", u.String())
		}
	}
	return nil
}

// tlsVersion maps etcd's version names; "" lets Go choose.
func tlsVersion(v string) (uint16, error) {
	switch v {
	case "":
		return 0, nil
	case "TLS1.2":
		return tls.VersionTLS12, nil
	case "TLS1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("unexpected TLS version %q (must be one of: TLS1.2, TLS1.3)", v)
}

// cipherSuites maps Go suite names to IDs. etcd also accepts Go's
// insecure suites (RC4, 3DES, CBC-SHA256, static RSA key exchange...);
// Strata refuses them so that no configuration can weaken TLS silently.
func cipherSuites(names []string) ([]uint16, error) {
	var ids []uint16
	for _, n := range names {
		id, ok := uint16(0), false
		for _, s := range tls.CipherSuites() {
			if s.Name == n {
				id, ok = s.ID, true
			}
		}
		// etcd's short aliases for the two CHACHA20 suites.
		switch n {
		case "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305":
			id, ok = tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, true
		case "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305":
			id, ok = tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, true
		}
		if !ok {
			for _, s := range tls.InsecureCipherSuites() {
				if s.Name == n {
					return nil, fmt.Errorf("insecure TLS cipher suite %q is not allowed", n)
				}
			}
			return nil, fmt.Errorf("unexpected TLS cipher suite %q", n)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func (c *Config) validateAuth() error {
	if c.BcryptCost < minBcryptCost || c.BcryptCost > maxBcryptCost {
		// etcd logs and falls back to 10; a silently different cost than
		// the one asked for is worse than refusing to start.
		return fmt.Errorf("--bcrypt-cost %d is out of range [%d, %d]", c.BcryptCost, minBcryptCost, maxBcryptCost)
	}
	if _, err := c.AuthTokenOptions(); err != nil {
		return err
	}
	return nil
}
