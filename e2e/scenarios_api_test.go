package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/e2e/harness"
)

// Scenarios of the rest of the v3 API: watch, lease, lock and election, maintenance, the
// HTTP endpoints and the quota cycle.

// events returns an until-condition: stdout holds n watch events (simple
// format prints PUT or DELETE on a line of its own).
func events(n int) func(string) bool {
	return func(out string) bool {
		c := 0
		for _, l := range strings.Split(out, "\n") {
			if l == "PUT" || l == "DELETE" {
				c++
			}
		}
		return c >= n
	}
}

// jsonEvents returns an until-condition: -w json watch output holds n
// events, however the server grouped them into responses.
func jsonEvents(n int) func(string) bool {
	return func(out string) bool { return strings.Count(out, `"kv":`) >= n }
}

// lines returns an until-condition: stdout holds n complete lines.
func lines(n int) func(string) bool {
	return func(out string) bool { return strings.Count(out, "\n") >= n }
}

var reLeaseID = regexp.MustCompile(`lease ([0-9a-f]+) granted`)

func watchScenario() scenario {
	return scenario{name: "watch", steps: []step{
		c("put w/a 1", "put", "w/a", "1"),
		c("put w/b 1", "put", "w/b", "1"),
		c("put w/a 2", "put", "w/a", "2"),
		c("del w/b", "del", "w/b"),
		c("put other", "put", "other", "x"),
		{name: "historical watch --rev", bg: "hist", ctl: []string{"watch", "--rev", "2", "w/a"}},
		{name: "historical watch --rev (events)", stop: "hist", until: events(2)},
		{name: "historical watch --prefix --prev-kv", bg: "hist2", ctl: []string{"watch", "--rev", "1", "--prefix", "--prev-kv", "w/"}},
		{name: "historical watch --prefix --prev-kv (events)", stop: "hist2", until: events(4)},
		{name: "historical watch -w json", bg: "hist3", ctl: []string{"watch", "--rev", "3", "w/", "w0", "-w", "json"}},
		{name: "historical watch -w json (events)", stop: "hist3", until: jsonEvents(3)},
		{name: "revision now", ctl: []string{"get", "w/a", "-w", "json"}, after: revVars},
		// Live watches: started from the next revision, so whether the
		// watcher is established before or after the writes, it reports
		// the same events.
		{name: "live watch --prefix --prev-kv", bg: "live", ctl: []string{"watch", "--prefix", "--prev-kv", "--rev", "${nextrev}", "w/"}},
		{name: "live watch single key -w json", bg: "live2", ctl: []string{"watch", "--rev", "${nextrev}", "w/c", "-w", "json"}},
		{sleep: 300 * time.Millisecond},
		c("live put w/c", "put", "w/c", "live"),
		c("live put w/c again", "put", "w/c", "live2"),
		c("live put outside prefix", "put", "other", "y"),
		c("live del w/c", "del", "w/c"),
		c("live del --prefix", "del", "--prefix", "w/"),
		{name: "live watch --prefix --prev-kv (events)", stop: "live", until: events(4)},
		{name: "live watch single key -w json (events)", stop: "live2", until: jsonEvents(3)},
		{name: "revision before compact", ctl: []string{"get", "other", "-w", "json"}, after: revVars},
		c("compact", "compact", "${rev}"),
		c("watch a compacted revision", "watch", "--rev", "2", "w/a"),
		c("watch a negative revision", "watch", "--rev", "-1", "w/a"),
	}}
}

