package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	c, _ := mustParse(t, nil, nil)
	checks := []struct {
		name      string
		got, want any
	}{
		{"name", c.Name, "default"},
		{"data-dir", c.DataDir, "default.strata"},
		{"WALDir", c.WALDir(), filepath.Join("default.strata", "member", "wal")},
		{"SnapDir", c.SnapDir(), filepath.Join("default.strata", "member", "snap")},
		{"BackendPath", c.BackendPath(), filepath.Join("default.strata", "member", "snap", "db")},
		{"listen-client-urls", urlsString(c.ListenClientURLs), "http://localhost:2379"},
		{"advertise-client-urls", urlsString(c.AdvertiseClientURLs), "http://localhost:2379"},
		{"listen-peer-urls", urlsString(c.ListenPeerURLs), "http://localhost:2380"},
		{"initial-advertise-peer-urls", urlsString(c.AdvertisePeerURLs), "http://localhost:2380"},
		{"initial-cluster", c.InitialCluster, "default=http://localhost:2380"},
		{"initial-cluster-state", c.InitialClusterState, "new"},
		{"initial-cluster-token", c.InitialClusterToken, "etcd-cluster"},
		{"snapshot-count", c.SnapshotCount, uint64(10000)},
		{"heartbeat", c.HeartbeatInterval(), 100 * time.Millisecond},
		{"election", c.ElectionTimeout(), time.Second},
		{"election ticks", c.ElectionTicks(), 10},
		{"quota-backend-bytes", c.QuotaBackendBytes, int64(0)},
		{"max-request-bytes", c.MaxRequestBytes, uint(1572864)},
		{"max-txn-ops", c.MaxTxnOps, uint(128)},
		{"backend-batch-interval", c.BackendBatchInterval, 100 * time.Millisecond},
		{"backend-batch-limit", c.BackendBatchLimit, 10000},
		{"max-wals", c.MaxWALs, uint(5)},
		{"max-snapshots", c.MaxSnapshots, uint(5)},
		{"log-level", c.LogLevel, "info"},
		{"logger", c.Logger, "zap"},
		{"log-outputs", c.LogOutputs, []string{"default"}},
		{"auto-compaction-mode", c.AutoCompactionMode, "periodic"},
		{"auto-compaction-retention", c.AutoCompactionRetention, "0"},
		{"watch-progress-notify-interval", c.WatchProgressNotifyInterval, 10 * time.Minute},
		{"grpc-keepalive-min-time", c.GRPCKeepAliveMinTime, 5 * time.Second},
		{"grpc-keepalive-interval", c.GRPCKeepAliveInterval, 2 * time.Hour},
		{"grpc-keepalive-timeout", c.GRPCKeepAliveTimeout, 20 * time.Second},
		{"auth-token", c.AuthToken, "simple"},
		{"auth-token-ttl", c.AuthTokenTTL, uint(300)},
		{"bcrypt-cost", c.BcryptCost, uint(10)},
		{"tls-min-version", c.TLSMinVersion, "TLS1.2"},
		{"enable-pprof", c.EnablePprof, false},
		{"disk-probe", c.DiskProbe, true},
		{"backend-backlog-bytes", c.BackendBacklogBytes, int64(64 << 20)},
		{"index-base-records", c.IndexBaseRecords, 0},
		{"pre-vote", c.PreVote, true},
		{"strict-reconfig-check", c.StrictReconfigCheck, true},
		{"enable-grpc-gateway", c.EnableGRPCGateway, true},
		{"InitialCorruptCheck", c.FeatureEnabled(FeatureInitialCorruptCheck), false},
		{"TxnModeWriteWithSharedBuffer", c.FeatureEnabled(FeatureTxnModeWriteWithSharedBuffer), true},
		{"explicitly set", len(c.ExplicitlySet), 0},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %#v, want %#v", ch.name, ch.got, ch.want)
		}
	}
	limit, on := c.QuotaBytes()
	if limit != 2<<30 || !on {
		t.Errorf("QuotaBytes = %d,%v; want 2 GiB, enabled", limit, on)
	}
	m, err := c.InitialClusterMap()
	if err != nil || len(m) != 1 || urlsString(m["default"]) != "http://localhost:2380" {
		t.Errorf("InitialClusterMap = %v, %v", m, err)
	}
	if l, _ := c.SlogLevel(); l.String() != "INFO" {
		t.Errorf("SlogLevel = %v", l)
	}
}

