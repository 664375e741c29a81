package config

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse gives Parse fuzzer-made command lines, ETCD_* environments
// and --config-file contents, as an operator's typo or a generated
// manifest would. Parse may refuse them, with an error; it must never
// panic, and what it accepts must also pass Validate and describe itself
// in the start-up log without panicking.
func FuzzParse(f *testing.F) {
	f.Add("--name\nm1\n--initial-cluster\nm1=http://127.0.0.1:2380", "ETCD_HEARTBEAT_INTERVAL=50", "")
	f.Add("", "", "name: m1\nheartbeat-interval: 50\nelection-timeout: 500\nquota-backend-bytes: -1\n")
	f.Add("", "", "client-transport-security:\n  auto-tls: true\npeer-transport-security:\n  client-cert-auth: yes\n")
	f.Add("--listen-client-urls\nunix://x\n--log-outputs\nstderr,stdout", "ETCD_SNAPSHOT_COUNT=0", "")
	f.Add("", "", "initial-cluster: 'a=http://[::1]:2380,a=http://[::1]:2381'\ncors: '*'\nmax-txn-ops: 99999999999999999999\n")
	f.Add("--experimental-compact-hash-check-time\n-1s\n--auto-compaction-mode\nrevision\n--auto-compaction-retention\n-5", "", "")

	f.Fuzz(func(t *testing.T, args, env, file string) {
		if len(args)+len(env)+len(file) > 8192 {
			return
		}
		var argv []string
		if args != "" {
			argv = strings.Split(args, "\n")
		}
		var envv []string
		if env != "" {
			envv = strings.Split(env, "\n")
		}
		if file != "" {
			path := filepath.Join(t.TempDir(), "strata.yaml")
			if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
				t.Fatal(err)
			}
			argv = append([]string{"--config-file", path}, argv...)
		}
		c, err := Parse(argv, envv, io.Discard)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("a refusal with an empty message")
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a configuration that Validate refuses: %v", err)
		}
		c.LogStart(slog.New(slog.NewTextHandler(io.Discard, nil)), false)
		_, _ = c.InitialClusterMap()
	})
}
