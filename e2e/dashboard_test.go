package e2e

// The Grafana dashboard (deploy/grafana/strata-dashboard.json): it
// parses, and every metric its queries name is exported by
// a running 3-member cluster (with --metrics=extensive, after a defrag and
// a snapshot sent to a member that fell behind, so the counters that
// only exist once something happened are there too).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

var rePromMetric = regexp.MustCompile(`\b((?:etcd|grpc|process|strata)_[a-z0-9_]+)\b\s*([!=]?)`)

// dashboardMetrics parses the dashboard and returns the metric names of
// its queries (label names, which share the grpc_ prefix, are the ones
// compared with = or !=).
func dashboardMetrics(t *testing.T, path string) (int, []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s does not parse: %v", path, err)
	}
	set := map[string]bool{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range rePromMetric.FindAllStringSubmatch(tg.Expr, -1) {
				if m[2] != "" || m[1] == "grpc_code" || m[1] == "grpc_type" || m[1] == "grpc_service" || m[1] == "grpc_method" {
					continue
				}
				set[m[1]] = true
			}
		}
	}
	var names []string
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return len(d.Panels), names
}

func TestDashboardQueries(t *testing.T) {
	bin := strataTarget(t)
	panels, names := dashboardMetrics(t, filepath.Join("..", "deploy", "grafana", "strata-dashboard.json"))
	c := startCluster(t, bin, append(append([]string(nil), clusterFlags...), "--metrics=extensive"))
	ctl := &harness.Ctl{Bin: needBins(t).Etcdctl, Endpoints: c.ClientURLs()}
	put := func(n int, prefix string) {
		t.Helper()
		for i := 0; i < n; i++ {
			if r := ctl.Run("", "put", fmt.Sprintf("%s/%d", prefix, i), strings.Repeat("v", 1000)); r.Code != 0 {
				t.Fatalf("put: %s", r)
			}
		}
	}
	// A member falls behind the leader's log and catches up by snapshot.
	lag := c.Members[2]
	if err := lag.Stop(); err != nil {
		t.Fatal(err)
	}
	ctl.Endpoints = []string{c.Members[0].ClientURL, c.Members[1].ClientURL}
	put(150, "dash")
	if err := lag.Restart(); err != nil {
		t.Fatal(err)
	}
	ctl.Endpoints = c.ClientURLs()
	if r := ctl.Run("", "del", "--prefix", "dash/"); r.Code != 0 {
		t.Fatalf("del: %s", r)
	}
	if r := ctl.Run("", "compaction", "--physical", "1"); r.Code != 0 && !strings.Contains(r.Stderr, "compacted") {
		t.Logf("compaction: %s", r)
	}
	if r := ctl.Run("", "defrag", "--cluster"); r.Code != 0 {
		t.Fatalf("defrag: %s", r)
	}
	var missing []string
	poll.UntilNil(t, "every metric of the dashboard on some member", func() error {
		have := map[string]bool{}
		for _, m := range c.Members {
			fams, err := harness.ScrapeMetrics(m.ClientURL + "/metrics")
			if err != nil {
				return err
			}
			for n := range fams {
				have[n] = true
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					have[n+suf] = true
				}
			}
		}
		missing = missing[:0]
		for _, n := range names {
			if !have[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not exported: %v", missing)
		}
		return nil
	})
	t.Logf("DASHBOARD: %d panels, %d metrics queried, every one exported by the cluster: %s", panels, len(names), strings.Join(names, " "))
}
