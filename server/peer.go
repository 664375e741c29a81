package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"google.golang.org/protobuf/proto"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/etcdsnap"
	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/raft/transport"
	"github.com/strata-db/strata/server/config"
)

// The peer side of the member: raft/transport on --listen-peer-urls,
// connected to the raft node both ways.
//
//   - out: raft's Ready messages go to Transport.Send; a MsgSnap and its
//     page-store image (raft.OutgoingSnapshot) are parked in outgoing
//     until the transport's snapshot sender opens them (Snapshots.Open).
//   - in: the transport hands received messages to Process, which steps
//     them into the node; a MsgSnap arrives after its image was written,
//     fsync'd and renamed to receivePath in the snapshot directory (the
//     transport does that), and is stepped with StepSnapshot, which owns
//     the file from then on.
//   - reports: the transport's unreachable and snapshot reports go to the
//     node (ReportUnreachable, ReportSnapshot).
//
// The peer port also serves /members, /version, and the lease forwarding
// endpoints (leasefwd.go) that a follower's keep-alives reach the leader
// through.

// peers owns the transport and the peer listeners.
type peers struct {
	s  *Server
	tr *transport.Transport
	// rt dials other members' peer ports for requests outside the
	// transport (lease forwarding, /members at bootstrap), with the peer
	// client TLS.
	rt *http.Transport

	// mu guards outgoing: at most one parked snapshot per follower (raft
	// has at most one in flight per follower). A payload the transport
	// never opened (it dropped the MsgSnap) is closed when the next one
	// for that follower replaces it, or at stop.
	mu       sync.Mutex
	outgoing map[uint64]raft.OutgoingSnapshot
	stopped  bool

	listeners []net.Listener
	srvs      []*http.Server
	// serving is set by serve, once the node exists.
	serving atomic.Bool
}

// newPeers creates the transport; start adds the peers and serves.
func newPeers(s *Server) (*peers, error) {
	cfg := s.cfg
	clientTLS, err := cfg.PeerClientTLS()
	if err != nil {
		return nil, fmt.Errorf("peer TLS: %w", err)
	}
	p := &peers{s: s, outgoing: map[uint64]raft.OutgoingSnapshot{}}
	// With the SetMemberLocalAddr gate every peer connection leaves from
	// the advertised host IP, the transport's and p.rt's alike.
	local := net.ParseIP(cfg.PeerLocalAddr())
	if local != nil {
		s.lg.Info("setting member local address", "LocalAddr", local.String())
	} else if cfg.FeatureEnabled(config.FeatureSetMemberLocalAddr) {
		s.lg.Warn("unable to set a member local address due to lack of suitable local addresses", "advertise-peer-urls", membership.URLStrings(cfg.AdvertisePeerURLs))
	}
	dial := time.Second + cfg.ElectionTimeout()
	p.tr, err = transport.New(transport.Config{
		ID: s.id, ClusterID: s.cluster,
		URLs:      membership.URLStrings(cfg.AdvertisePeerURLs),
		Raft:      peerRaft{p},
		Snapshots: peerSnapshots{p},
		ClientTLS: clientTLS,
		LocalAddr: local,
		Logger:    s.lg,
		// Received images become the page store: they are written on its
		// file system (tests inject faults there).
		FS: s.dbFS,
		// etcd dials a peer for up to 1 s plus the election timeout.
		DialTimeout: dial,
	})
	if err != nil {
		return nil, err
	}
	p.rt = &http.Transport{
		Proxy:               nil,
		DialContext:         transport.NewDialer(local, dial).DialContext,
		TLSClientConfig:     clientTLS,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     time.Minute,
	}
	return p, nil
}

