package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/e2e/harness"
)

// versionsOf reads a member's /version: server, cluster and storage
// versions.
func versionsOf(clientURL string) (server, cluster, storage string, err error) {
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(clientURL + "/version")
	if err != nil {
		return "", "", "", err
	}
	defer resp.Body.Close()
	var v struct{ Etcdserver, Etcdcluster, Storage string }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", "", "", err
	}
	return v.Etcdserver, v.Etcdcluster, v.Storage, nil
}

// untilVersions is a step that polls /version (for up to 30 s: the
// leader's monitor moves the cluster version every 4 s) until the
// cluster and storage versions are the ones given, and records what it
// last saw.
func untilVersions(name, cluster, storage string) step {
	return step{name: name, show: fmt.Sprintf("curl /version until etcdcluster %s and storage %s", cluster, storage),
		run: func(t *testing.T, s *side) harness.Result {
			var c, st string
			deadline := time.Now().Add(30 * time.Second)
			for {
				var err error
				_, c, st, err = versionsOf(s.srv.ClientURL)
				if err == nil && c == cluster && st == storage || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			return harness.Result{Stdout: fmt.Sprintf("etcdcluster %s, storage %s\n", c, st)}
		}}
}

// logHas is a step that waits (up to 10 s) for the server's log to hold
// a line with msg, and records whether it did.
func logHas(name, msg string) step {
	return step{name: name, show: fmt.Sprintf("grep %q <log>", msg),
		run: func(t *testing.T, s *side) harness.Result {
			deadline := time.Now().Add(10 * time.Second)
			for !harnessLogHas(s.srv, `"msg":"`+msg+`"`) {
				if time.Now().After(deadline) {
					return harness.Result{Stdout: "not logged\n"}
				}
				time.Sleep(100 * time.Millisecond)
			}
			return harness.Result{Stdout: "logged\n"}
		}}
}

// metricLines is a step that records the /metrics lines of the named
// families, sorted.
func metricLines(name string, families ...string) step {
	return step{name: name, show: "curl /metrics | grep " + strings.Join(families, "|"),
		run: func(t *testing.T, s *side) harness.Result {
			resp, err := http.Get(s.srv.ClientURL + "/metrics")
			if err != nil {
				return harness.Result{Stderr: err.Error(), Code: 1}
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var keep []string
			for _, l := range strings.Split(string(b), "\n") {
				for _, f := range families {
					if strings.HasPrefix(l, f+"{") || strings.HasPrefix(l, f+" ") {
						keep = append(keep, l)
					}
				}
			}
			sort.Strings(keep)
			return harness.Result{Stdout: strings.Join(keep, "\n") + "\n"}
		}}
}

// downgradeScenario is etcd's documented downgrade procedure on one
// member, as far as one binary goes: every refusal of validate, enable
// and cancel before, during and after; the cluster and storage versions
// following an enabled downgrade to 3.6 (/version, endpoint status, the
// metric) and the "ready to downgrade" log line; a cancel, and the
// versions back at 3.7; and a restart in between.
func downgradeScenario() scenario {
	return scenario{name: "downgrade", steps: []step{
		httpStep("GET /version", "GET", "/version", "", nil),
		c("downgrade validate 3.6", "downgrade", "validate", "3.6"),
		c("downgrade validate 3.6.0", "downgrade", "validate", "3.6.0"),
		c("downgrade validate 3.6.9-rc.1", "downgrade", "validate", "3.6.9-rc.1"),
		c("downgrade validate 3.5 (two minors down)", "downgrade", "validate", "3.5"),
		c("downgrade validate 3.7 (the cluster's)", "downgrade", "validate", "3.7"),
		c("downgrade validate 3.8 (up)", "downgrade", "validate", "3.8"),
		c("downgrade validate v3.6 (format)", "downgrade", "validate", "v3.6"),
		c("downgrade validate 3 (format)", "downgrade", "validate", "3"),
		c("downgrade validate 3.6.0.0 (format)", "downgrade", "validate", "3.6.0.0"),
		c("downgrade validate without a version", "downgrade", "validate"),
		c("downgrade enable 3.5", "downgrade", "enable", "3.5"),
		c("downgrade enable garbage", "downgrade", "enable", "garbage"),
		c("downgrade cancel with none in progress", "downgrade", "cancel"),
		c("endpoint status -w json before", "endpoint", "status", "-w", "json"),
		metricLines("etcd_cluster_version before", "etcd_cluster_version"),
		c("downgrade enable 3.6", "downgrade", "enable", "3.6"),
		untilVersions("/version once the monitor has lowered the versions", "3.6.0", "3.6.0"),
		logHas("the member is ready to downgrade", "The server is ready to downgrade"),
		logHas("the forced snapshot", "Cluster version downgrade detected, forcing snapshot"),
		httpStep("GET /version during the downgrade", "GET", "/version", "", nil),
		c("endpoint status -w json during", "endpoint", "status", "-w", "json"),
		c("endpoint status -w table during", "endpoint", "status", "-w", "table"),
		metricLines("etcd_cluster_version during", "etcd_cluster_version"),
		c("downgrade enable 3.6 again", "downgrade", "enable", "3.6"),
		c("downgrade validate 3.6 again", "downgrade", "validate", "3.6"),
		c("downgrade enable 3.5 during", "downgrade", "enable", "3.5"),
		c("downgrade validate 3.5 during", "downgrade", "validate", "3.5"),
		c("put during the downgrade", "put", "dk", "dv"),
		c("get during the downgrade", "get", "dk", "-w", "json"),
		restartStep(),
		httpStep("GET /version after a restart", "GET", "/version", "", nil),
		c("endpoint status -w json after a restart", "endpoint", "status", "-w", "json"),
		c("downgrade cancel", "downgrade", "cancel"),
		c("endpoint status -w json after the cancel", "endpoint", "status", "-w", "json"),
		untilVersions("/version once the monitor has raised the versions", "3.7.0", "3.7.0"),
		c("downgrade cancel again", "downgrade", "cancel"),
		c("downgrade validate 3.6 after", "downgrade", "validate", "3.6"),
		metricLines("etcd_cluster_version after", "etcd_cluster_version"),
		c("get after", "get", "dk", "-w", "json"),
	}}
}

// logSequence is a step that records, in order, the given fields of the
// server log's lines with msg (since the server first started).
func logSequence(name, msg string, fields ...string) step {
	return step{name: name, show: fmt.Sprintf("grep %q <log> | fields %s", msg, strings.Join(fields, ",")),
		run: func(t *testing.T, s *side) harness.Result {
			b, err := os.ReadFile(s.srv.LogPath)
			if err != nil {
				return harness.Result{Stderr: err.Error(), Code: 1}
			}
			var out strings.Builder
			for _, l := range strings.Split(string(b), "\n") {
				var rec map[string]any
				if json.Unmarshal([]byte(l), &rec) != nil || rec["msg"] != msg {
					continue
				}
				var parts []string
				for _, f := range fields {
					parts = append(parts, fmt.Sprintf("%s=%v", f, rec[f]))
				}
				out.WriteString(strings.Join(parts, " ") + "\n")
			}
			return harness.Result{Stdout: out.String()}
		}}
}

// stopOnDefragScenario is the StopGRPCServiceOnDefrag gate, on (on) or
// off: during a defragmentation etcd sets the gRPC health service to
// NOT_SERVING (and logs why) and back to SERVING after; without the gate
// it only logs SERVING again after.
func stopOnDefragScenario(on bool) scenario {
	name := "gate-stop-grpc-on-defrag-off"
	if on {
		name = "gate-stop-grpc-on-defrag"
	}
	return scenario{name: name, flags: []string{fmt.Sprintf("--feature-gates=StopGRPCServiceOnDefrag=%v", on)}, steps: []step{
		c("put", "put", "k", "v"),
		c("defrag", "defrag"),
		logSequence("the health service's changes", "grpc service status changed", "level", "service", "status", "reason"),
		metricLines("the gate's metric", "etcd_server_feature_enabled"),
	}}
}
