package e2e

// Monitoring, the part that needs no Prometheus: every
// metric the etcd mixin's alerts and dashboards query, read from the
// mixin's own sources in etcd's module (go mod download), is exported by
// each member of a running 3-member Strata cluster, with the labels the
// queries group or filter by.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// mixinModule is etcd's root module, which holds contrib/mixin.
const mixinModule = "go.etcd.io/etcd/v3@v3.6.8"

// mixinDir downloads etcd's root module through the module proxy and
// returns its contrib/mixin directory.
func mixinDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(moduleDir(t, mixinModule), "contrib", "mixin")
}

// moduleDir downloads module@version through the module proxy (for the
// files it ships: the etcd mixin, Prometheus Operator's CRDs) and returns
// its directory.
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v\n%s", module, err, out)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download %s: %v\n%s", module, err, out)
	}
	return m.Dir
}

var reMixinMetric = regexp.MustCompile(`\b((?:etcd|grpc|process)_[a-z_]+?)(_bucket|_sum|_count)?\s*[{\[(]`)

// mixinMetrics are the metric names the mixin queries.
func mixinMetrics(t *testing.T, dir string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "alerts", "*.libsonnet"))
	more, _ := filepath.Glob(filepath.Join(dir, "dashboards", "*.libsonnet"))
	files = append(files, more...)
	if len(files) == 0 {
		t.Fatalf("no mixin sources in %s", dir)
	}
	set := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range reMixinMetric.FindAllStringSubmatch(string(b), -1) {
			name := m[1] + m[2]
			if strings.HasPrefix(name, "etcd_selector") || strings.HasPrefix(name, "etcd_instance") || strings.HasPrefix(name, "grpc_") && !strings.HasPrefix(name, "grpc_server_") {
				continue // config fields and label names
			}
			set[name] = true
		}
	}
	var out []string
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func TestMixinMetrics(t *testing.T) {
	bin := strataTarget(t)
	names := mixinMetrics(t, mixinDir(t))
	if len(names) < 15 {
		t.Fatalf("only %d metrics found in the mixin: %v", len(names), names)
	}
	// grpc_server_handling_seconds, which the dashboards query, is there
	// with --metrics=extensive only, as in etcd.
	c := startCluster(t, bin, append(append([]string(nil), clusterFlags...), "--metrics=extensive"))
	ctl := &harness.Ctl{Bin: needBins(t).Etcdctl, Endpoints: c.ClientURLs()}
	for i := 0; i < 20; i++ {
		if r := ctl.Run("", "put", fmt.Sprintf("mixin/%d", i), "v"); r.Code != 0 {
			t.Fatalf("put: %s", r)
		}
	}
	// Labels the queries group or filter by.
	wantLabels := map[string][]string{
		"grpc_server_handled_total":                     {"grpc_code", "grpc_method", "grpc_service", "grpc_type"},
		"grpc_server_started_total":                     {"grpc_method", "grpc_service", "grpc_type"},
		"etcd_network_peer_sent_failures_total":         {"To"},
		"etcd_network_peer_round_trip_time_seconds":     {"To"},
		"etcd_network_peer_sent_bytes_total":            {"To"},
		"etcd_network_peer_received_bytes_total":        {"From"},
		"etcd_network_client_grpc_received_bytes_total": nil,
	}
	// A send-failure counter has a series only once a send failed (as in
	// etcd): with m3 down, the leader among m1 and m2 fails to reach it.
	const failures = "etcd_network_peer_sent_failures_total"
	check := func(m *harness.Server, fams map[string]*harness.Family, names []string) {
		for _, n := range names {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
			f := fams[base]
			if f == nil {
				f = fams[n]
			}
			if f == nil {
				t.Errorf("%s: the mixin queries %s; /metrics has no %s", m.Name(), n, base)
				continue
			}
			for _, l := range wantLabels[base] {
				if !containsLabel(f.LabelNames(), l) {
					t.Errorf("%s: %s has labels %v, the mixin uses %s", m.Name(), base, f.LabelNames(), l)
				}
			}
		}
	}
	var others []string
	for _, n := range names {
		if n != failures {
			others = append(others, n)
		}
	}
	for _, m := range c.Members {
		fams, err := harness.ScrapeMetrics(m.ClientURL + "/metrics")
		if err != nil {
			t.Fatalf("%s: %v", m.Name(), err)
		}
		check(m, fams, others)
	}
	if err := c.Members[2].Kill(); err != nil {
		t.Fatal(err)
	}
	poll.UntilNil(t, "a member to count failed sends to the killed member", func() error {
		ctl.Run("", "put", "mixin/after", "v")
		for _, m := range c.Members[:2] {
			fams, err := harness.ScrapeMetrics(m.ClientURL + "/metrics")
			if err != nil {
				return err
			}
			if fams[failures] != nil {
				check(m, fams, []string{failures})
				return nil
			}
		}
		return fmt.Errorf("no %s yet", failures)
	})
	t.Logf("MIXIN: %d metrics the etcd mixin (%s) queries, all exported by each of 3 members: %s", len(names), mixinModule, strings.Join(names, " "))
}

func containsLabel(ls []string, l string) bool {
	for _, x := range ls {
		if x == l {
			return true
		}
	}
	return false
}