func leaseScenario() scenario {
	leaseVar := func(name string) map[string]*regexp.Regexp {
		return map[string]*regexp.Regexp{name: reLeaseID}
	}
	return scenario{name: "lease", steps: []step{
		{name: "lease grant", ctl: []string{"lease", "grant", "60"}, capture: leaseVar("l1")},
		{name: "lease grant -w json", ctl: []string{"lease", "grant", "120", "-w", "json"}},
		c("put --lease", "put", "--lease=${l1}", "lk1", "v1"),
		c("put --lease second key", "put", "--lease=${l1}", "lk2", "v2"),
		c("get leased key -w json", "get", "lk1", "-w", "json"),
		c("lease timetolive", "lease", "timetolive", "${l1}"),
		c("lease timetolive --keys", "lease", "timetolive", "--keys", "${l1}"),
		c("lease timetolive --keys -w json", "lease", "timetolive", "--keys", "${l1}", "-w", "json"),
		c("lease list", "lease", "list"),
		c("lease list -w json", "lease", "list", "-w", "json"),
		c("lease keep-alive --once", "lease", "keep-alive", "--once", "${l1}"),
		c("lease keep-alive --once -w json", "lease", "keep-alive", "--once", "${l1}", "-w", "json"),
		{name: "lease keep-alive (streaming)", bg: "ka", ctl: []string{"lease", "keep-alive", "${l1}"}},
		{name: "lease keep-alive first answer", stop: "ka", until: lines(1)},
		c("lease revoke", "lease", "revoke", "${l1}"),
		c("keys gone with the lease", "get", "--prefix", "lk", "-w", "json"),
		c("timetolive of a revoked lease", "lease", "timetolive", "${l1}"),
		c("missing lease: timetolive", "lease", "timetolive", "1234abcd"),
		c("missing lease: timetolive -w json", "lease", "timetolive", "1234abcd", "-w", "json"),
		c("missing lease: revoke", "lease", "revoke", "1234abcd"),
		c("missing lease: keep-alive --once", "lease", "keep-alive", "--once", "1234abcd"),
		c("missing lease: put --lease", "put", "--lease=1234abcd", "x", "y"),
		c("bad lease id", "lease", "timetolive", "not-hex"),
		c("lease grant 0 ttl", "lease", "grant", "0"),
		// A short lease: etcd raises TTLs below its minimum (1.5 x the
		// election timeout, rounded up to whole seconds) to that minimum.
		{name: "short lease grant", ctl: []string{"lease", "grant", "1"}, capture: leaseVar("short")},
		c("put on short lease", "put", "--lease=${short}", "ephemeral", "e"),
		c("get before expiry", "get", "ephemeral"),
		{sleep: 4 * time.Second},
		c("get after expiry", "get", "ephemeral", "-w", "json"),
		c("timetolive after expiry", "lease", "timetolive", "${short}"),
		c("lease list after expiry", "lease", "list"),
	}}
}

func concurrencyScenario() scenario {
	// Lock and election keys end in the session's lease id.
	ids := []*regexp.Regexp{
		regexp.MustCompile(`mylock\w*/([0-9a-f]+)`),
		regexp.MustCompile(`myelection/([0-9a-f]+)`),
	}
	return scenario{name: "concurrency", steps: []step{
		{name: "lock with a command", ctl: []string{"lock", "mylock", "--", "sh", "-c", "echo key=$ETCD_LOCK_KEY rev=$ETCD_LOCK_REV"}, ids: ids},
		c("lock released", "get", "--prefix", "mylock", "-w", "json"),
		{name: "lock holder", bg: "holder", ctl: []string{"lock", "mylock2"}},
		{name: "lock holder acquired", wait: "holder", until: lines(1)},
		{name: "lock key while held", ctl: []string{"get", "--prefix", "mylock2", "--keys-only"}, ids: ids},
		{name: "lock waiter", bg: "waiter", ctl: []string{"lock", "mylock2", "--", "echo", "waiter got the lock"}},
		waitKeys("mylock2", 2),
		{name: "lock waiter blocked", ctl: []string{"get", "--prefix", "mylock2", "--keys-only"}, ids: ids},
		{name: "lock holder releases", stop: "holder", until: lines(1), ids: ids},
		{name: "lock waiter runs and exits", stop: "waiter", exit: true, ids: ids},
		{name: "lock keys after", ctl: []string{"get", "--prefix", "mylock2", "-w", "json"}, ids: ids},
		{name: "campaign alice", bg: "alice", ctl: []string{"elect", "myelection", "alice"}},
		{name: "alice elected", wait: "alice", until: lines(2)},
		{name: "observer", bg: "observer", ctl: []string{"elect", "-l", "myelection"}},
		{name: "observer sees alice", wait: "observer", until: lines(2)},
		{name: "campaign bob", bg: "bob", ctl: []string{"elect", "myelection", "bob"}},
		waitKeys("myelection", 2),
		{name: "election keys", ctl: []string{"get", "--prefix", "myelection"}, ids: ids},
		{name: "alice resigns", stop: "alice", until: lines(2), ids: ids},
		{name: "bob elected", wait: "bob", until: lines(2)},
		{name: "observer sees bob", stop: "observer", until: lines(4), ids: ids},
		{name: "bob resigns", stop: "bob", until: lines(2), ids: ids},
		{name: "election keys after", ctl: []string{"get", "--prefix", "myelection", "-w", "json"}, ids: ids},
	}}
}

// waitKeys polls until n keys exist under prefix (a background command has
// written its key), recording only whether it got there.
func waitKeys(prefix string, n int) step {
	return step{
		name: fmt.Sprintf("wait for %d keys under %s", n, prefix),
		show: "(poll get --prefix " + prefix + " --count-only)",
		run: func(t *testing.T, s *side) harness.Result {
			want := fmt.Sprintf(`"Count" : %d`, n)
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				r := s.ctl.Run("", "get", "--prefix", prefix, "--count-only", "-w", "fields")
				if strings.Contains(r.Stdout, want) {
					return harness.Result{Stdout: fmt.Sprintf("%d keys\n", n)}
				}
				time.Sleep(50 * time.Millisecond)
			}
			return harness.Result{Stdout: "timed out\n", Code: 1}
		},
	}
}

