package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// prober fetches the peer's /raft/probing every ProbeInterval, as etcd's
// prober does, to measure the round trip: each successful probe's RTT is
// observed in etcd_network_peer_round_trip_time_seconds{To}, and a
// smoothed RTT (RFC 6298 weights, 1/8) is kept for PeerStatus. A peer
// whose clock is more than a second off ours is logged, as etcd does.
type prober struct {
	p      *peer
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex // guards the fields below
	srtt    time.Duration
	probes  uint64
	healthy bool
}

func startProber(p *peer) *prober {
	pr := &prober{p: p, done: make(chan struct{}), healthy: true}
	pr.ctx, pr.cancel = context.WithCancel(context.Background())
	go pr.run()
	return pr
}

func (pr *prober) stop() {
	pr.cancel()
	<-pr.done
}

func (pr *prober) stats() (time.Duration, uint64) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.srtt, pr.probes
}

func (pr *prober) run() {
	defer close(pr.done)
	interval := pr.p.tr.cfg.ProbeInterval
	tick := time.NewTicker(interval)
	defer tick.Stop()
	rtt := pr.p.tr.m.rtt.WithLabelValues(pr.p.idStr)
	for {
		select {
		case <-pr.ctx.Done():
			return
		case <-tick.C:
		}
		d, remoteNow, err := pr.probe(interval)
		pr.mu.Lock()
		wasHealthy := pr.healthy
		pr.healthy = err == nil
		if err == nil {
			if pr.probes == 0 {
				pr.srtt = d
			} else {
				pr.srtt += (d - pr.srtt) / 8
			}
			pr.probes++
		}
		pr.mu.Unlock()
		if err != nil {
			if wasHealthy && pr.ctx.Err() == nil {
				pr.p.status.log.Warn("prober detected unhealthy status", "error", err)
			}
			continue
		}
		rtt.Observe(d.Seconds())
		// The peer's clock read half a round trip ago, roughly.
		if drift := time.Since(remoteNow.Add(d / 2)).Abs(); drift > time.Second {
			pr.p.status.log.Warn("prober found high clock drift", "clock-drift", drift.String(), "rtt", d.String())
		}
	}
}

func (pr *prober) probe(timeout time.Duration) (time.Duration, time.Time, error) {
	u := pr.p.picker.pick()
	u.Path = pathProbing
	ctx, cancel := context.WithTimeout(pr.ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, time.Time{}, err
	}
	start := time.Now()
	resp, err := pr.p.tr.pipelineRT.RoundTrip(req)
	if err != nil {
		pr.p.picker.unreachable(u)
		return 0, time.Time{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		pr.p.picker.unreachable(u)
		return 0, time.Time{}, fmt.Errorf("transport: probe %s: status %s", u.String(), resp.Status)
	}
	var h probeHealth
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&h); err != nil || !h.OK {
		pr.p.picker.unreachable(u)
		return 0, time.Time{}, fmt.Errorf("transport: probe %s: bad answer (ok=%v): %v", u.String(), h.OK, err)
	}
	return time.Since(start), h.Now, nil
}