// listenPeers binds every peer URL. The server does it first thing after
// taking the data dir's lock, as etcd binds its listeners before it
// opens the WAL and the backend: a taken port fails the start before the
// WAL is created, and a member that dials this one while it is still
// starting (probing its disk, opening its WAL) has its connection held
// in the listen backlog until serve, not refused. A refused dial backs
// off, and a TCP proxy in front of the port (etcd's e2e peer proxy) that
// cannot reach the port keeps the dialer's connection open without an
// answer until the read timeout.
func listenPeers(cfg *config.Config) (_ []net.Listener, err error) {
	var tlsCfg *tls.Config
	for _, u := range cfg.ListenPeerURLs {
		if u.Scheme == "https" && tlsCfg == nil {
			base, err := cfg.PeerTLS()
			if err != nil {
				return nil, fmt.Errorf("peer TLS: %w", err)
			}
			if base == nil {
				return nil, fmt.Errorf("listen on peer url %s: https needs --peer-cert-file and --peer-key-file, or --peer-auto-tls", u.String())
			}
			tlsCfg = transport.ServerTLS(base, cfg.PeerSecurity.SkipClientSANVerify)
		}
	}
	var ls []net.Listener
	defer func() {
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
		}
	}()
	for _, u := range cfg.ListenPeerURLs {
		l, err := listen(u)
		if err != nil {
			return nil, fmt.Errorf("listen on peer url %s: %w", u.String(), err)
		}
		if u.Scheme == "https" {
			l = tls.NewListener(l, tlsCfg)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// serve adds every other member as a peer and serves the peer port.
func (p *peers) serve() {
	s := p.s
	p.serving.Store(true)
	p.syncMembers()
	h := transport.NewPeerHandler(transport.PeerHandlerConfig{
		Transport: p.tr,
		Members:   s.members.List,
		Promote:   s.promoteFromPeer,
		Versions:  func() (string, string) { return s.versions.Cluster(), s.versions.Storage() },
		Extra: map[string]http.Handler{
			leasePath:            leaseHandler{s},
			leaseInternalPath:    leaseHandler{s},
			peerHashKVPath:       hashKVHandler{s},
			downgradeEnabledPath: downgradeEnabledHandler{s},
		},
	})
	for i, l := range p.listeners {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: log.New(peerServerLog{s}, "", 0)}
		p.srvs = append(p.srvs, srv)
		go srv.Serve(l)
		s.lg.Info("serving peer traffic", "address", s.cfg.ListenPeerURLs[i].String())
	}
}

// syncMembers makes the transport's peers the current members (but
// this one). Called by serve, and after each applied membership change
// or installed snapshot. Before serve it does nothing: raft.Start may
// apply conf changes (replaying the WAL) or finish an install before it
// returns the node, and a peer added then could deliver messages to a
// node the server does not have yet.
func (p *peers) syncMembers() {
	if !p.serving.Load() {
		return
	}
	s := p.s
	for _, m := range s.members.List() {
		if m.ID == s.id {
			continue
		}
		if err := p.tr.AddPeer(m.ID, m.PeerURLs); err != nil {
			s.lg.Warn("cannot add peer", "remote-peer-id", transport.FormatID(m.ID), "error", err)
			continue
		}
		if err := p.tr.UpdatePeer(m.ID, m.PeerURLs); err != nil {
			s.lg.Warn("cannot update peer", "remote-peer-id", transport.FormatID(m.ID), "error", err)
		}
	}
	for _, id := range s.members.Removed() {
		if _, ok := p.tr.PeerStatus(id); ok {
			p.tr.RemovePeer(id)
		}
	}
}

// stop stops the peer listeners and the transport. Called before the
// raft node stops, so nothing steps into a stopped node.
func (p *peers) stop() {
	// The transport first: it ends the streams, whose handlers would
	// otherwise hold the HTTP servers' shutdown until its deadline.
	p.tr.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, srv := range p.srvs {
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
	}
	p.closeListeners()
	p.rt.CloseIdleConnections()
	p.mu.Lock()
	p.stopped = true
	out := p.outgoing
	p.outgoing = map[uint64]raft.OutgoingSnapshot{}
	p.mu.Unlock()
	for _, o := range out {
		o.Payload.Close()
	}
}

func (p *peers) closeListeners() {
	for _, l := range p.listeners {
		l.Close()
	}
}

// Send is raft.Transport's: messages other than MsgSnap.
func (p *peers) Send(msgs []*raftpb.Message) { p.tr.Send(msgs) }

// SendSnapshot is raft.Transport's: the MsgSnap is parked with its payload
// and handed to the transport, whose snapshot sender takes the payload
// back through peerSnapshots.Open.
func (p *peers) SendSnapshot(o raft.OutgoingSnapshot) {
	to := o.Message.GetTo()
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		o.Payload.Close()
		p.s.node.ReportSnapshot(to, etcdraft.SnapshotFailure)
		return
	}
	old, had := p.outgoing[to]
	p.outgoing[to] = o
	p.mu.Unlock()
	if had {
		old.Payload.Close()
	}
	p.tr.Send([]*raftpb.Message{o.Message})
}

// peerRaft is the node as the transport sees it.
type peerRaft struct{ p *peers }

// textRemovedMember is etcd's refusal of a message from a removed member
// (403), which tells the sender it was removed.
const textRemovedMember = "cannot process message from removed member"

// textMismatchMember is etcd's refusal (403) of a message addressed to
// another member: the peer URL now belongs to a member with a new id.
const textMismatchMember = "cannot process message to mismatch member"