func TestUnknownFlag(t *testing.T) {
	for _, arg := range []string{"-x", "--x", "--no-such-flag=1"} {
		var stderr bytes.Buffer
		_, err := Parse([]string{"--name=a", arg}, nil, &stderr)
		var ue *UsageError
		if !errors.As(err, &ue) || ExitCode(err) != 2 {
			t.Fatalf("Parse(%s) = %v; want a UsageError with exit code 2", arg, err)
		}
		name := strings.TrimLeft(strings.SplitN(arg, "=", 2)[0], "-")
		want := "flag provided but not defined: -" + name
		if err.Error() != want || !strings.Contains(stderr.String(), want) {
			t.Errorf("error %q, stderr %q; want %q", err, stderr.String(), want)
		}
		if !strings.Contains(stderr.String(), "Usage:") {
			t.Errorf("usage not printed: %q", stderr.String())
		}
	}
}

func TestBadValueIsUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"--snapshot-count=lots"},
		{"--initial-cluster-state=maybe"},
		{"--listen-client-urls=ftp://x:1"},
		{"--feature-gates=NoSuchGate=true"},
		{"--client-cert-auth=yes-please"},
	} {
		var stderr bytes.Buffer
		_, err := Parse(args, nil, &stderr)
		if ExitCode(err) != 2 {
			t.Errorf("Parse(%q) = %v (exit %d); want exit 2", args, err, ExitCode(err))
		}
	}
	_, stderr := parseErr(t, []string{"--initial-cluster-state=maybe"}, nil, `invalid value "maybe" for flag -initial-cluster-state: invalid value`)
	_ = stderr
	parseErr(t, []string{"--feature-gates=Foo=true"}, nil, "unrecognized feature gate: Foo")
	parseErr(t, []string{"--listen-peer-urls=http://10.0.0.1:2380/path"}, nil, "URL must not contain a path")
}

func TestHelpAndVersion(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		var stderr bytes.Buffer
		_, err := Parse([]string{arg}, nil, &stderr)
		if !errors.Is(err, ErrHelp) || ExitCode(err) != 0 {
			t.Errorf("Parse(%s) = %v; want ErrHelp", arg, err)
		}
		if !strings.Contains(stderr.String(), "Usage:") {
			t.Errorf("Parse(%s) printed no usage", arg)
		}
	}
	h := Help()
	for _, want := range []string{"--listen-client-urls 'http://localhost:2379'", "--data-dir '${name}.strata'",
		"--experimental-watch-progress-notify-interval -> --watch-progress-notify-interval", "InitialCorruptCheck=true|false", "--disk-probe 'true'",
		"--backend-backlog-bytes '67108864'"} {
		if !strings.Contains(h, want) {
			t.Errorf("Help() lacks %q", want)
		}
	}
	// --version wins over everything, even an invalid environment.
	c, _ := mustParse(t, []string{"--version", "--election-timeout=1"}, []string{"ETCD_NAME=x", "ETCD_SNAPSHOT_COUNT=bad"})
	if !c.PrintVersion {
		t.Error("PrintVersion not set")
	}
}

func TestPositionalArgument(t *testing.T) {
	err, _ := parseErr(t, []string{"--name=a", "extra"}, nil, `"extra" is not a valid flag`)
	if ExitCode(err) != 1 {
		t.Errorf("exit code %d, want 1", ExitCode(err))
	}
}

