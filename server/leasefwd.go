package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/lease"
)

// Lease forwarding: keep-alives and time-to-live queries are answered by
// the leader's lessor, whose clocks are the only ones that run. A follower
// forwards them over the peer port as etcd does, so an etcd leader can
// answer a Strata follower and the other way round:
//
//	POST /leases           body LeaseKeepAliveRequest, answer LeaseKeepAliveResponse
//	POST /leases/internal  body LeaseInternalRequest,  answer LeaseInternalResponse
//
// (protobuf bodies, Content-Type application/protobuf). The leader first
// waits, up to a second, until it has applied what it committed (408 on
// timeout), so a lease granted or revoked just before is seen. 404 means
// the lease does not exist; any other refusal is 400 (keep-alive) or 500
// (time-to-live), and the follower tries again until its request times
// out. The texts are etcd's.
const (
	leasePath         = "/leases"
	leaseInternalPath = "/leases/internal"

	// Wire texts (etcd's): the follower matches the status, and an
	// operator reading a log matches the text.
	textLeaseNotFound   = "lease not found"
	textNotPrimary      = "not a primary lessor"
	textLeaseHTTPTimout = "waiting for node to catch up its applied index has timed out"

	// maxLeaseRequest bounds a forwarded request's body (it carries an id
	// and a flag); maxLeaseResponse a response's (a lease's keys).
	maxLeaseRequest  = 64 << 10
	maxLeaseResponse = 100 << 20
)

// errLeaseForward: the leader answered a forwarded lease request with a
// status other than success or "not found"; the follower retries.
var errLeaseForward = errors.New("server: lease forwarding")

// leaseInternal is etcd's leasepb.LeaseInternalRequest and
// LeaseInternalResponse: one embedded message in field 1 (wire format).
func marshalLeaseInternal(m proto.Message) ([]byte, error) {
	inner, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(b, inner), nil
}

func unmarshalLeaseInternal(b []byte, m proto.Message) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			if err := proto.Unmarshal(v, m); err != nil {
				return err
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}

// leaseHandler serves /leases and /leases/internal on the leader.
type leaseHandler struct{ s *Server }

