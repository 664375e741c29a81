package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/vfs"
)

// Config configures a Transport. Zero durations and sizes take the
// defaults named on each field, which are etcd's.
type Config struct {
	// ID is this member's id and ClusterID the cluster's; both are
	// required and checked on every request (X-Etcd-Cluster-ID).
	ID, ClusterID uint64
	// URLs are this member's advertised peer URLs, sent as X-PeerURLs so
	// a member that does not know us yet can answer through a pipeline.
	URLs []string
	// Raft receives messages and reports. Required.
	Raft Raft
	// Snapshots supplies and stores the state image that follows a
	// MsgSnap. Optional; see Snapshots.
	Snapshots Snapshots
	// ClientTLS is used to dial https peer URLs (the server's
	// config.PeerClientTLS); nil dials them with Go's defaults. The
	// listener's side (peer certificate checks, allowed CN and hostname,
	// CRL) is the server's *tls.Config: see ServerTLS.
	ClientTLS *tls.Config
	// LocalAddr, when set, is the source IP of every TCP connection to a
	// peer (etcd's SetMemberLocalAddr gate: config.PeerLocalAddr); nil
	// lets the kernel choose.
	LocalAddr net.IP
	// Logger gets the transport's logs; nil discards them.
	Logger *slog.Logger
	// FS is where received snapshot images are written; nil is vfs.Default.
	FS vfs.FS

	// DialTimeout bounds connecting to a peer. Default 1 s; etcd uses 1 s
	// plus the election timeout.
	DialTimeout time.Duration
	// ConnReadTimeout and ConnWriteTimeout bound each read and write on a
	// stream connection. The sending side writes a link heartbeat every
	// ConnReadTimeout/3, so an idle stream stays up and a dead one is
	// found within ConnReadTimeout. Default 5 s each, as etcd.
	ConnReadTimeout, ConnWriteTimeout time.Duration
	// DialRetryMin and DialRetryMax bound the backoff between attempts to
	// open a stream: it starts at DialRetryMin, doubles after each failed
	// attempt up to DialRetryMax, and resets once a stream connects.
	// Default 100 ms (etcd's fixed retry interval) and 1 s. A stream
	// that was up is redialed at once when it is lost, as etcd's are
	// (at most one dial per 100 ms), and the backoff applies from there.
	DialRetryMin, DialRetryMax time.Duration
	// ProbeInterval is how often each peer's /raft/probing is fetched to
	// measure the round trip (etcd_network_peer_round_trip_time_seconds).
	// Default 4 s, as etcd; negative disables probing.
	ProbeInterval time.Duration
	// StreamQueue is each stream's send queue, in messages; a full queue
	// drops the message and reports the peer unreachable. Default 4096.
	StreamQueue int
	// PipelineQueue is the pipeline's send queue (messages sent while no
	// stream is up, and MsgSnap without Snapshots). Default 64.
	PipelineQueue int
	// RecvQueue is each received stream's queue towards Raft.Process,
	// per peer and stream (proposals have their own); a full queue drops
	// the message. Default 4096.
	RecvQueue int
	// PipelineTimeout bounds one pipeline request. Default 30 s.
	PipelineTimeout time.Duration
	// SnapshotResponseTimeout bounds reading the receiver's answer once a
	// snapshot has been sent. Default 5 s, as etcd.
	SnapshotResponseTimeout time.Duration
	// DisableSnapshotCompression sends snapshot images raw even to Strata
	// peers that accept zstd (etcd peers always get them raw).
	DisableSnapshotCompression bool
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defInt := func(n *int, v int) {
		if *n <= 0 {
			*n = v
		}
	}
	def(&c.DialTimeout, time.Second)
	def(&c.ConnReadTimeout, 5*time.Second)
	def(&c.ConnWriteTimeout, 5*time.Second)
	def(&c.DialRetryMin, 100*time.Millisecond)
	def(&c.DialRetryMax, time.Second)
	if c.DialRetryMax < c.DialRetryMin {
		c.DialRetryMax = c.DialRetryMin
	}
	def(&c.ProbeInterval, 4*time.Second)
	def(&c.PipelineTimeout, 30*time.Second)
	def(&c.SnapshotResponseTimeout, 5*time.Second)
	defInt(&c.StreamQueue, 4096)
	defInt(&c.PipelineQueue, 64)
	defInt(&c.RecvQueue, 4096)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
}

