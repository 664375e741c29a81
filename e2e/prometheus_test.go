//go:build prometheus

package e2e

// Monitoring with a real Prometheus: `make monitoring`
// builds prometheus, promtool and jsonnet from the Go module proxy and
// runs this test with -tags prometheus.
//
// The etcd mixin's alerts (contrib/mixin of etcd's module, rendered with
// jsonnet) pass `promtool check rules`. A Prometheus scraping a
// 3-member Strata cluster every second evaluates them with every
// expression as the mixin writes it and its own scrape-interval knob set
// to 1 s; only each alert's hold time ('for', up to 20 minutes) is cut to
// 5 s so that a test can wait for it. Then:
//   - every rule evaluates without error, and every metric the rules
//     name has series in Prometheus;
//   - etcdMembersDown fires when a member is killed; etcdNoLeader and
//     etcdInsufficientMembers when a second one is; they resolve when the
//     members come back;
//   - etcdHighNumberOfLeaderChanges fires after 5 forced leader moves;
//   - every query of deploy/grafana/strata-dashboard.json returns data.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

func promBins(t *testing.T) (prometheus, promtool, jsonnet string) {
	dir := os.Getenv("STRATA_PROM_BIN")
	if dir == "" {
		t.Fatal("set STRATA_PROM_BIN to a directory with prometheus, promtool and jsonnet (make monitoring builds them)")
	}
	prometheus, promtool, jsonnet = filepath.Join(dir, "prometheus"), filepath.Join(dir, "promtool"), filepath.Join(dir, "jsonnet")
	for _, b := range []string{prometheus, promtool, jsonnet} {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("%v (make monitoring builds it)", err)
		}
	}
	return
}

// renderMixinAlerts renders the mixin's prometheusAlerts with jsonnet,
// with config overrides (a jsonnet object literal's fields).
func renderMixinAlerts(t *testing.T, jsonnet, dir, config string) []byte {
	expr := fmt.Sprintf(`((import "config.libsonnet") + (import "alerts/alerts.libsonnet") + {_config+:: {%s}}).prometheusAlerts`, config)
	out, err := exec.Command(jsonnet, "-J", dir, "-e", expr).Output()
	if err != nil {
		t.Fatalf("jsonnet (the mixin's alerts): %v", err)
	}
	return out
}

type ruleFile struct {
	Groups []struct {
		Name  string           `json:"name"`
		Rules []map[string]any `json:"rules"`
	} `json:"groups"`
}

// prom is a running Prometheus and its HTTP API.
type prom struct {
	t   *testing.T
	url string
}

