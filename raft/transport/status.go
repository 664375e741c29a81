package transport

import (
	"log/slog"
	"net/url"
	"sync"
	"time"
)

// peerStatus is whether the link to one peer works: active after any
// stream connects or any request to it succeeds, inactive after a failure.
// It drives etcd_network_active_peers and ..._disconnected_peers_total.
type peerStatus struct {
	log           *slog.Logger
	m             *metrics
	local, remote string // ids as labels

	mu      sync.Mutex // guards the fields below
	active  bool
	since   time.Time // when it last became active; zero while inactive
	lastErr string    // the failure that last deactivated it
}

func (s *peerStatus) activate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active {
		return
	}
	s.log.Info("peer became active", "peer-id", s.remote)
	s.active, s.since = true, time.Now()
	s.m.activePeers.WithLabelValues(s.local, s.remote).Inc()
}

// deactivate records a failure of action on source (a stream, the
// pipeline, the snapshot sender).
func (s *peerStatus) deactivate(source, action string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = "failed to " + action + " " + s.remote + " on " + source + " (" + err.Error() + ")"
	if !s.active {
		s.log.Debug("peer deactivated again", "peer-id", s.remote, "reason", s.lastErr)
		return
	}
	s.log.Warn("peer became inactive (message send to peer failed)", "peer-id", s.remote, "reason", s.lastErr)
	s.active, s.since = false, time.Time{}
	s.m.activePeers.WithLabelValues(s.local, s.remote).Dec()
	s.m.disconnectedPeers.WithLabelValues(s.local, s.remote).Inc()
}

func (s *peerStatus) isActive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

func (s *peerStatus) snapshot() (active bool, since time.Time, lastErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active, s.since, s.lastErr
}

// release drops the peer's active-peers gauge when the peer is removed.
func (s *peerStatus) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active {
		s.m.activePeers.WithLabelValues(s.local, s.remote).Dec()
		s.active = false
	}
}

// urlPicker chooses which of a peer's URLs to use: the same one until it
// fails, then the next.
type urlPicker struct {
	mu     sync.Mutex // guards urls and picked
	urls   []url.URL
	picked int
}

func (p *urlPicker) update(urls []url.URL) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.urls, p.picked = urls, 0
}

func (p *urlPicker) pick() url.URL {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.urls[p.picked]
}

// unreachable moves on from u, unless another caller already has.
func (p *urlPicker) unreachable(u url.URL) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.urls[p.picked] == u {
		p.picked = (p.picked + 1) % len(p.urls)
	}
}