// refuse is etcd's gate before a message is stepped: a sender that was
// removed, or a message for another member, is refused with 403.
func (r peerRaft) refuse(m *raftpb.Message) error {
	s := r.p.s
	if s.members.IsRemoved(m.GetFrom()) {
		return &transport.RefusedError{Code: http.StatusForbidden, Message: textRemovedMember}
	}
	if m.GetTo() != s.id {
		s.lg.Warn("rejected Raft message to mismatch member", "local-member-id", transport.FormatID(s.id),
			"mismatch-member-id", transport.FormatID(m.GetTo()))
		return &transport.RefusedError{Code: http.StatusForbidden, Message: textMismatchMember}
	}
	return nil
}

func (r peerRaft) Process(ctx context.Context, m *raftpb.Message) error {
	s := r.p.s
	if err := r.refuse(m); err != nil {
		if m.GetType() == raftpb.MsgSnap {
			_ = os.Remove(receivePath(s.cfg.SnapDir(), m))
		}
		return err
	}
	if m.GetType() == raftpb.MsgSnap {
		s.lg.Info("received a snapshot from the leader; installing it", "from", transport.FormatID(m.GetFrom()),
			"index", m.GetSnapshot().GetMetadata().GetIndex())
		return s.node.StepSnapshot(ctx, m, receivePath(s.cfg.SnapDir(), m))
	}
	return s.node.Step(ctx, m)
}

// Offer is Process for a message a stream reader hands over directly
// (transport.Offerer): it never blocks, and leaves to the queue what raft
// cannot take at once.
func (r peerRaft) Offer(m *raftpb.Message) (bool, error) {
	s := r.p.s
	if m.GetType() == raftpb.MsgSnap {
		return false, nil
	}
	if err := r.refuse(m); err != nil {
		return false, err
	}
	return s.node.TryStep(m), nil
}

func (r peerRaft) IsIDRemoved(id uint64) bool { return r.p.s.members.IsRemoved(id) }

func (r peerRaft) ReportUnreachable(id uint64) { r.p.s.node.ReportUnreachable(id) }

func (r peerRaft) ReportSnapshot(id uint64, st etcdraft.SnapshotStatus) {
	r.p.s.node.ReportSnapshot(id, st)
}

// peerSnapshots gives the transport the images that follow MsgSnaps.
type peerSnapshots struct{ p *peers }

// errEtcdPeerSnapshot: the image cannot be read as etcd's format.
var errEtcdPeerSnapshot = errors.New("server: the follower is not a Strata member, and this image cannot be written in etcd's format")

func (ps peerSnapshots) Open(m *raftpb.Message, peer transport.PeerInfo) (io.ReadCloser, int64, error) {
	p := ps.p
	p.mu.Lock()
	o, ok := p.outgoing[m.GetTo()]
	if ok && o.Message == m {
		delete(p.outgoing, m.GetTo())
	} else {
		ok = false
	}
	p.mu.Unlock()
	if !ok {
		return nil, 0, fmt.Errorf("server: no image for the snapshot at %d to %s", m.GetSnapshot().GetMetadata().GetIndex(), transport.FormatID(m.GetTo()))
	}
	if !peer.Strata {
		return ps.etcdPayload(o)
	}
	return o.Payload, o.Size, nil
}

// etcdPayload is the image of o in etcd's format, for an etcd follower:
// the bbolt file etcd's own leader would send (no trailer), planned and
// written from the same read view as the page-store image, so it holds
// exactly the MsgSnap's index (etcd refuses, fatally, a database whose
// consistent index differs). The view stays pinned until the payload is
// closed.
func (ps peerSnapshots) etcdPayload(o raft.OutgoingSnapshot) (io.ReadCloser, int64, error) {
	img, ok := o.Image.(*mvcc.Image)
	if !ok {
		o.Payload.Close()
		return nil, 0, errEtcdPeerSnapshot
	}
	ctx, cancel := context.WithCancel(context.Background())
	var plan *etcdsnap.Etcd
	pr, pw := io.Pipe()
	planned := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// One View for the plan and the write: both read the buckets.
		err := img.View(func(tx *pagestore.Tx) error {
			var err error
			plan, err = etcdsnap.PlanEtcd(ctx, tx, etcdsnap.EtcdOptions{})
			planned <- err
			if err != nil {
				return err
			}
			_, err = plan.WriteFile(ctx, pw)
			return err
		})
		pw.CloseWithError(err)
	}()
	if err := <-planned; err != nil {
		cancel()
		<-done
		o.Payload.Close()
		return nil, 0, fmt.Errorf("server: the snapshot at %d in etcd's format: %w", img.Index(), err)
	}
	if plan.RaftIndex != o.Message.GetSnapshot().GetMetadata().GetIndex() {
		cancel()
		pr.Close()
		<-done
		o.Payload.Close()
		return nil, 0, fmt.Errorf("server: the image holds index %d, the snapshot is at %d", plan.RaftIndex, o.Message.GetSnapshot().GetMetadata().GetIndex())
	}
	// The message goes out after Open returns: it carries the
	// membership as etcd's v2 store, which etcd 3.6 restores.
	// The snapshot is copied: raft's storage may share it.
	if snap := o.Message.GetSnapshot(); snap != nil {
		snap = proto.CloneOf(snap)
		snap.Data = plan.V2Store
		o.Message.Snapshot = snap
	}
	ps.p.s.lg.Info("sending a snapshot in etcd's format to an etcd follower", "to", transport.FormatID(o.Message.GetTo()),
		"index", plan.RaftIndex, "bytes", plan.Size())
	return &etcdImageReader{pr: pr, cancel: cancel, done: done, release: o.Payload}, plan.Size(), nil
}