// clusterScenario: membership changes on a single member, with a learner so
// that quorum is never lost, plus move-leader and downgrade answers.
func clusterScenario() scenario {
	added := map[string]*regexp.Regexp{"m2": regexp.MustCompile(`Member +([0-9a-f]+) added`)}
	return scenario{name: "cluster", steps: []step{
		// Version questions first: while an unstarted member exists, etcd's
		// version monitor may lower the cluster and storage versions on a
		// timer, so nothing version-related is compared after member add.
		c("move-leader to a non-member", "move-leader", "1234"),
		c("downgrade validate 3.6", "downgrade", "validate", "3.6"),
		c("downgrade validate 3.5", "downgrade", "validate", "3.5"),
		c("downgrade validate 3.8", "downgrade", "validate", "3.8"),
		// Malformed targets (etcd parses them with go-semver,
		// "major.minor" accepted too) get "wrong downgrade target version
		// format"; well-formed wrong ones "invalid downgrade target version".
		c("downgrade validate garbage", "downgrade", "validate", "garbage"),
		c("downgrade validate v3.6", "downgrade", "validate", "v3.6"),
		c("downgrade validate 3", "downgrade", "validate", "3"),
		c("downgrade validate 3.6.0.0", "downgrade", "validate", "3.6.0.0"),
		c("downgrade validate 3.6-rc", "downgrade", "validate", "3.6-rc"),
		c("downgrade validate 3.6.0-rc_1", "downgrade", "validate", "3.6.0-rc_1"),
		c("downgrade validate ' 3.6'", "downgrade", "validate", " 3.6"),
		c("downgrade validate 3.6.0", "downgrade", "validate", "3.6.0"),
		c("downgrade validate 03.06", "downgrade", "validate", "03.06"),
		c("downgrade validate 3.6.9-rc.1+build.5", "downgrade", "validate", "3.6.9-rc.1+build.5"),
		c("downgrade validate 3.6.0+", "downgrade", "validate", "3.6.0+"),
		c("downgrade validate 4.6", "downgrade", "validate", "4.6"),
		c("downgrade enable garbage", "downgrade", "enable", "garbage"),
		c("downgrade enable 3.5", "downgrade", "enable", "3.5"),
		c("downgrade cancel when not downgrading", "downgrade", "cancel"),
		// Not "downgrade enable": the version monitor then lowers the
		// cluster version on a timer too.
		{name: "member add --learner", ctl: []string{"member", "add", "m2", "--learner", "--peer-urls=http://10.0.0.9:2380"}, capture: added, retryOn: msgUnhealthy},
		c("member list with a learner", "member", "list"),
		c("member list -w json with a learner", "member", "list", "-w", "json"),
		c("member promote an unsynced learner", "member", "promote", "${m2}"),
		c("member update", "member", "update", "${m2}", "--peer-urls=http://10.0.0.10:2380"),
		c("member list after update", "member", "list", "-w", "table"),
		{name: "member add a duplicate peer URL", ctl: []string{"member", "add", "m3", "--learner", "--peer-urls=http://10.0.0.10:2380"}, retryOn: msgUnhealthy},
		c("member remove", "member", "remove", "${m2}"),
		c("member remove again", "member", "remove", "${m2}"),
		c("member remove unknown", "member", "remove", "1234"),
		c("member update unknown", "member", "update", "1234", "--peer-urls=http://10.0.0.11:2380"),
		c("member list after remove", "member", "list"),
		c("writes still work", "put", "k", "v", "-w", "json"),
	}}
}

// maintenanceScenario: hashkv, defrag, snapshot, alarms.
func maintenanceScenario() scenario {
	return scenario{name: "maintenance", steps: []step{
		c("put m1", "put", "m1", "a"),
		c("put m2", "put", "m2", "b"),
		c("put m1 again", "put", "m1", "c"),
		c("del m2", "del", "m2"),
		c("endpoint hashkv", "endpoint", "hashkv"),
		c("endpoint hashkv -w table", "endpoint", "hashkv", "-w", "table"),
		c("endpoint hashkv -w json", "endpoint", "hashkv", "-w", "json"),
		c("endpoint hashkv --rev", "endpoint", "hashkv", "--rev", "3", "-w", "json"),
		c("compact", "compact", "4"),
		c("endpoint hashkv after compact -w json", "endpoint", "hashkv", "-w", "json"),
		c("defrag", "defrag"),
		c("endpoint status after defrag -w json", "endpoint", "status", "-w", "json"),
		c("snapshot save", "snapshot", "save", "${dir}/snap.db"),
		{name: "snapshot file size % 512 == 32", show: "stat snap.db", run: snapshotTrailer},
		c("alarm list (none)", "alarm", "list"),
		c("alarm disarm (none)", "alarm", "disarm"),
		c("endpoint health -w json", "endpoint", "health", "-w", "json"),
		c("get after maintenance", "get", "--prefix", "m", "-w", "json"),
	}}
}