// Transport carries raft messages between members over etcd's peer
// protocol. See the package documentation.
type Transport struct {
	cfg Config
	log *slog.Logger
	m   *metrics
	rep *reporter

	idStr, cidStr string
	urlsHeader    string // X-PeerURLs

	streamRT   *http.Transport // streams: per-read/write deadlines, no reuse
	pipelineRT *http.Transport // pipeline, snapshots, probes

	handler http.Handler

	mu      sync.RWMutex // guards peers, remotes and stopped
	peers   map[uint64]*peer
	remotes map[uint64]*remote
	stopped bool

	removedOnce sync.Once
	removed     chan struct{} // closed when a peer says we were removed
}

// New returns a running transport with no peers.
func New(cfg Config) (*Transport, error) {
	if cfg.ID == 0 {
		return nil, errors.New("transport: Config.ID is required")
	}
	if cfg.Raft == nil {
		return nil, errors.New("transport: Config.Raft is required")
	}
	for _, u := range cfg.URLs {
		if _, err := parseURLs([]string{u}); err != nil {
			return nil, err
		}
	}
	cfg.setDefaults()
	t := &Transport{
		cfg:        cfg,
		log:        cfg.Logger.With("local-member-id", FormatID(cfg.ID)),
		m:          newMetrics(),
		idStr:      FormatID(cfg.ID),
		cidStr:     FormatID(cfg.ClusterID),
		urlsHeader: strings.Join(cfg.URLs, ","),
		peers:      map[uint64]*peer{},
		remotes:    map[uint64]*remote{},
		removed:    make(chan struct{}),
	}
	t.rep = newReporter(cfg.Raft)
	t.streamRT = newRoundTripper(cfg.ClientTLS, cfg.LocalAddr, cfg.DialTimeout, cfg.ConnReadTimeout, cfg.ConnWriteTimeout)
	t.pipelineRT = newRoundTripper(cfg.ClientTLS, cfg.LocalAddr, cfg.DialTimeout, 0, 0)
	t.handler = t.newRaftHandler()
	return t, nil
}

// Handler serves the raft endpoints (/raft, /raft/stream/, /raft/snapshot,
// /raft/probing). NewPeerHandler adds /members and /version around it.
func (t *Transport) Handler() http.Handler { return t.handler }

// Collectors are the transport's metrics, for the server to register.
func (t *Transport) Collectors() []prometheus.Collector { return t.m.collectors() }

// Removed is closed once a peer tells this member it was removed from the
// cluster (410 on a stream, 403 on a post). etcd stops then; so should
// the server.
func (t *Transport) Removed() <-chan struct{} { return t.removed }

func (t *Transport) markRemoved(by string) {
	t.removedOnce.Do(func() {
		t.log.Error("peer reports this member as removed from the cluster", "remote-peer-id", by)
		close(t.removed)
	})
}

// Send queues messages for their peers and returns at once: it never
// blocks, whatever the network does. A message that cannot be queued is
// dropped and its peer reported unreachable to Raft (and a dropped MsgSnap
// is reported as a failed snapshot). Messages to unknown ids are ignored;
// so is To == 0.
func (t *Transport) Send(msgs []*raftpb.Message) {
	for _, m := range msgs {
		to := m.GetTo()
		if to == 0 {
			continue
		}
		t.mu.RLock()
		p, g := t.peers[to], t.remotes[to]
		t.mu.RUnlock()
		switch {
		case p != nil:
			p.send(m)
		case g != nil:
			g.send(m)
		default:
			t.log.Debug("ignored message to unknown peer", "type", m.GetType().String(), "unknown-target-peer-id", FormatID(to))
		}
	}
}

// AddPeer starts the streams, pipeline and prober for member id at urls.
// Adding a known peer does nothing.
func (t *Transport) AddPeer(id uint64, urls []string) error {
	us, err := parseURLs(urls)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return ErrStopped
	}
	if _, ok := t.peers[id]; ok {
		return nil
	}
	if g, ok := t.remotes[id]; ok {
		g.stop() // a full peer replaces the catch-up pipeline
		delete(t.remotes, id)
	}
	t.peers[id] = startPeer(t, id, us)
	t.log.Info("added remote peer", "remote-peer-id", FormatID(id), "remote-peer-urls", urls)
	return nil
}

