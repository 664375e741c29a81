package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/strata-db/strata/e2e/harness"
)

// Scenarios of the HTTP side: what etcd's own e2e tests check through curl
// and in the server's log, compared with etcd 3.7.3 here.

var corsHeaders = []string{"Access-Control-Allow-Methods", "Access-Control-Allow-Origin", "Access-Control-Allow-Headers", "Allow"}

// httpStep is a request on the client port (path may use ${vars}) with a
// method, request headers and the response headers to record.
func httpStep(name, method, path, body string, hdr map[string]string) step {
	return step{
		name: name,
		show: fmt.Sprintf("curl -X %s %s %v -d %q", method, path, hdr, body),
		run: func(t *testing.T, s *side) harness.Result {
			r, err := harness.HTTPRequest{URL: s.expand("${client}" + path), Body: body, Method: method,
				Header: hdr, ShowHeaders: corsHeaders}.Do()
			if err != nil {
				t.Fatal(err)
			}
			return r
		},
	}
}

// gatewayMaintenanceScenario: the Maintenance answers etcd sends without
// a header, through the gateway (etcd's TestCurlV3MaintenanceDefragment,
// TestCurlV3MaintenanceSnapshot, TestCurlV3MaintenanceMoveleader), and the
// client port's other HTTP endpoints and access checks with the default
// flags.
func gatewayMaintenanceScenario() scenario {
	return scenario{name: "gateway-maintenance", steps: []step{
		c("put", "put", "k", "v"),
		curlStep("gateway defragment", "/v3/maintenance/defragment", "{}"),
		{name: "gateway move-leader to itself", show: "curl /v3/maintenance/transfer-leadership -d {targetID:<self>}", run: moveLeaderToSelf},
		{name: "gateway snapshot: the lines' fields", show: "curl /v3/maintenance/snapshot -d {}", run: gatewaySnapshotFields},
		{name: "/debug/vars: the variables", show: "curl /debug/vars", run: debugVarNames},
		httpStep("POST /debug/vars", "POST", "/debug/vars", "{}", nil),
		httpStep("POST /version", "POST", "/version", "{}", nil),
		httpStep("GET /health: CORS headers (--cors=*)", "GET", "/health", "", nil),
		httpStep("OPTIONS /v3/kv/put", "OPTIONS", "/v3/kv/put", "", nil),
		// RangeStream is gRPC only: etcd's gateway has no route for it.
		httpStep("POST /v3/kv/rangestream", "POST", "/v3/kv/rangestream", `{"key":"aw=="}`, nil),
		httpStep("POST /v3/kv/range_stream", "POST", "/v3/kv/range_stream", `{"key":"aw=="}`, nil),
		httpStep("GET /version from any host (--host-whitelist=*)", "GET", "/version", "", map[string]string{"Host": "evil.example"}),
	}}
}

// accessScenario: --cors and --host-whitelist.
func accessScenario() scenario {
	local := map[string]string{"Host": "localhost"}
	return scenario{name: "access", flags: []string{"--cors=http://a.example:80", "--host-whitelist=localhost,a.example"}, steps: []step{
		httpStep("Host not whitelisted", "GET", "/version", "", nil),
		httpStep("Host not whitelisted, gateway", "POST", "/v3/kv/range", `{"key":"aw=="}`, map[string]string{"Host": "evil.example:2379"}),
		httpStep("whitelisted Host, no Origin", "GET", "/version", "", local),
		httpStep("whitelisted Host, allowed Origin", "GET", "/version", "", map[string]string{"Host": "a.example", "Origin": "http://a.example:80"}),
		httpStep("whitelisted Host, other Origin", "GET", "/version", "", map[string]string{"Host": "localhost", "Origin": "http://b.example:80"}),
		httpStep("OPTIONS, allowed Origin", "OPTIONS", "/v3/kv/put", "", map[string]string{"Host": "localhost", "Origin": "http://a.example:80"}),
		{name: "metrics port: no Host check", show: "curl ${metrics}/health", run: func(t *testing.T, s *side) harness.Result {
			r, err := harness.HTTPRequest{URL: s.srv.MetricsURL + "/health", ShowHeaders: corsHeaders}.Do()
			if err != nil {
				t.Fatal(err)
			}
			return r
		}},
		c("etcdctl is not affected", "put", "k", "v"),
	}}
}