// snapshotTrailer checks the snapshot stream shape: a file followed by its
// 32-byte SHA-256, so its size is 32 more than a multiple of 512.
func snapshotTrailer(t *testing.T, s *side) harness.Result {
	fi, err := os.Stat(filepath.Join(s.dir, "snap.db"))
	if err != nil {
		return harness.Result{Stdout: err.Error() + "\n", Code: 1}
	}
	return harness.Result{Stdout: fmt.Sprintf("size %% 512 = %d\n", fi.Size()%512)}
}

// httpScenario: health probes, /version and the JSON gateway.
func httpScenario() scenario {
	return scenario{name: "http", steps: []step{
		curlStep("GET /health", "/health", ""),
		curlStep("GET /health?exclude=NOSPACE", "/health?exclude=NOSPACE", ""),
		curlStep("GET /health?serializable=true", "/health?serializable=true", ""),
		curlStep("GET /livez", "/livez", ""),
		curlStep("GET /readyz", "/readyz", ""),
		curlStep("GET /readyz?verbose", "/readyz?verbose", ""),
		curlStep("GET /version", "/version", ""),
		curlStep("gateway put", "/v3/kv/put", `{"key":"Z3c=","value":"MQ=="}`),
		curlStep("gateway put --prev-kv", "/v3/kv/put", `{"key":"Z3c=","value":"Mg==","prev_kv":true}`),
		curlStep("gateway range", "/v3/kv/range", `{"key":"Z3c="}`),
		curlStep("gateway range prefix", "/v3/kv/range", `{"key":"Zw==","range_end":"aA=="}`),
		curlStep("gateway v3beta rewrite", "/v3beta/kv/range", `{"key":"Z3c="}`),
		curlStep("gateway deleterange", "/v3/kv/deleterange", `{"key":"Z3c="}`),
		curlStep("gateway empty key", "/v3/kv/put", `{"value":"MQ=="}`),
		curlStep("gateway bad json", "/v3/kv/range", `{"key":`),
		c("etcdctl sees gateway writes", "get", "gw", "-w", "json"),
		gatewayWatchStep(),
	}}
}

// quotaScenario: fill a 16 MiB backend with 1 MiB puts until NOSPACE, check
// reads work and writes fail under the alarm, then compact, defrag, disarm
// and write again.
func quotaScenario() scenario {
	return scenario{name: "quota", flags: []string{"--quota-backend-bytes=16777216"}, steps: []step{
		{name: "fill with 1 MiB puts until the error", show: "(put q <1 MiB> until it fails)", run: fillQuota},
		c("alarm list", "alarm", "list"),
		c("endpoint status shows the alarm", "endpoint", "status"),
		c("read works", "get", "q", "--keys-only"),
		c("write fails", "put", "small", "v"),
		{name: "14 more writes fail", show: "(put small v, 14 times)", run: func(t *testing.T, s *side) harness.Result {
			var r harness.Result
			for i := 0; i < 14; i++ {
				r = s.ctl.Run("", "put", "small", "v")
			}
			return r
		}},
		c("delete works", "del", "nothing"),
		// How many puts fit depends on the backend's page accounting and
		// commit timing (it differs between two etcd runs), so from here on
		// revisions are not compared.
		{name: "revision", ctl: []string{"get", "q", "--keys-only", "-w", "json"}, after: revVars, quiet: true},
		{name: "compact --physical", ctl: []string{"compact", "${rev}", "--physical"}, quiet: true},
		c("defrag", "defrag"),
		c("alarm disarm", "alarm", "disarm"),
		c("alarm list after disarm", "alarm", "list"),
		c("write works again", "put", "small", "v"),
		c("read after recovery", "get", "small"),
	}}
}

// fillQuota puts 1 MiB values under one key until a put fails, and records
// only the failure: how many puts fit is a property of the storage engine's
// accounting, not of the API. The values are random bytes: strata's page
// store keeps a value that compresses well compressed, and 64 MiB of one
// letter would fit its 16 MiB quota.
func fillQuota(t *testing.T, s *side) harness.Result {
	raw := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{'q'}).Read(raw)
	val := string(raw)
	for i := 1; i <= 64; i++ {
		r := s.ctl.Run(val, "put", "q")
		if r.Code != 0 {
			t.Logf("%s: put %d failed (first %d fit)", s.label, i, i-1)
			return r
		}
	}
	return harness.Result{Stdout: "64 puts of 1 MiB fit in a 16 MiB quota\n", Code: 1}
}