// AddRemote adds a pipeline-only route to a member that is not (yet) a
// peer: how a newly joined member reaches the cluster before it knows the
// membership. Known peers and remotes are left alone.
func (t *Transport) AddRemote(id uint64, urls []string) error {
	us, err := parseURLs(urls)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.peers[id] != nil || t.remotes[id] != nil || id == t.cfg.ID {
		return nil
	}
	t.remotes[id] = startRemote(t, id, us)
	t.log.Info("added new remote peer", "remote-peer-id", FormatID(id), "remote-peer-urls", urls)
	return nil
}

// RemovePeer stops and forgets member id.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	if p == nil {
		t.log.Warn("skipped removing already removed peer", "removed-remote-peer-id", FormatID(id))
		return
	}
	p.stop()
	t.log.Info("removed remote peer", "removed-remote-peer-id", FormatID(id))
}

// UpdatePeer replaces member id's URLs; new connections use them.
func (t *Transport) UpdatePeer(id uint64, urls []string) error {
	us, err := parseURLs(urls)
	if err != nil {
		return err
	}
	t.mu.RLock()
	p := t.peers[id]
	t.mu.RUnlock()
	if p == nil {
		return fmt.Errorf("%w: %s", ErrPeerNotFound, FormatID(id))
	}
	p.picker.update(us)
	t.log.Info("updated remote peer", "updated-remote-peer-id", FormatID(id), "updated-remote-peer-urls", urls)
	return nil
}

// ActiveSince is when the link to member id last became active, or the
// zero time while it is inactive or unknown.
func (t *Transport) ActiveSince(id uint64) time.Time {
	p := t.peer(id)
	if p == nil {
		return time.Time{}
	}
	_, since, _ := p.status.snapshot()
	return since
}

// ActivePeers counts peers whose link is active.
func (t *Transport) ActivePeers() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := 0
	for _, p := range t.peers {
		if p.status.isActive() {
			n++
		}
	}
	return n
}

// Stop closes every connection and stops every goroutine. Raft's Report
// methods must return once raft has stopped, as Stop waits for the report
// in progress.
func (t *Transport) Stop() {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return
	}
	t.stopped = true
	peers, remotes := t.peers, t.remotes
	t.peers, t.remotes = map[uint64]*peer{}, map[uint64]*remote{}
	t.mu.Unlock()
	for _, p := range peers {
		p.stop()
	}
	for _, g := range remotes {
		g.stop()
	}
	t.streamRT.CloseIdleConnections()
	t.pipelineRT.CloseIdleConnections()
	t.rep.close()
}

func (t *Transport) peer(id uint64) *peer {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.peers[id]
}

// addRemoteFromHeader adds a remote for a sender we do not know, from the
// URLs it advertised (X-PeerURLs), as etcd does for every request.
func (t *Transport) addRemoteFromHeader(h http.Header) {
	from, err := ParseID(h.Get(hdrFrom))
	if err != nil {
		return
	}
	if urls := h.Get(hdrPeerURLs); urls != "" {
		if err := t.AddRemote(from, strings.Split(urls, ",")); err != nil {
			t.log.Debug("ignored bad X-PeerURLs", "remote-peer-id", FormatID(from), "urls", urls, "error", err)
		}
	}
}

// unixHosts holds the host parts of unix(s):// peer URLs seen, which the
// dialer connects to as unix sockets instead of TCP addresses.
var unixHosts sync.Map

func parseURLs(urls []string) ([]url.URL, error) {
	if len(urls) == 0 {
		return nil, errors.New("transport: no peer URLs")
	}
	out := make([]url.URL, 0, len(urls))
	for _, s := range urls {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("transport: bad peer URL %q: %w", s, err)
		}
		switch u.Scheme {
		case "unix", "unixs":
			// etcd's unix-socket peer URLs: HTTP over the socket named by
			// the host part ("unix://etcd.unix:1" is the file etcd.unix:1).
			if u.Scheme == "unix" {
				u.Scheme = "http"
			} else {
				u.Scheme = "https"
			}
			unixHosts.Store(u.Host, true)
		case "http", "https":
		default:
			u.Host = ""
		}
		if u.Host == "" {
			return nil, fmt.Errorf("transport: bad peer URL %q: want http(s)://host:port or unix(s)://path", s)
		}
		u.Path = ""
		out = append(out, *u)
	}
	return out, nil
}