func TestBoolAndValueForms(t *testing.T) {
	c, _ := mustParse(t, []string{"-enable-pprof", "--client-cert-auth=true", "--pre-vote=false", "-name", "n1", "--data-dir", "/d"}, nil)
	if !c.EnablePprof || !c.ClientSecurity.ClientCertAuth || c.PreVote || c.Name != "n1" || c.DataDir != "/d" {
		t.Errorf("got pprof=%v cca=%v prevote=%v name=%q dir=%q", c.EnablePprof, c.ClientSecurity.ClientCertAuth, c.PreVote, c.Name, c.DataDir)
	}
	if c.InitialCluster != "n1=http://localhost:2380" {
		t.Errorf("initial-cluster = %q; want derived from --name", c.InitialCluster)
	}
}

func TestEnvironment(t *testing.T) {
	env := []string{
		"PATH=/usr/bin",
		"ETCD_NAME=envnode",
		"ETCD_DATA_DIR=/var/lib/env",
		"ETCD_LISTEN_CLIENT_URLS=http://127.0.0.1:2379,http://10.0.0.1:2379,http://127.0.0.1:2379",
		"ETCD_ADVERTISE_CLIENT_URLS=http://10.0.0.1:2379",
		"ETCD_CLIENT_CERT_AUTH=true",
		"ETCD_ENABLE_PPROF=1",
		"ETCD_SNAPSHOT_COUNT=123",
		"ETCD_HEARTBEAT_INTERVAL=50",
		"ETCD_ELECTION_TIMEOUT=500",
		"ETCD_LOG_OUTPUTS=stdout,stderr,stdout",
		"ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL=5s",
		"ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK=true",
		"ETCD_QUOTA_BACKEND_BYTES=",
		"ETCD_UNKNOWN_THING=1",
		"ETCD_VERSION=true",
	}
	c, stderr := mustParse(t, nil, env)
	if c.Name != "envnode" || c.DataDir != "/var/lib/env" || c.SnapshotCount != 123 || c.HeartbeatMs != 50 || c.ElectionMs != 500 {
		t.Errorf("scalars: %+v", c)
	}
	if got := urlsString(c.ListenClientURLs); got != "http://10.0.0.1:2379,http://127.0.0.1:2379" {
		t.Errorf("listen-client-urls = %s (want deduplicated, sorted)", got)
	}
	if !c.ClientSecurity.ClientCertAuth || !c.EnablePprof {
		t.Error("bool env vars not applied")
	}
	if !reflect.DeepEqual(c.LogOutputs, []string{"stderr", "stdout"}) {
		t.Errorf("log-outputs = %v", c.LogOutputs)
	}
	if c.WatchProgressNotifyInterval != 5*time.Second || !c.FeatureEnabled(FeatureInitialCorruptCheck) {
		t.Errorf("experimental env: interval %v, gate %v", c.WatchProgressNotifyInterval, c.FeatureEnabled(FeatureInitialCorruptCheck))
	}
	if c.PrintVersion {
		t.Error("ETCD_VERSION must not set --version")
	}
	if !c.ExplicitlySet["name"] || !c.ExplicitlySet["watch-progress-notify-interval"] || c.ExplicitlySet["quota-backend-bytes"] {
		t.Errorf("ExplicitlySet = %v", c.ExplicitlySet)
	}
	for _, want := range []string{
		`"msg":"recognized and used environment variable","variable-name":"ETCD_NAME"`,
		`"msg":"unrecognized environment variable","environment-variable":"ETCD_UNKNOWN_THING=1"`,
		`"msg":"cannot set special environment variable","key":"ETCD_VERSION"`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %s:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "PATH") {
		t.Error("non-ETCD variables must not be reported")
	}
}