func (p *prom) get(path string, q url.Values, out any) error {
	resp, err := http.Get(p.url + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("%s: %v: %s", path, err, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s %v: %s", path, q, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// query runs an instant query and returns its result vector.
func (p *prom) query(expr string) ([]map[string]any, error) {
	var data struct {
		ResultType string           `json:"resultType"`
		Result     []map[string]any `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	return data.Result, nil
}

// firing is the set of alert names in state firing.
func (p *prom) firing() (map[string]int, error) {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.get("/api/v1/alerts", nil, &data); err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, a := range data.Alerts {
		if a.State == "firing" {
			out[a.Labels["alertname"]]++
		}
	}
	return out, nil
}

func (p *prom) waitFiring(alert string) {
	p.t.Helper()
	start := time.Now()
	poll.UntilNil(p.t, alert+" to fire", func() error {
		f, err := p.firing()
		if err != nil {
			return err
		}
		if f[alert] == 0 {
			return fmt.Errorf("firing: %v", f)
		}
		return nil
	})
	p.t.Logf("PROMETHEUS: %s fired %.0fs after the event", alert, time.Since(start).Seconds())
}

func (p *prom) waitResolved(alert string) {
	p.t.Helper()
	poll.UntilNil(p.t, alert+" to resolve", func() error {
		f, err := p.firing()
		if err != nil {
			return err
		}
		if f[alert] > 0 {
			return fmt.Errorf("still firing: %v", f)
		}
		return nil
	})
}

var reRuleMetric = regexp.MustCompile(`\b((?:etcd|grpc|process)_[a-z_]+?)(_bucket|_sum|_count)?\s*[{\[(]`)

func TestPrometheusMixin(t *testing.T) {
	bin := strataTarget(t)
	prometheus, promtool, jsonnet := promBins(t)
	mixin := mixinDir(t)
	work := t.TempDir()

	// The rules as the mixin ships them (its Makefile's file name):
	// promtool checks them.
	if err := os.MkdirAll(filepath.Join(work, "manifests"), 0o700); err != nil {
		t.Fatal(err)
	}
	shipped := filepath.Join(work, "manifests", "etcd-prometheusRules.yaml")
	if err := os.WriteFile(shipped, renderMixinAlerts(t, jsonnet, mixin, ""), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", shipped).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	} else {
		t.Logf("PROMETHEUS: promtool check rules: %s", strings.Join(strings.Fields(string(out)), " "))
	}
	// The rules Prometheus loads: scrape interval 1 s (the mixin's knob),
	// hold times cut to 5 s.
	var rf ruleFile
	if err := json.Unmarshal(renderMixinAlerts(t, jsonnet, mixin, "scrape_interval_seconds: 1"), &rf); err != nil {
		t.Fatal(err)
	}
	ruleMetrics := map[string]bool{}
	alerts := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if _, ok := r["for"]; ok {
				r["for"] = "5s"
			}
			alerts++
			for _, m := range reRuleMetric.FindAllStringSubmatch(r["expr"].(string), -1) {
				ruleMetrics[m[1]+m[2]] = true
			}
		}
	}
	rb, _ := json.Marshal(rf)
	rules := filepath.Join(work, "rules.json")
	if err := os.WriteFile(rules, rb, 0o600); err != nil {
		t.Fatal(err)
	}

	c := startCluster(t, bin, append(append([]string(nil), clusterFlags...), "--metrics=extensive"))
	var targets []string
	for _, m := range c.Members {
		u, _ := url.Parse(m.MetricsURL)
		targets = append(targets, strconv.Quote(u.Host))
	}
	ports, err := harness.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: etcd
    static_configs:
      - targets: [%s]
`, rules, strings.Join(targets, ", "))
	cfgPath := filepath.Join(work, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(work, "prometheus.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	pcmd := exec.Command(prometheus, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(work, "tsdb"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(ports[0]))
	pcmd.Stdout, pcmd.Stderr = logf, logf
	if err := pcmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { pcmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		pcmd.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(string(b), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Logf("prometheus log (tail):\n%s", strings.Join(lines, "\n"))
		}
	})
	p := &prom{t: t, url: "http://127.0.0.1:" + strconv.Itoa(ports[0])}
	poll.UntilNil(t, "Prometheus to scrape the 3 members", func() error {
		select {
		case <-exited:
			t.Fatalf("prometheus exited; log in %s", logPath)
		default:
		}
		r, err := p.query(`sum(up{job="etcd"})`)
		if err != nil {
			return err
		}
		if len(r) != 1 || r[0]["value"].([]any)[1] != "3" {
			return fmt.Errorf("up: %v", r)
		}
		return nil
	})

	// Every rule evaluates without error.
	poll.UntilNil(t, "every mixin rule evaluated, none failing", func() error {
		var data struct {
			Groups []struct {
				Rules []struct {
					Name           string `json:"name"`
					Health         string `json:"health"`
					LastError      string `json:"lastError"`
					LastEvaluation string `json:"lastEvaluation"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := p.get("/api/v1/rules", nil, &data); err != nil {
			return err
		}
		n := 0
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				if r.Health == "err" {
					t.Fatalf("rule %s fails: %s", r.Name, r.LastError)
				}
				if r.Health != "ok" {
					return fmt.Errorf("rule %s: health %q", r.Name, r.Health)
				}
				n++
			}
		}
		if n != alerts {
			return fmt.Errorf("%d rules loaded, want %d", n, alerts)
		}
		return nil
	})
	if f, err := p.firing(); err != nil || len(f) != 0 {
		t.Fatalf("alerts firing on a healthy cluster: %v %v", f, err)
	}

	// One member down: a follower. Were it the leader, a put sent to a
	// follower as it died would be lost with it and time out ("request
	// timed out, possibly due to previous leader failure"), in etcd as
	// here. The leader is kept up throughout and serves the puts.
	keep := clusterLeader(t, c)
	var followers []*harness.Server
	for _, m := range c.Members {
		if m != keep {
			followers = append(followers, m)
		}
	}
	second, third := followers[0], followers[1]
	cli := memberClient(t, keep)
	if err := third.Kill(); err != nil {
		t.Fatal(err)
	}
	putN(t, cli, "prom/a", 150) // it falls behind the leader's log: a snapshot on its return
	p.waitFiring("etcdMembersDown")
	if f, _ := p.firing(); f["etcdNoLeader"] > 0 || f["etcdInsufficientMembers"] > 0 {
		t.Fatalf("with 2 of 3 members up: %v", f)
	}
	// Two down: the last one has no leader.
	if err := second.Kill(); err != nil {
		t.Fatal(err)
	}
	p.waitFiring("etcdNoLeader")
	p.waitFiring("etcdInsufficientMembers")
	for _, m := range []*harness.Server{second, third} {
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
	}
	p.waitResolved("etcdNoLeader")
	p.waitResolved("etcdInsufficientMembers")
	waitRev(t, third, putN(t, cli, "prom/b", 10))
	ctl := &harness.Ctl{Bin: needBins(t).Etcdctl, Endpoints: c.ClientURLs()}
	if r := ctl.Run("", "defrag", "--cluster"); r.Code != 0 {
		t.Fatalf("defrag: %s", r)
	}

	// Forced leader moves. The leader-change alert's subquery samples
	// each whole minute, so it can only see the moves once it has a
	// sample from before them: wait for that first.
	poll.UntilNilWithin(t, 2*time.Minute, time.Second, "a minute-aligned sample of the leader changes before the moves", func() error {
		r, err := p.query(`count_over_time((max without (instance) (etcd_server_leader_changes_seen_total{job="etcd"}))[15m:1m])`)
		if err != nil {
			return err
		}
		if len(r) == 0 {
			return errors.New("none yet")
		}
		return nil
	})
	moves := 0
	for moves < 5 {
		lead := clusterLeader(t, c)
		var to *harness.Server
		for _, m := range c.Members {
			if m != lead {
				to = m
				break
			}
		}
		lc := memberClient(t, lead)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := memberClient(t, to).Status(ctx, to.ClientURL)
		if err == nil {
			_, err = lc.MoveLeader(ctx, st.Header.MemberId)
		}
		cancel()
		if err != nil {
			t.Logf("move leader: %v (retrying)", err)
			continue
		}
		moves++
	}

	// Every metric the rules name has series (the peer send failures of
	// the kills included), and every dashboard query returns data.
	var names []string
	for n := range ruleMetrics {
		names = append(names, n)
	}
	sort.Strings(names)
	poll.UntilNil(t, "series for every metric the mixin's rules name", func() error {
		for _, n := range names {
			r, err := p.query(fmt.Sprintf(`count({__name__=%q, job="etcd"})`, n))
			if err != nil {
				return err
			}
			if len(r) == 0 {
				return fmt.Errorf("no series of %s", n)
			}
		}
		return nil
	})
	queries := dashboardQueries(t, filepath.Join("..", "deploy", "grafana", "strata-dashboard.json"))
	poll.UntilNil(t, "data for every dashboard query", func() error {
		for _, q := range queries {
			expr := strings.NewReplacer(`$job`, `etcd`, `$__rate_interval`, `1m`).Replace(q)
			r, err := p.query(expr)
			if err != nil {
				return err
			}
			if len(r) == 0 {
				return fmt.Errorf("no data: %s", expr)
			}
		}
		return nil
	})
	// The subquery of the leader-change alert samples each whole minute:
	// it fires once a minute boundary follows the moves (and its hold).
	start := time.Now()
	poll.UntilNilWithin(t, 3*time.Minute, time.Second, "etcdHighNumberOfLeaderChanges to fire", func() error {
		f, err := p.firing()
		if err != nil {
			return err
		}
		if f["etcdHighNumberOfLeaderChanges"] == 0 {
			r, _ := p.query(`increase((max without (instance) (etcd_server_leader_changes_seen_total{job="etcd"}))[15m:1m])`)
			return fmt.Errorf("firing %v; the alert's increase: %v", f, r)
		}
		return nil
	})
	t.Logf("PROMETHEUS: etcdHighNumberOfLeaderChanges fired %.0fs after the moves", time.Since(start).Seconds())
	t.Logf("PROMETHEUS: %d mixin alerts loaded and evaluated without error, %d metrics they name all present; %d dashboard queries all returned data; %d leader moves",
		alerts, len(names), len(queries), moves)
}

// dashboardQueries are the expressions of every panel target.
func dashboardQueries(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s does not parse: %v", path, err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	return out
}
