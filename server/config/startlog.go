package config

import (
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/strata-db/strata/version"
)

// StartMessage is the message of the start-up line that carries the whole
// effective configuration. It is etcd's text: operators and etcd's own
// e2e tests grep for it and for its "key":value fields.
const StartMessage = "starting an etcd server"

// StartAttrs is the effective configuration as etcd logs it at start (its
// embed package's "starting an etcd server" line): etcd's field names in
// etcd's order, with etcd's value formats, so a line written for etcd's
// log matches Strata's too:
//
//   - durations as Go prints them ("100ms", "1m0s"), never nanoseconds;
//   - URL settings as JSON lists (an empty list is [], not null);
//   - initial-cluster as sorted "name=url" pairs joined by commas, and,
//     like initial-cluster-token, empty once the member is initialized
//     (etcd then ignores both);
//   - feature-gates as the sorted "Name=bool" pairs the user gave;
//   - quota-backend-bytes with 0 shown as the 2 GiB it selects;
//   - auto-compaction-retention as the parsed retention: a duration in
//     periodic mode, and in revision mode the revision count as a number
//     of nanoseconds, which is how etcd stores and prints it.
//
// memberInitialized is whether the data dir already holds a WAL.
func (c *Config) StartAttrs(memberInitialized bool) []any {
	initialCluster, token := "", ""
	if !memberInitialized {
		initialCluster, token = c.initialClusterString(), c.InitialClusterToken
		if len(c.Discovery.Endpoints) > 0 {
			token = c.Discovery.Token
		}
	}
	quota := c.QuotaBackendBytes
	if quota == 0 {
		quota = DefaultQuotaBackendBytes
	}
	var retention time.Duration
	if ac, err := c.AutoCompaction(); err == nil {
		retention = ac.Period
		if c.AutoCompactionMode == CompactionModeRevision {
			retention = time.Duration(ac.Revisions)
		}
	}
	ms := func(n uint) string { return (time.Duration(n) * time.Millisecond).String() }
	return []any{
		"etcd-version", version.Etcd,
		"git-sha", gitSHA(),
		"go-version", runtime.Version(),
		"go-os", runtime.GOOS,
		"go-arch", runtime.GOARCH,
		"max-cpu-set", runtime.GOMAXPROCS(0),
		"max-cpu-available", runtime.NumCPU(),
		"member-initialized", memberInitialized,
		"name", c.Name,
		"data-dir", c.DataDir,
		"wal-dir", c.DedicatedWALDir,
		"wal-dir-dedicated", c.DedicatedWALDir,
		"member-dir", filepath.Join(c.DataDir, "member"),
		"force-new-cluster", c.ForceNewCluster,
		"heartbeat-interval", ms(c.HeartbeatMs),
		// etcd prints the whole ticks it runs, not the flag's value.
		"election-timeout", ms(uint(c.ElectionTicks()) * c.HeartbeatMs),
		"initial-election-tick-advance", c.InitialElectionTickAdvance,
		"snapshot-count", c.SnapshotCount,
		"max-wals", c.MaxWALs,
		"max-snapshots", c.MaxSnapshots,
		"snapshot-catchup-entries", c.SnapshotCatchUpEntries,
		"initial-advertise-peer-urls", urlStrings(c.AdvertisePeerURLs),
		"listen-peer-urls", urlStrings(c.ListenPeerURLs),
		"advertise-client-urls", urlStrings(c.AdvertiseClientURLs),
		"listen-client-urls", urlStrings(c.ListenClientURLs),
		"listen-metrics-urls", urlStrings(c.ListenMetricsURLs),
		"local-address", c.PeerLocalAddr(),
		"cors", sortedStrings(c.CORS),
		"host-whitelist", sortedStrings(c.HostWhitelist),
		"initial-cluster", initialCluster,
		"initial-cluster-state", c.InitialClusterState,
		"initial-cluster-token", token,
		"quota-backend-bytes", quota,
		"max-request-bytes", c.MaxRequestBytes,
		"max-concurrent-streams", c.MaxConcurrentStreams,
		"pre-vote", c.PreVote,
		"feature-gates", givenGates(c.FeatureGatesGiven),
		// etcd's server config never sets this field (the feature gate
		// InitialCorruptCheck is what decides), so etcd always logs false.
		"initial-corrupt-check", false,
		"corrupt-check-time-interval", c.CorruptCheckTime.String(),
		"compact-check-time-interval", c.CompactHashCheckTime.String(),
		"auto-compaction-mode", c.AutoCompactionMode,
		"auto-compaction-retention", retention.String(),
		"auto-compaction-interval", retention.String(),
		"discovery-token", c.Discovery.Token,
		"discovery-endpoints", strings.Join(c.Discovery.Endpoints, ","),
		"discovery-dial-timeout", c.Discovery.DialTimeout.String(),
		"discovery-request-timeout", c.Discovery.RequestTimeout.String(),
		"discovery-keepalive-time", c.Discovery.KeepAliveTime.String(),
		"discovery-keepalive-timeout", c.Discovery.KeepAliveTimeout.String(),
		"discovery-insecure-transport", c.Discovery.InsecureTransport,
		"discovery-insecure-skip-tls-verify", c.Discovery.InsecureSkipVerify,
		"discovery-cert", c.Discovery.Cert,
		"discovery-key", c.Discovery.Key,
		"discovery-cacert", c.Discovery.CACert,
		"discovery-user", c.Discovery.User,
		"downgrade-check-interval", c.DowngradeCheckTime.String(),
		"max-learners", c.MaxLearners,
		// etcd 3.7 enforces its default whatever is given.
		"v2-deprecation", "write-only",
	}
}

