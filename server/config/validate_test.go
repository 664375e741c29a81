package config

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidationFailures(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--heartbeat-interval=0"}, "--heartbeat-interval must be >0 (set to 0ms)"},
		{[]string{"--election-timeout=0"}, "--election-timeout must be >0 (set to 0ms)"},
		{[]string{"--heartbeat-interval=300", "--election-timeout=1000"}, "--election-timeout[1000ms] should be at least as 5 times as --heartbeat-interval[300ms]"},
		{[]string{"--election-timeout=60000"}, "--election-timeout[60000ms] is too long, and should be set less than 50000ms"},
		{[]string{"--listen-peer-urls=http://example.com:2380"}, "expected IP in URL for binding (http://example.com:2380)"},
		{[]string{"--listen-client-urls=https://127.0.0.1:2379", "--advertise-client-urls=https://127.0.0.1:2379"}, "TLS key/cert (--cert-file, --key-file) must be provided for client url https://127.0.0.1:2379 with HTTPS scheme"},
		{[]string{"--listen-peer-urls=https://127.0.0.1:2380"}, "TLS key/cert (--peer-cert-file, --peer-key-file) must be provided for peer url https://127.0.0.1:2380 with HTTPS scheme"},
		{[]string{"--listen-metrics-urls=https://127.0.0.1:2381"}, "client TLS key/cert (--cert-file, --key-file) must be provided for metrics secure url"},
		{[]string{"--advertise-client-urls=http://:2379"}, `--advertise-client-urls "http://:2379" must be in the format`},
		{[]string{"--name=n1", "--initial-cluster=n2=http://localhost:2380"}, `couldn't find local name "n1" in the initial cluster configuration`},
		{[]string{"--name=n1", "--initial-cluster=n1=http://10.0.0.1:2380"}, "--initial-cluster has n1=http://10.0.0.1:2380 but missing from --initial-advertise-peer-urls=http://localhost:2380"},
		{[]string{"--name=n1", "--initial-cluster=n1=http://localhost:2380,n2=http://localhost:2380"}, "has duplicate url"},
		{[]string{"--initial-cluster=default=ftp://x:1"}, "URL scheme must be http, https, unix, or unixs"},
		{[]string{"--discovery-srv=example.com", "--initial-cluster=default=http://localhost:2380"}, ErrConflictBootstrapFlags.Error()},
		{[]string{"--discovery-token=x"}, "both --discovery-token and --discovery-endpoints must be set"},
		{[]string{"--discovery-fallback=proxy"}, `v2 proxy is deprecated, and --discovery-fallback can't be configured as "proxy"`},
		{[]string{"--auto-compaction-mode=weekly"}, `unknown auto-compaction-mode "weekly"`},
		{[]string{"--auto-compaction-retention=soon"}, "error parsing CompactionRetention"},
		{[]string{"--auto-compaction-mode=revision", "--auto-compaction-retention=1h"}, "revision mode needs a non-negative integer"},
		{[]string{"--compact-hash-check-time=0s"}, "--compact-hash-check-time must be >0 (set to 0s)"},
		{[]string{"--tls-min-version=TLS1.1"}, `unexpected TLS version "TLS1.1" (must be one of: TLS1.2, TLS1.3)`},
		{[]string{"--tls-min-version=TLS1.3", "--tls-max-version=TLS1.2"}, "min version (TLS1.3) is greater than max version (TLS1.2)"},
		{[]string{"--tls-min-version=TLS1.3", "--cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}, "cipher suites cannot be configured when only TLS1.3 is enabled"},
		{[]string{"--cipher-suites=TLS_RSA_WITH_RC4_128_SHA"}, `insecure TLS cipher suite "TLS_RSA_WITH_RC4_128_SHA" is not allowed`},
		{[]string{"--cipher-suites=TLS_MADE_UP"}, `unexpected TLS cipher suite "TLS_MADE_UP"`},
		{[]string{"--cert-file=/c.pem"}, "--cert-file and --key-file must be given together"},
		{[]string{"--logger=capnslog"}, "--logger=capnslog is removed in v3.5"},
		{[]string{"--logger=logrus"}, `unknown logger option "logrus"`},
		{[]string{"--log-level=verbose"}, `unrecognized level: "verbose"`},
		{[]string{"--log-format=xml"}, "unknown log format: xml, supported values json, console"},
		{[]string{"--log-outputs=default,/tmp/x.log"}, `multi logoutput for "default" is not supported yet`},
		{[]string{"--enable-log-rotation"}, ErrLogRotationInvalidLogOutput.Error()},
		{[]string{"--feature-gates=LeaseCheckpointPersist=true"}, "enabling feature gate LeaseCheckpointPersist requires enabling feature gate LeaseCheckpoint"},
		{[]string{"--enable-distributed-tracing", "--distributed-tracing-sampling-rate=2000000"}, "tracing sampling rate must be less than 1000000"},
		{[]string{"--bcrypt-cost=3"}, "--bcrypt-cost 3 is out of range [4, 31]"},
		{[]string{"--auth-token=jwt,sign-method=RS256"}, "auth: missing key data"},
		{[]string{"--auth-token=jwt,pub-key=/k,sign-method=XX1"}, "auth: invalid auth signature method"},
		{[]string{"--auth-token=jwt,pub-key"}, "auth: invalid auth options"},
		{[]string{"--auth-token=magic"}, "auth: invalid auth options"},
		{[]string{"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379", "--listen-client-http-urls=http://127.0.0.1:2379"}, "cannot bind both --listen-client-urls and --listen-client-http-urls on the same url http://127.0.0.1:2379"},
	} {
		err, _ := parseErr(t, tc.args, nil, tc.want)
		if ExitCode(err) != 1 {
			t.Errorf("%q: exit code %d, want 1", tc.args, ExitCode(err))
		}
	}
}

func TestValidCombinations(t *testing.T) {
	for _, args := range [][]string{
		{"--name=n1", "--initial-cluster=n1=http://localhost:2380,n2=http://10.0.0.2:2380"},
		{"--name=n3", "--initial-cluster-state=existing", "--initial-cluster=n1=http://10.0.0.1:2380,n3=http://localhost:2380"},
		{"--listen-client-urls=unix:///tmp/strata.sock", "--advertise-client-urls=unix:///tmp/strata.sock"},
		{"--auto-compaction-retention=72"},
		{"--auto-compaction-mode=revision", "--auto-compaction-retention=1000"},
		{"--auth-token=jwt,pub-key=/p.pem,priv-key=/k.pem,sign-method=RS256,ttl=10m"},
		{"--log-level=WARN", "--log-outputs=stderr,/tmp/strata-test.log"},
		{"--heartbeat-interval=200", "--election-timeout=1000"},
		{"--quota-backend-bytes=-1"},
	} {
		mustParse(t, args, nil)
	}
	c, _ := mustParse(t, []string{"--auth-token=jwt,pub-key=/p.pem,priv-key=/k.pem,sign-method=ES256,ttl=10m,extra=1"}, nil)
	o, err := c.AuthTokenOptions()
	if err != nil || o.Type != "jwt" || o.SignMethod != "ES256" || o.PubKeyFile != "/p.pem" || o.PrivKeyFile != "/k.pem" || o.TTL != 10*time.Minute || o.Unknown["extra"] != "1" {
		t.Errorf("AuthTokenOptions = %+v, %v", o, err)
	}
	c, _ = mustParse(t, []string{"--auth-token=jwt,priv-key=/k.pem,sign-method=HS256"}, nil)
	if o, _ := c.AuthTokenOptions(); o.TTL != 5*time.Minute {
		t.Errorf("jwt default ttl = %v", o.TTL)
	}
	c, _ = mustParse(t, []string{"--auto-compaction-retention=72"}, nil)
	if ac, _ := c.AutoCompaction(); ac.Period != 72*time.Hour {
		t.Errorf("bare number of hours: %+v", ac)
	}
	c, _ = mustParse(t, []string{"--auto-compaction-retention=30m"}, nil)
	if ac, _ := c.AutoCompaction(); ac.Period != 30*time.Minute {
		t.Errorf("duration: %+v", ac)
	}
}

func TestNewLogger(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "strata.log")
	c, _ := mustParse(t, []string{"--log-outputs=" + path, "--log-level=warn"}, nil)
	lg, closeFn, err := c.NewLogger()
	if err != nil {
		t.Fatal(err)
	}
	lg.Info("quiet")
	lg.Warn("loud", "k", 1)
	lg.Log(t.Context(), LevelFatal, "worst")
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("log file:\n%s", b)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["level"] != "warn" || rec["msg"] != "loud" || rec["ts"] == nil || rec["k"] != float64(1) {
		t.Errorf("record = %v", rec)
	}
	if !strings.Contains(lines[1], `"level":"fatal"`) {
		t.Errorf("fatal record = %s", lines[1])
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("log file mode %v", st.Mode())
	}
	d, _ := mustParse(t, nil, nil)
	if l, _ := d.SlogLevel(); l != slog.LevelInfo {
		t.Errorf("default level %v", l)
	}
	var buf bytes.Buffer
	slog.New(newJSONHandler(&buf, slog.LevelInfo)).Debug("hidden")
	if buf.Len() != 0 {
		t.Error("debug record at info level")
	}
}