func TestFlagBeatsEnvAndConflictIsError(t *testing.T) {
	// A flag on the command line and a different flag in the environment
	// combine; the same flag in both is refused, as etcd does (fatally).
	c, _ := mustParse(t, []string{"--name=flagnode"}, []string{"ETCD_SNAPSHOT_COUNT=7"})
	if c.Name != "flagnode" || c.SnapshotCount != 7 {
		t.Errorf("name %q count %d", c.Name, c.SnapshotCount)
	}
	err, _ := parseErr(t, []string{"--name=flagnode"}, []string{"ETCD_NAME=envnode"},
		`conflicting environment variable "ETCD_NAME" is shadowed by corresponding command-line flag`)
	if ExitCode(err) != 1 {
		t.Errorf("exit code %d", ExitCode(err))
	}
	parseErr(t, nil, []string{"ETCD_SNAPSHOT_COUNT=many"}, `invalid value "many" for ETCD_SNAPSHOT_COUNT: parse error`)
}

func TestListenClientWithoutAdvertise(t *testing.T) {
	parseErr(t, []string{"--listen-client-urls=http://10.0.0.1:2379"}, nil, ErrUnsetAdvertiseClientURLsFlag.Error())
	parseErr(t, nil, []string{"ETCD_LISTEN_CLIENT_URLS=http://10.0.0.1:2379"}, ErrUnsetAdvertiseClientURLsFlag.Error())
}

func TestExperimentalSpellings(t *testing.T) {
	c, stderr := mustParse(t, []string{
		"--experimental-watch-progress-notify-interval=5s",
		"--experimental-initial-corrupt-check=true",
		"--experimental-compact-hash-check-enabled",
		"--experimental-compact-hash-check-time=3m",
		"--experimental-snapshot-catchup-entries=7000",
		"--experimental-peer-skip-client-san-verification=true",
	}, nil)
	if c.WatchProgressNotifyInterval != 5*time.Second || c.CompactHashCheckTime != 3*time.Minute || c.SnapshotCatchUpEntries != 7000 || !c.PeerSecurity.SkipClientSANVerify {
		t.Errorf("values not moved to new names: %+v", c)
	}
	if !c.FeatureEnabled(FeatureInitialCorruptCheck) || !c.FeatureEnabled(FeatureCompactHashCheck) {
		t.Errorf("gates: %v", c.FeatureGates)
	}
	if !strings.Contains(stderr, "--experimental-watch-progress-notify-interval is deprecated") {
		t.Errorf("no deprecation warning:\n%s", stderr)
	}
	parseErr(t, []string{"--experimental-watch-progress-notify-interval=5s", "--watch-progress-notify-interval=6s"}, nil,
		"cannot set --experimental-watch-progress-notify-interval and --watch-progress-notify-interval at the same time, please use --watch-progress-notify-interval only")
	parseErr(t, []string{"--experimental-initial-corrupt-check=true", "--feature-gates=InitialCorruptCheck=false"}, nil,
		"cannot specify both flags: --experimental-initial-corrupt-check=true and --feature-gates=InitialCorruptCheck=false at the same time")
	parseErr(t, []string{"--proxy=on"}, nil, "v2 proxy")
	parseErr(t, []string{"--discovery=https://discovery.etcd.io/x"}, nil, "--discovery (v2 discovery)")
	c, _ = mustParse(t, []string{"--feature-gates=AllAlpha=true,PriorityRequest=false", "--feature-gates=FastLeaseKeepAlive=false"}, nil)
	if !c.FeatureEnabled(FeatureInitialCorruptCheck) || c.FeatureEnabled(FeaturePriorityRequest) || c.FeatureEnabled(FeatureFastLeaseKeepAlive) || !c.FeatureEnabled(FeatureTxnModeWriteWithSharedBuffer) {
		t.Errorf("AllAlpha/override/repeat: %v", c.FeatureGates)
	}
}