// LogStart writes the start-up configuration line (StartAttrs) at info,
// with extra attributes (Strata's own version) at the end.
func (c *Config) LogStart(lg *slog.Logger, memberInitialized bool, extra ...any) {
	lg.Info(StartMessage, append(c.StartAttrs(memberInitialized), extra...)...)
}

// gitSHA is the commit the binary was built from, as the Go toolchain
// stamps it, or etcd's text for a build without one.
func gitSHA() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "Not provided (use ./build instead of go build)"
}

func urlStrings(us []url.URL) []string {
	out := make([]string, 0, len(us))
	for _, u := range us {
		out = append(out, u.String())
	}
	return out
}

func sortedStrings(s []string) []string {
	out := append(make([]string, 0, len(s)), s...)
	sort.Strings(out)
	return out
}

// initialClusterString is --initial-cluster as etcd prints its parsed
// map: every name=url pair, sorted, joined by commas.
func (c *Config) initialClusterString() string {
	var pairs []string
	for _, p := range strings.Split(c.InitialCluster, ",") {
		name, rawURL, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			continue
		}
		if u, err := url.Parse(rawURL); err == nil {
			rawURL = u.String()
		}
		pairs = append(pairs, name+"="+rawURL)
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

// PeerLocalAddr is the member's local address for peer dials, as etcd
// infers it: with the SetMemberLocalAddr gate, the first advertised peer
// URL whose host is an IP that is neither loopback nor unspecified; ""
// (the kernel chooses) without the gate or without such a URL.
func (c *Config) PeerLocalAddr() string {
	if !c.FeatureEnabled(FeatureSetMemberLocalAddr) {
		return ""
	}
	for _, u := range c.AdvertisePeerURLs {
		if ip := net.ParseIP(u.Hostname()); ip != nil && !ip.IsLoopback() && !ip.IsUnspecified() {
			return ip.String()
		}
	}
	return ""
}

func givenGates(m map[string]bool) string {
	pairs := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, fmt.Sprintf("%s=%t", k, m[k]))
	}
	return strings.Join(pairs, ",")
}
