package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "strata.conf.yml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A file in the shape of etcd's etcd.conf.yml.sample.
const sampleYAML = `
name: 'node1'
data-dir: /var/lib/strata
wal-dir: /fast/wal
snapshot-count: 20000
heartbeat-interval: 150
election-timeout: 1500
quota-backend-bytes: 4294967296
listen-peer-urls: https://10.0.0.1:2380
listen-client-urls: https://127.0.0.1:2379,https://10.0.0.1:2379
listen-metrics-urls: http://127.0.0.1:2381
max-snapshots: 5
max-wals: 7
initial-advertise-peer-urls: https://10.0.0.1:2380
advertise-client-urls: https://10.0.0.1:2379
initial-cluster: node1=https://10.0.0.1:2380,node2=https://10.0.0.2:2380
initial-cluster-token: 'etcd-cluster-1'
initial-cluster-state: 'new'
strict-reconfig-check: false
enable-pprof: true
watch-progress-notify-interval: 5000000000
backend-batch-interval: 50000000
auto-compaction-mode: revision
auto-compaction-retention: "1000"
feature-gates: InitialCorruptCheck=true
cipher-suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305]
tls-min-version: TLS1.2
client-transport-security:
  cert-file: /pki/server.crt
  key-file: /pki/server.key
  client-cert-auth: true
  trusted-ca-file: /pki/ca.crt
  auto-tls: false
peer-transport-security:
  cert-file: /pki/peer.crt
  key-file: /pki/peer.key
  client-cert-auth: true
  trusted-ca-file: /pki/ca.crt
  allowed-cn: [node2]
  auto-tls: false
log-level: warn
logger: zap
log-outputs: [stderr]
socket-options:
  reuse-port: true
disk-probe: false
`

func TestConfigFileTransportSecurity(t *testing.T) {
	c, _ := mustParse(t, []string{"--config-file=" + writeFile(t, sampleYAML)}, nil)
	want := TLSInfo{CertFile: "/pki/server.crt", KeyFile: "/pki/server.key", ClientCertAuth: true, TrustedCAFile: "/pki/ca.crt"}
	if !reflect.DeepEqual(c.ClientSecurity, want) {
		t.Errorf("client security = %+v", c.ClientSecurity)
	}
	if c.PeerSecurity.CertFile != "/pki/peer.crt" || !c.PeerSecurity.ClientCertAuth || !reflect.DeepEqual(c.PeerSecurity.AllowedCNs, []string{"node2"}) {
		t.Errorf("peer security = %+v", c.PeerSecurity)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"name", c.Name, "node1"},
		{"WALDir", c.WALDir(), "/fast/wal"},
		{"BackendPath", c.BackendPath(), "/var/lib/strata/member/snap/db"},
		{"snapshot-count", c.SnapshotCount, uint64(20000)},
		{"election", c.ElectionMs, uint(1500)},
		{"quota", c.QuotaBackendBytes, int64(4 << 30)},
		{"listen-client-urls", urlsString(c.ListenClientURLs), "https://10.0.0.1:2379,https://127.0.0.1:2379"},
		{"listen-metrics-urls", urlsString(c.ListenMetricsURLs), "http://127.0.0.1:2381"},
		{"initial-cluster-token", c.InitialClusterToken, "etcd-cluster-1"},
		{"strict-reconfig-check", c.StrictReconfigCheck, false},
		{"watch-progress-notify-interval", c.WatchProgressNotifyInterval, 5 * time.Second},
		{"backend-batch-interval", c.BackendBatchInterval, 50 * time.Millisecond},
		{"InitialCorruptCheck", c.FeatureEnabled(FeatureInitialCorruptCheck), true},
		{"cipher-suites", len(c.CipherSuites), 2},
		{"log-level", c.LogLevel, "warn"},
		{"log-outputs", c.LogOutputs, []string{"stderr"}},
		{"socket reuse port", c.SocketReusePort, true},
		{"disk-probe", c.DiskProbe, false},
		{"explicit peer key", c.ExplicitlySet["peer-cert-file"], true},
		{"explicit name", c.ExplicitlySet["name"], true},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %#v, want %#v", ch.name, ch.got, ch.want)
		}
	}
	ac, err := c.AutoCompaction()
	if err != nil || ac.Revisions != 1000 {
		t.Errorf("AutoCompaction = %+v, %v", ac, err)
	}
	m, _ := c.InitialClusterMap()
	if len(m) != 2 || urlsString(m["node2"]) != "https://10.0.0.2:2380" {
		t.Errorf("InitialClusterMap = %v", m)
	}
}

