package config

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-db/strata/version"
)

// The "starting an etcd server" lines etcd 3.7.3 logged for these flags
// on this machine, without the fields that depend on the build and the
// machine (git-sha, go-*, max-cpu-*), ts, caller and level. The second
// is a restart: member-initialized, and no initial cluster or token.
const (
	etcdStartDefaults = `{"etcd-version":"3.7.3","member-initialized":false,"name":"default","data-dir":"default.etcd","wal-dir":"","wal-dir-dedicated":"","member-dir":"default.etcd/member","force-new-cluster":false,"heartbeat-interval":"100ms","election-timeout":"1s","initial-election-tick-advance":true,"snapshot-count":10000,"max-wals":5,"max-snapshots":5,"snapshot-catchup-entries":1000,"initial-advertise-peer-urls":["http://localhost:2380"],"listen-peer-urls":["http://localhost:2380"],"advertise-client-urls":["http://localhost:2379"],"listen-client-urls":["http://localhost:2379"],"listen-metrics-urls":[],"local-address":"","cors":["*"],"host-whitelist":["*"],"initial-cluster":"default=http://localhost:2380","initial-cluster-state":"new","initial-cluster-token":"etcd-cluster","quota-backend-bytes":2147483648,"max-request-bytes":1572864,"max-concurrent-streams":4294967295,"pre-vote":true,"feature-gates":"","initial-corrupt-check":false,"corrupt-check-time-interval":"0s","compact-check-time-interval":"1m0s","auto-compaction-mode":"periodic","auto-compaction-retention":"0s","auto-compaction-interval":"0s","discovery-token":"","discovery-endpoints":"","discovery-dial-timeout":"2s","discovery-request-timeout":"5s","discovery-keepalive-time":"2s","discovery-keepalive-timeout":"6s","discovery-insecure-transport":true,"discovery-insecure-skip-tls-verify":false,"discovery-cert":"","discovery-key":"","discovery-cacert":"","discovery-user":"","downgrade-check-interval":"5s","max-learners":1,"v2-deprecation":"write-only"}`
	etcdStartRestart  = `{"etcd-version":"3.7.3","member-initialized":true,"name":"n1","data-dir":"n1.d","wal-dir":"w1","wal-dir-dedicated":"w1","member-dir":"n1.d/member","force-new-cluster":false,"heartbeat-interval":"50ms","election-timeout":"500ms","initial-election-tick-advance":true,"snapshot-count":77,"max-wals":0,"max-snapshots":5,"snapshot-catchup-entries":5000,"initial-advertise-peer-urls":["http://localhost:2380"],"listen-peer-urls":["http://localhost:2380"],"advertise-client-urls":["http://localhost:2379"],"listen-client-urls":["http://localhost:2379"],"listen-metrics-urls":["http://127.0.0.1:2381"],"local-address":"","cors":["http://a.example:80","http://b.example:80"],"host-whitelist":["y","z"],"initial-cluster":"","initial-cluster-state":"new","initial-cluster-token":"","quota-backend-bytes":-1,"max-request-bytes":1000,"max-concurrent-streams":100,"pre-vote":false,"feature-gates":"CompactHashCheck=false,InitialCorruptCheck=true","initial-corrupt-check":false,"corrupt-check-time-interval":"2m0s","compact-check-time-interval":"1m30s","auto-compaction-mode":"revision","auto-compaction-retention":"1\u00b5s","auto-compaction-interval":"1\u00b5s","discovery-token":"","discovery-endpoints":"","discovery-dial-timeout":"2s","discovery-request-timeout":"5s","discovery-keepalive-time":"2s","discovery-keepalive-timeout":"6s","discovery-insecure-transport":true,"discovery-insecure-skip-tls-verify":false,"discovery-cert":"","discovery-key":"","discovery-cacert":"","discovery-user":"","downgrade-check-interval":"5s","max-learners":2,"v2-deprecation":"write-only"}`
)

