package transport

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/internal/poll"
)

// TestMetricsAreEtcds: the transport exports exactly etcd 3.7.3's
// rafthttp metrics (metrics.go there) and the snap package's two for a
// received database (snap/metrics.go), with etcd's names, help texts and
// label names, so etcd dashboards and alerts read them unchanged.
func TestMetricsAreEtcds(t *testing.T) {
	want := map[string]string{ // name -> help | labels
		"etcd_network_active_peers":                            "The current number of active peer connections.|Local,Remote",
		"etcd_network_disconnected_peers_total":                "The total number of disconnected peers.|Local,Remote",
		"etcd_network_peer_sent_bytes_total":                   "The total number of bytes sent to peers.|To",
		"etcd_network_peer_received_bytes_total":               "The total number of bytes received from peers.|From",
		"etcd_network_peer_sent_failures_total":                "The total number of send failures from peers.|To",
		"etcd_network_peer_received_failures_total":            "The total number of receive failures from peers.|From",
		"etcd_network_snapshot_send_success":                   "Total number of successful snapshot sends|To",
		"etcd_network_snapshot_send_inflights_total":           "Total number of inflight snapshot sends|To",
		"etcd_network_snapshot_send_failures":                  "Total number of snapshot send failures|To",
		"etcd_network_snapshot_send_total_duration_seconds":    "Total latency distributions of v3 snapshot sends|To",
		"etcd_network_snapshot_receive_success":                "Total number of successful snapshot receives|From",
		"etcd_network_snapshot_receive_inflights_total":        "Total number of inflight snapshot receives|From",
		"etcd_network_snapshot_receive_failures":               "Total number of snapshot receive failures|From",
		"etcd_network_snapshot_receive_total_duration_seconds": "Total latency distributions of v3 snapshot receives|From",
		"etcd_network_peer_round_trip_time_seconds":            "Round-Trip-Time histogram between peers|To",
		"etcd_snap_db_save_total_duration_seconds":             "The total latency distributions of v3 snapshot save|",
		"etcd_snap_db_fsync_duration_seconds":                  "The latency distributions of fsyncing .snap.db file|",
	}
	a := newMember(t, 1, 100, nil, nil)
	re := regexp.MustCompile(`fqName: "([^"]+)", help: "([^"]*)".*variableLabels: \{([^}]*)\}`)
	got := map[string]string{}
	for _, c := range a.tr.Collectors() {
		ch := make(chan *prometheus.Desc, 4)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			m := re.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			got[m[1]] = m[2] + "|" + m[3]
		}
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: got %q, want %q", name, got[name], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d metrics, want %d: %v", len(got), len(want), got)
	}
	// The registry's own consistency checks (names, label names, help).
	reg := prometheus.NewPedanticRegistry()
	for _, c := range a.tr.Collectors() {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPeerActivityMetrics: a connected peer counts in active_peers; once it
// goes away it no longer does and disconnected_peers_total counts it; the
// bytes counters move with traffic.
func TestPeerActivityMetrics(t *testing.T) {
	a, b := newMember(t, 1, 100, nil, nil), newMember(t, 2, 100, nil, nil)
	connect(t, a, b)
	waitStreams(t, a, b)
	if v := metric(t, a.tr, "etcd_network_active_peers", "Local", "1", "Remote", "2"); v != 1 {
		t.Fatalf("active peers %v, want 1", v)
	}
	if a.tr.ActivePeers() != 1 || a.tr.ActiveSince(2).IsZero() {
		t.Fatalf("ActivePeers %d, ActiveSince %v", a.tr.ActivePeers(), a.tr.ActiveSince(2))
	}
	for i := range uint64(5) {
		m := msg(raftpb.MsgApp, 1, 2, 2, 10+i)
		m.Entries = entries(11+i, 1, 64, 2)
		a.tr.Send([]*raftpb.Message{m})
	}
	poll.Until(t, "bytes counted both ways", func() bool {
		return metric(t, a.tr, "etcd_network_peer_sent_bytes_total", "To", "2") > 0 &&
			metric(t, b.tr, "etcd_network_peer_received_bytes_total", "From", "1") > 0
	})
	b.stop()
	poll.Until(t, "b counted as disconnected", func() bool {
		return metric(t, a.tr, "etcd_network_disconnected_peers_total", "Local", "1", "Remote", "2") >= 1 &&
			metric(t, a.tr, "etcd_network_active_peers", "Local", "1", "Remote", "2") == 0
	})
	if a.tr.ActivePeers() != 0 || !a.tr.ActiveSince(2).IsZero() {
		t.Fatalf("after b left: ActivePeers %d, ActiveSince %v", a.tr.ActivePeers(), a.tr.ActiveSince(2))
	}
}

// TestProbing: each member probes its peers' /raft/probing, which answers
// as etcd's prober expects; the round trips land in the RTT histogram.
func TestProbing(t *testing.T) {
	probe := func(c *Config) { c.ProbeInterval = 20 * time.Millisecond }
	a, b := newMember(t, 1, 100, nil, probe), newMember(t, 2, 100, nil, probe)
	connect(t, a, b)
	poll.Until(t, "three probes of b", func() bool {
		st, _ := a.tr.PeerStatus(2)
		return st.Probes >= 3 && st.RTT > 0
	})
	if n := metric(t, a.tr, "etcd_network_peer_round_trip_time_seconds", "To", "2"); n < 3 {
		t.Fatalf("%v round trips observed, want at least 3", n)
	}
	resp, err := http.Get(b.url + "/raft/probing")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	now, _ := h["Now"].(string)
	if strings.Join(keys, ",") != "Now,OK" || h["OK"] != true {
		t.Fatalf("/raft/probing answered %v", h)
	}
	if ts, err := time.Parse(time.RFC3339Nano, now); err != nil || time.Since(ts).Abs() > time.Minute {
		t.Fatalf("/raft/probing Now %q: %v", now, err)
	}
}