func (h leaseHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	defer r.Body.Close()
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxLeaseRequest))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "error reading body", http.StatusBadRequest)
		return
	}
	s := h.s
	var out []byte
	switch r.URL.Path {
	case leasePath:
		var req pb.LeaseKeepAliveRequest
		if proto.Unmarshal(b, &req) != nil {
			http.Error(w, "error unmarshalling request", http.StatusBadRequest)
			return
		}
		if !h.waitApplied(r.Context()) {
			http.Error(w, textLeaseHTTPTimout, http.StatusRequestTimeout)
			return
		}
		ttl, err := s.lessor.Renew(r.Context(), req.ID)
		switch {
		case errors.Is(err, lease.ErrLeaseNotFound):
			http.Error(w, textLeaseNotFound, http.StatusNotFound)
			return
		case errors.Is(err, lease.ErrNotPrimary):
			http.Error(w, textNotPrimary, http.StatusBadRequest)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, _ = proto.Marshal(&pb.LeaseKeepAliveResponse{ID: req.ID, TTL: ttl})
	case leaseInternalPath:
		var req pb.LeaseTimeToLiveRequest
		if unmarshalLeaseInternal(b, &req) != nil {
			http.Error(w, "error unmarshalling request", http.StatusBadRequest)
			return
		}
		if !h.waitApplied(r.Context()) {
			http.Error(w, textLeaseHTTPTimout, http.StatusRequestTimeout)
			return
		}
		info, err := s.lessor.TimeToLive(req.ID, req.Keys)
		switch {
		case errors.Is(err, lease.ErrLeaseNotFound):
			http.Error(w, textLeaseNotFound, http.StatusNotFound)
			return
		case errors.Is(err, lease.ErrNotPrimary):
			// Demoted meanwhile: a remaining TTL from a lessor that
			// is not the primary would be wrong.
			http.Error(w, textNotPrimary, http.StatusInternalServerError)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp := &pb.LeaseTimeToLiveResponse{Header: &pb.ResponseHeader{}, ID: req.ID,
			TTL: info.TTLSeconds(), GrantedTTL: info.TTL}
		if req.Keys {
			resp.Keys = info.Keys
		}
		out, err = marshalLeaseInternal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	default:
		http.Error(w, fmt.Sprintf("unknown request path %q", r.URL.Path), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/protobuf")
	_, _ = w.Write(out)
}

// waitApplied waits, up to a second, until this member has applied what
// it committed.
func (h leaseHandler) waitApplied(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return h.s.node.WaitApplied(ctx, h.s.node.Status().Committed) == nil
}

// postLease sends one forwarded lease request to url and returns the
// answer's body; lease.ErrLeaseNotFound for 404.
func (p *peers) postLease(ctx context.Context, url string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/protobuf")
	resp, err := p.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxLeaseResponse+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxLeaseResponse {
		return nil, fmt.Errorf("%w: answer from %s exceeds %d bytes", errLeaseForward, url, maxLeaseResponse)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return b, nil
	case http.StatusNotFound:
		return nil, lease.ErrLeaseNotFound
	}
	return nil, fmt.Errorf("%w: %s answered %d: %s", errLeaseForward, url, resp.StatusCode, bytes.TrimSpace(b))
}

// forwardToLeader calls try with each of the leader's peer URLs until one
// answers (or says the lease does not exist), waiting for a leader when
// there is none, until the request times out: etcd's errors then are
// "request timed out" or, with no leader at all, "no leader".
func (s *Server) forwardToLeader(ctx context.Context, try func(ctx context.Context, peerURL string) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.requestTimeout())
	defer cancel()
	for ctx.Err() == nil {
		leader, err := s.waitLeader(ctx)
		if err != nil {
			return err
		}
		for _, u := range leader.PeerURLs {
			err := try(ctx, u)
			if err == nil || errors.Is(err, lease.ErrLeaseNotFound) {
				return err
			}
			s.lg.Debug("forwarding a lease request to the leader failed", "leader-url", u, "error", err)
		}
		// Do not spin against a leader that refuses (it is not yet the
		// primary lessor, say) or cannot be reached.
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		case <-s.stopping:
			return errStopped
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return errTimeout
	}
	return errCanceled
}

// waitLeader returns the leader's member record, waiting through an
// election; no leader before ctx ends is etcd's "no leader".
func (s *Server) waitLeader(ctx context.Context) (*Member, error) {
	for {
		changed := s.node.LeaderChanged()
		if id := s.node.Status().Leader; id != 0 {
			if m := s.members.Get(id); m != nil && len(m.PeerURLs) > 0 {
				return m, nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, errNoLeader
		case <-s.stopping:
			return nil, errStopped
		}
	}
}

// forwardRenew renews lease id on the leader.
func (s *Server) forwardRenew(ctx context.Context, id int64) (int64, error) {
	body, err := proto.Marshal(&pb.LeaseKeepAliveRequest{ID: id})
	if err != nil {
		return 0, err
	}
	var ttl int64
	err = s.forwardToLeader(ctx, func(ctx context.Context, u string) error {
		b, err := s.peers.postLease(ctx, u+leasePath, body)
		if err != nil {
			return err
		}
		var resp pb.LeaseKeepAliveResponse
		if err := proto.Unmarshal(b, &resp); err != nil {
			return fmt.Errorf("%w: %v", errLeaseForward, err)
		}
		if resp.ID != id {
			return fmt.Errorf("%w: renew id mismatch", errLeaseForward)
		}
		ttl = resp.TTL
		return nil
	})
	return ttl, err
}

// forwardTimeToLive asks the leader for lease r.ID's remaining TTL.
func (s *Server) forwardTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	body, err := marshalLeaseInternal(&pb.LeaseTimeToLiveRequest{ID: r.ID, Keys: r.Keys})
	if err != nil {
		return nil, err
	}
	var out *pb.LeaseTimeToLiveResponse
	err = s.forwardToLeader(ctx, func(ctx context.Context, u string) error {
		b, err := s.peers.postLease(ctx, u+leaseInternalPath, body)
		if err != nil {
			return err
		}
		resp := &pb.LeaseTimeToLiveResponse{}
		if err := unmarshalLeaseInternal(b, resp); err != nil {
			return fmt.Errorf("%w: %v", errLeaseForward, err)
		}
		if resp.ID != r.ID {
			return fmt.Errorf("%w: TTL id mismatch", errLeaseForward)
		}
		out = resp
		return nil
	})
	return out, err
}