// moveLeaderToSelf asks the gateway to move the leadership to the member
// itself (its id read from endpoint status).
func moveLeaderToSelf(t *testing.T, s *side) harness.Result {
	r := s.ctl.Run("", "endpoint", "status", "-w", "json")
	var st []struct {
		Status struct {
			Header struct {
				MemberID uint64 `json:"member_id"`
			} `json:"header"`
		}
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil || len(st) != 1 {
		return harness.Result{Stdout: r.Stdout, Stderr: fmt.Sprintf("endpoint status: %v", err), Code: 1}
	}
	return curl(s.expand("${client}/v3/maintenance/transfer-leadership"), fmt.Sprintf(`{"targetID":"%d"}`, st[0].Status.Header.MemberID))
}

// gatewaySnapshotFields records, for the snapshot the gateway streams,
// how each line starts and which fields its result has (the bytes differ:
// two engines lay the same data out in different pages).
func gatewaySnapshotFields(t *testing.T, s *side) harness.Result {
	resp, err := http.Post(s.expand("${client}/v3/maintenance/snapshot"), "application/json", strings.NewReader("{}"))
	if err != nil {
		return harness.Result{Stderr: err.Error(), Code: 1}
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	seen := map[string]int{}
	var order []string
	for sc.Scan() {
		line := sc.Bytes()
		var msg struct {
			Result map[string]json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(line, &msg); err != nil {
			return harness.Result{Stdout: fmt.Sprintf("not JSON: %.80q\n", line), Code: 1}
		}
		var keys []string
		for k := range msg.Result {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		desc := fmt.Sprintf("starts %.19s; result fields %s; version %s", line, strings.Join(keys, ","), msg.Result["version"])
		if seen[desc] == 0 {
			order = append(order, desc)
		}
		seen[desc]++
	}
	var out strings.Builder
	fmt.Fprintf(&out, "HTTP %d\n", resp.StatusCode)
	for _, d := range order {
		n := "several lines"
		if seen[d] == 1 {
			n = "one line"
		}
		fmt.Fprintf(&out, "%s: %s\n", n, d)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(&out, "stream: %v\n", err)
	}
	return harness.Result{Stdout: out.String()}
}

// debugVarNames records the names of the variables /debug/vars serves.
func debugVarNames(t *testing.T, s *side) harness.Result {
	r := curl(s.expand("${client}/debug/vars"), "")
	body, status, _ := strings.Cut(r.Stdout, "\nHTTP ")
	var vars map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &vars); err != nil {
		return harness.Result{Stdout: fmt.Sprintf("not JSON (%v): %.200s\nHTTP %s", err, body, status), Code: 1}
	}
	var names []string
	for k := range vars {
		names = append(names, k)
	}
	slices.Sort(names)
	return harness.Result{Stdout: strings.Join(names, "\n") + "\nHTTP " + status}
}

// startupScenario: the lines etcd's tools and tests find in the log:
// the effective configuration at start (etcd's TestSnapshotCatchupEntriesFlag
// waits for "snapshot-catchup-entries":1000), on first start and after a
// restart, and the bootstrap defrag's skip line (TestBootstrapDefragFlag).
func startupScenario() scenario {
	return scenario{name: "startup", flags: []string{
		"--snapshot-catchup-entries=1000", "--bootstrap-defrag-threshold-megabytes=1000",
		"--heartbeat-interval=50", "--election-timeout=525", "--auto-compaction-mode=revision",
		"--auto-compaction-retention=1000", "--feature-gates=InitialCorruptCheck=true,CompactHashCheck=false",
		"--quota-backend-bytes=-1", "--cors=http://b.example:80,http://a.example:80", "--host-whitelist=z,y",
		"--max-learners=2", "--snapshot-count=77", "--max-wals=0", "--compact-hash-check-time=90s",
		"--corrupt-check-time=2m", "--max-concurrent-streams=100", "--max-request-bytes=100000", "--pre-vote=false",
	}, steps: []step{
		{name: "start-up configuration line", show: "grep 'starting an etcd server' log", run: logLine("starting an etcd server", 0, nil)},
		{name: "bootstrap defrag skipped", show: "grep 'Skipping defragmentation' log", run: logLine("Skipping defragmentation", 0,
			regexp.MustCompile(`^current-db-size`))},
		c("put", "put", "k", "v"),
		{name: "restart", show: "(restart the server)", run: func(t *testing.T, s *side) harness.Result {
			if err := s.srv.Restart(); err != nil {
				return harness.Result{Stderr: err.Error(), Code: 1}
			}
			return harness.Result{}
		}},
		{name: "start-up configuration line after the restart", show: "grep 'starting an etcd server' log (second)", run: logLine("starting an etcd server", 1, nil)},
		c("get after the restart", "get", "k"),
	}}
}

// startLineMachineFields vary with the build and the machine, not with
// the configuration: the same on two servers built differently only by
// chance.
var startLineMachineFields = []string{"ts", "level", "caller", "msg", "git-sha", "go-version", "go-os", "go-arch",
	"max-cpu-set", "max-cpu-available", "strata-version"}

// logLine records the n-th (from 0) log line with message msg as
// "field=value" lines in the log's order, without startLineMachineFields
// and with the values of fields matching mask replaced by <masked>.
func logLine(msg string, n int, mask *regexp.Regexp) func(t *testing.T, s *side) harness.Result {
	return func(t *testing.T, s *side) harness.Result {
		data, err := os.ReadFile(s.srv.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		var found []string
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, `"msg":"`+msg+`"`) {
				found = append(found, l)
			}
		}
		if len(found) <= n {
			return harness.Result{Stdout: fmt.Sprintf("%d lines with msg %q\n", len(found), msg), Code: 1}
		}
		dec := json.NewDecoder(strings.NewReader(found[n]))
		if _, err := dec.Token(); err != nil {
			return harness.Result{Stdout: "not JSON: " + found[n] + "\n", Code: 1}
		}
		var out strings.Builder
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return harness.Result{Stdout: out.String() + err.Error() + "\n", Code: 1}
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return harness.Result{Stdout: out.String() + err.Error() + "\n", Code: 1}
			}
			k := tok.(string)
			switch {
			case slices.Contains(startLineMachineFields, k):
				continue
			case mask != nil && mask.MatchString(k):
				v = json.RawMessage("<masked>")
			}
			var compact bytes.Buffer
			if json.Compact(&compact, v) != nil {
				compact.Write(v)
			}
			fmt.Fprintf(&out, "%s=%s\n", k, compact.String())
		}
		return harness.Result{Stdout: out.String()}
	}
}