// etcdImageReader streams an etcd-format image; Close stops the writer
// and releases the page-store image it reads.
type etcdImageReader struct {
	pr      *io.PipeReader
	cancel  context.CancelFunc
	done    chan struct{}
	release io.Closer
	once    sync.Once
}

func (r *etcdImageReader) Read(p []byte) (int, error) { return r.pr.Read(p) }

func (r *etcdImageReader) Close() error {
	r.once.Do(func() {
		r.cancel()
		r.pr.Close()
		<-r.done
		r.release.Close()
	})
	return nil
}

func (ps peerSnapshots) ReceivePath(m *raftpb.Message) (string, error) {
	return receivePath(ps.p.s.cfg.SnapDir(), m), nil
}

// receivePath is where the image received with MsgSnap m is stored until
// raft installs it (raft.StepSnapshot renames it to its final name). The
// name ends in raft.ImagePartSuffix, so Start removes one a crash left.
func receivePath(snapDir string, m *raftpb.Message) string {
	return filepath.Join(snapDir, fmt.Sprintf("recv-%016x-%016x%s", m.GetFrom(), m.GetSnapshot().GetMetadata().GetIndex(), raft.ImagePartSuffix))
}

// removeStaleSnapshotTemps removes the temporary files of transfers a
// crash cut short (the transport writes "<receivePath>.tmp-<random>").
func removeStaleSnapshotTemps(snapDir string) {
	ents, err := os.ReadDir(snapDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "recv-") && strings.Contains(e.Name(), raft.ImagePartSuffix+".tmp-") {
			_ = os.Remove(filepath.Join(snapDir, e.Name()))
		}
	}
}

// peerServerLog receives the peer HTTP servers' own messages. net/http
// reports a failed TLS handshake only there ("http: TLS handshake error
// from ADDR: ERR"); it is logged as etcd logs a refused peer, so a member
// with a wrong certificate shows up with its address and the reason.
// Handshakes the client abandons (EOF: probes) stay at debug, as in etcd.
type peerServerLog struct{ s *Server }

func (p peerServerLog) Write(b []byte) (int, error) {
	msg := strings.TrimSpace(string(b))
	if rest, ok := strings.CutPrefix(msg, "http: TLS handshake error from "); ok {
		addr, cause, _ := strings.Cut(rest, ": ")
		level := slog.LevelWarn
		if strings.HasSuffix(cause, "EOF") {
			level = slog.LevelDebug
		}
		p.s.lg.Log(context.Background(), level, "rejected connection on peer endpoint", "remote-addr", addr, "error", cause)
		return len(b), nil
	}
	p.s.lg.Debug("peer http server", "message", msg)
	return len(b), nil
}

// forwardPromote asks the leader, at its peer URL u, to promote learner
// id (etcd's promoteMemberHTTP), passing the caller's token on.
func (p *peers) forwardPromote(ctx context.Context, u string, id uint64, token string) ([]*Member, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u+"/members/promote/"+strconv.FormatUint(id, 10), nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	resp, err := (&http.Client{Transport: p.rt}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusRequestTimeout:
		return nil, errTimeout
	case http.StatusPreconditionFailed:
		if strings.Contains(string(b), transport.ErrLearnerNotReady.Error()) {
			return nil, errPromoteNotReady
		}
		if strings.Contains(string(b), transport.ErrMemberNotLearner.Error()) {
			return nil, errPromoteNotLearner
		}
		return nil, fmt.Errorf("leader refused the promotion: %s", strings.TrimSpace(string(b)))
	case http.StatusNotFound:
		return nil, errPromoteNotFound
	default:
		return nil, fmt.Errorf("leader answered the promotion with %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	ms, err := decodeMembers(b)
	if err != nil {
		return nil, fmt.Errorf("undecodable promotion answer from the leader: %w", err)
	}
	return ms, nil
}