// TestStartAttrs: the start-up line carries etcd's fields, in etcd's
// order, with etcd's values and formats (durations as Go prints them,
// URL lists, sorted CORS and hosts, the gates given, the revision
// retention as nanoseconds) for etcd's defaults and for a restart with
// most settings changed.
func TestStartAttrs(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		initialized bool
		etcd        string
	}{
		{[]string{"--snapshot-catchup-entries", "1000", "--data-dir", "default.etcd"}, false, etcdStartDefaults},
		{strings.Fields("--name n1 --data-dir n1.d --wal-dir w1 --heartbeat-interval 50 --election-timeout 525 " +
			"--auto-compaction-mode revision --auto-compaction-retention 1000 --feature-gates=InitialCorruptCheck=true,CompactHashCheck=false " +
			"--listen-metrics-urls http://127.0.0.1:2381 --quota-backend-bytes=-1 --cors http://b.example:80,http://a.example:80 " +
			"--host-whitelist z,y --initial-cluster n1=http://localhost:2380 --initial-cluster-token tok --max-learners 2 " +
			"--snapshot-count 77 --max-wals 0 --compact-hash-check-time 90s --corrupt-check-time 2m --max-concurrent-streams 100 " +
			"--max-request-bytes 1000 --pre-vote=false"), true, etcdStartRestart},
	} {
		c, _ := mustParse(t, tc.args, nil)
		var buf bytes.Buffer
		c.LogStart(slog.New(newJSONHandler(&buf, slog.LevelInfo)), tc.initialized, "strata-version", "x")
		keys, got := decodeOrdered(t, buf.String())
		if got["msg"] != StartMessage || got["strata-version"] != "x" || got["etcd-version"] != version.Etcd {
			t.Errorf("%q: line %s", tc.args, buf.String())
		}
		for _, k := range []string{"ts", "level", "caller", "msg", "git-sha", "go-version", "go-os", "go-arch", "max-cpu-set", "max-cpu-available", "strata-version"} {
			delete(got, k)
		}
		wantKeys, want := decodeOrdered(t, tc.etcd)
		if !reflect.DeepEqual(got, want) {
			for k, v := range want {
				if !reflect.DeepEqual(got[k], v) {
					t.Errorf("%q: %s = %#v, etcd logs %#v", tc.args, k, got[k], v)
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("%q: field %s etcd does not log", tc.args, k)
				}
			}
		}
		var order []string
		for _, k := range keys {
			if _, ok := want[k]; ok {
				order = append(order, k)
			}
		}
		if !reflect.DeepEqual(order, wantKeys) {
			t.Errorf("%q: field order\n%q\nwant\n%q", tc.args, order, wantKeys)
		}
	}
}

// decodeOrdered decodes one JSON object and returns its keys in order.
func decodeOrdered(t *testing.T, line string) ([]string, map[string]any) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	dec := json.NewDecoder(strings.NewReader(line))
	var keys []string
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys, m
}

// TestPeerLocalAddr: etcd's InferLocalAddr. With the SetMemberLocalAddr
// gate the first advertised peer URL whose host is an IP, neither
// loopback nor unspecified, is the source of peer dials (first in the
// sorted order that etcd's types.NewURLs gives the flag's URLs); without
// the gate, or without such a URL, the kernel chooses ("").
func TestPeerLocalAddr(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--initial-advertise-peer-urls=https://10.1.2.3:2380"}, ""},
		{[]string{"--feature-gates=SetMemberLocalAddr=true", "--initial-advertise-peer-urls=https://10.1.2.3:2380"}, "10.1.2.3"},
		{[]string{"--feature-gates=SetMemberLocalAddr=true", "--initial-advertise-peer-urls=https://127.0.0.1:2380,https://host.example:2380,https://0.0.0.0:2381,https://[2001:db8::7]:2380,https://10.9.9.9:2380"}, "10.9.9.9"},
		{[]string{"--feature-gates=SetMemberLocalAddr=true", "--initial-advertise-peer-urls=https://localhost:2380,https://[2001:db8::7]:2380"}, "2001:db8::7"},
		{[]string{"--feature-gates=SetMemberLocalAddr=true", "--initial-advertise-peer-urls=https://127.0.0.1:2380"}, ""},
	} {
		cfg, _ := mustParse(t, append([]string{"--name=n1", "--listen-peer-urls=https://0.0.0.0:2380", "--peer-auto-tls"}, c.args...), nil)
		if got := cfg.PeerLocalAddr(); got != c.want {
			t.Errorf("%q: PeerLocalAddr() = %q, want %q", c.args, got, c.want)
		}
	}
}