func TestConfigFileLegacyKeysAndUnknown(t *testing.T) {
	path := writeFile(t, `
name: n1
experimental-initial-corrupt-check: true
experimental-watch-progress-notify-interval: 5000000000
experimental-snapshot-catch-up-entries: 9000
experimental-peer-skip-client-san-verification: true
no-such-key: 1
enable-v2: true
proxy: 'off'
discovery-fallback: 'proxy'
`)
	c, stderr := mustParse(t, []string{"--config-file", path}, nil)
	if !c.FeatureEnabled(FeatureInitialCorruptCheck) || c.WatchProgressNotifyInterval != 5*time.Second ||
		c.SnapshotCatchUpEntries != 9000 || !c.PeerSecurity.SkipClientSANVerify {
		t.Errorf("legacy keys: gates %v interval %v catchup %d skipSAN %v", c.FeatureGates, c.WatchProgressNotifyInterval, c.SnapshotCatchUpEntries, c.PeerSecurity.SkipClientSANVerify)
	}
	if !strings.Contains(stderr, `"key":"no-such-key"`) {
		t.Errorf("unknown key not warned about:\n%s", stderr)
	}
	if strings.Contains(stderr, `"key":"enable-v2"`) || strings.Contains(stderr, `"key":"proxy"`) {
		t.Errorf("3.5 sample keys warned about:\n%s", stderr)
	}
	both := writeFile(t, "experimental-compaction-batch-limit: 5\ncompaction-batch-limit: 6\n")
	parseErr(t, []string{"--config-file=" + both}, nil, "cannot set --experimental-compaction-batch-limit and --compaction-batch-limit at the same time")
	gate := writeFile(t, "experimental-initial-corrupt-check: true\nfeature-gates: InitialCorruptCheck=true\n")
	parseErr(t, []string{"--config-file=" + gate}, nil, "cannot specify both flags")
}

func TestConfigFileErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"listen-client-urls: ftp://x:1\nadvertise-client-urls: http://10.0.0.1:2379\n", "unexpected error setting up listen-client-urls: URL scheme must be http, https, unix, or unixs: ftp://x:1"},
		{"snapshot-count: [1\n", "config file"},
		{"heartbeat-interval: fast\n", "config file"},
		{"peer-transport-security: yes\n", "peer-transport-security"},
		{"initial-cluster-state: sideways\n", `unexpected clusterState "sideways"`},
		{"feature-gates: Nope=true\n", "unrecognized feature gate: Nope"},
		{"election-timeout: 100\n", "should be at least as 5 times as --heartbeat-interval"},
	} {
		parseErr(t, []string{"--config-file=" + writeFile(t, tc.yaml)}, nil, tc.want)
	}
}

func TestConfigFileDiscoveryClearsDefaultCluster(t *testing.T) {
	c, _ := mustParse(t, []string{"--config-file=" + writeFile(t, `
name: n1
discovery-config:
  token: tok
  client:
    endpoints: [http://10.0.0.9:2379]
    dial-timeout: 3000000000
`)}, nil)
	if c.InitialCluster != "" || c.Discovery.Token != "tok" || c.Discovery.DialTimeout != 3*time.Second || len(c.Discovery.Endpoints) != 1 {
		t.Errorf("discovery: cluster %q discovery %+v", c.InitialCluster, c.Discovery)
	}
}