func TestConfigFileWins(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "strata.yaml")
	yml := "name: filenode\ndata-dir: " + dir + "/data\nsnapshot-count: 42\n"
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	// The flag's own value, other flags and ETCD_* are all ignored; even a
	// conflicting or invalid environment does not matter in file mode.
	c, stderr := mustParse(t, []string{"--config-file=" + path, "--name=flagnode", "--max-txn-ops=1"},
		[]string{"ETCD_NAME=envnode", "ETCD_SNAPSHOT_COUNT=bad"})
	if c.Name != "filenode" || c.SnapshotCount != 42 || c.MaxTxnOps != DefaultMaxTxnOps || c.ConfigFile != path {
		t.Errorf("file mode: name %q count %d txnops %d file %q", c.Name, c.SnapshotCount, c.MaxTxnOps, c.ConfigFile)
	}
	if c.InitialCluster != "filenode=http://localhost:2380" {
		t.Errorf("initial-cluster = %q", c.InitialCluster)
	}
	if !strings.Contains(stderr, "other configuration command line flags and environment variables will be ignored") {
		t.Errorf("no file-mode notice:\n%s", stderr)
	}
	// ETCD_CONFIG_FILE selects file mode when the flag is absent.
	c, _ = mustParse(t, []string{"--name=flagnode"}, []string{"ETCD_CONFIG_FILE=" + path, "ETCD_NAME=envnode"})
	if c.Name != "filenode" {
		t.Errorf("ETCD_CONFIG_FILE: name %q", c.Name)
	}
	// The flag beats ETCD_CONFIG_FILE.
	other := filepath.Join(dir, "other.yaml")
	if err := os.WriteFile(other, []byte("name: othernode\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ = mustParse(t, []string{"--config-file=" + other}, []string{"ETCD_CONFIG_FILE=" + path})
	if c.Name != "othernode" {
		t.Errorf("--config-file vs ETCD_CONFIG_FILE: name %q", c.Name)
	}
	parseErr(t, []string{"--config-file=" + filepath.Join(dir, "missing.yaml")}, nil, "no such file")
}

func TestZeroMeansDefault(t *testing.T) {
	c, _ := mustParse(t, []string{"--backend-batch-interval=0", "--backend-batch-limit=0", "--snapshot-count=0",
		"--watch-progress-notify-interval=0", "--quota-backend-bytes=-1"}, nil)
	if c.BackendBatchInterval != DefaultBackendBatchInterval || c.BackendBatchLimit != DefaultBackendBatchLimit ||
		c.SnapshotCount != DefaultSnapshotCount || c.WatchProgressNotifyInterval != DefaultWatchProgressNotifyInterval {
		t.Errorf("zero not replaced: %+v", c)
	}
	if _, on := c.QuotaBytes(); on {
		t.Error("negative quota must disable it")
	}
	_, stderr := mustParse(t, []string{"--quota-backend-bytes=9663676416"}, nil)
	if !strings.Contains(stderr, "quota exceeds the maximum value") {
		t.Errorf("no quota warning:\n%s", stderr)
	}
}

func TestLogLevelFiltersParseMessages(t *testing.T) {
	_, stderr := mustParse(t, []string{"--name=a", "--log-level=error", "--max-snapshots=3"}, nil)
	if stderr != "" {
		t.Errorf("warnings printed at error level:\n%s", stderr)
	}
	_, stderr = mustParse(t, []string{"--name=a", "--log-level=debug", "--force"}, nil)
	if !strings.Contains(stderr, `"level":"debug","caller":"config/parse.go:`) ||
		!strings.Contains(stderr, `"msg":"flag is no longer supported - ignoring","flag-name":"force"`) {
		t.Errorf("ignored flag not logged at debug:\n%s", stderr)
	}
}

func TestDataDirFollowsName(t *testing.T) {
	c, _ := mustParse(t, []string{"--name=infra1"}, nil)
	if c.DataDir != "infra1.strata" || c.WALDir() != filepath.Join("infra1.strata", "member", "wal") {
		t.Errorf("data-dir %q wal %q", c.DataDir, c.WALDir())
	}
	c, _ = mustParse(t, []string{"--name=infra1", "--wal-dir=/ssd/wal"}, []string{"ETCD_DATA_DIR=/data"})
	if c.DataDir != "/data" || c.WALDir() != "/ssd/wal" || c.BackendPath() != "/data/member/snap/db" {
		t.Errorf("data-dir %q wal %q backend %q", c.DataDir, c.WALDir(), c.BackendPath())
	}
}
