package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/membershippb"

	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/raft/transport"
	"github.com/strata-db/strata/wal"
)

// Static bootstrap, as etcd does it (etcdserver/bootstrap.go):
//
//   - a member with a WAL takes its member and cluster ids from the WAL
//     and its membership from the page store; --initial-cluster is
//     ignored;
//   - a new member of a new cluster (--initial-cluster-state new, no WAL)
//     derives every member's id from its peer URLs and
//     --initial-cluster-token, and the cluster id from the member ids
//     (membership.MemberID, ClusterID); config.Validate has already
//     refused a name missing from --initial-cluster and advertise URLs
//     that do not match it, with etcd's messages. It then asks the other
//     members' peer ports for /members, and refuses to start if one of
//     them knows this member as started (it has client URLs): the data
//     dir was lost, and bootstrapping again would make a second member
//     with the same id ("member <id> has already been bootstrapped").
//
// The members' names and client URLs are not written at bootstrap: each
// member publishes its own through raft once it has a leader
// (ClusterMemberAttrSet, publish below), and becomes ready only then, as
// etcd's member does.

// bootstrapIDs reads the member and cluster ids from an existing WAL, or
// derives them from the initial cluster for a new member.
func (s *Server) bootstrapIDs() error {
	cfg := s.cfg
	initial, err := cfg.InitialClusterMap()
	if err != nil {
		return err
	}
	s.members = membership.NewSet()
	persisted, err := s.members.Load(s.be.DB())
	if err != nil {
		return err
	}
	var ids []uint64
	for name, urls := range initial {
		m := &Member{ID: membership.MemberID(urls, cfg.InitialClusterToken), Name: name, PeerURLs: membership.URLStrings(urls)}
		if !persisted {
			s.members.Add(m)
		}
		ids = append(ids, m.ID)
	}
	if wal.Exist(nil, cfg.WALDir()) {
		if s.id, s.cluster, err = raft.ReadIDs(cfg.WALDir()); err != nil {
			return err
		}
	} else {
		self, ok := initial[cfg.Name]
		if !ok {
			return fmt.Errorf("couldn't find local name %q in the initial cluster configuration", cfg.Name)
		}
		s.id = membership.MemberID(self, cfg.InitialClusterToken)
		s.cluster = membership.ClusterID(ids)
		if cfg.IsNewCluster() && len(initial) > 1 && s.memberBootstrapped(initial) {
			return fmt.Errorf("member %s has already been bootstrapped", transport.FormatID(s.id))
		}
	}
	if s.members.Get(s.id) == nil {
		s.members.Add(&Member{ID: s.id, Name: cfg.Name, PeerURLs: membership.URLStrings(cfg.AdvertisePeerURLs)})
	}
	if !persisted {
		// The initial membership, at index 0: every member of a new
		// cluster writes the same records, derived from the same flags.
		w := s.be.BeginWrite()
		s.members.Persist(w)
		w.End(0, 0)
	}
	return nil
}

// memberBootstrapped asks the other members of the initial cluster for
// their membership (GET /members on the peer port, etcd's
// isMemberBootstrapped) and reports whether one of them lists this member
// with client URLs. Members that do not answer within a second count for
// nothing, as in etcd: at a first start the others are not up yet.
func (s *Server) memberBootstrapped(initial map[string][]url.URL) bool {
	clientTLS, err := s.cfg.PeerClientTLS()
	if err != nil {
		return false
	}
	rt := &http.Transport{TLSClientConfig: clientTLS}
	defer rt.CloseIdleConnections()
	cc := &http.Client{Transport: rt, Timeout: time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var urls []string
	for name, us := range initial {
		if name == s.cfg.Name {
			continue
		}
		urls = append(urls, membership.URLStrings(us)...)
	}
	sort.Strings(urls)
	for _, u := range urls {
		resp, err := cc.Get(u + "/members")
		if err != nil {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if err != nil {
			continue
		}
		var ms []struct {
			ID         uint64   `json:"id"`
			ClientURLs []string `json:"clientURLs"`
		}
		if json.Unmarshal(b, &ms) != nil || len(ms) == 0 {
			continue
		}
		// The first member that answers decides, as in etcd.
		for _, m := range ms {
			if m.ID == s.id {
				return len(m.ClientURLs) > 0
			}
		}
		return false
	}
	return false
}

// publish proposes this member's name and client URLs through raft
// (ClusterMemberAttrSet) until one proposal is applied, or the member
// stops; false means it stopped first.
func (s *Server) publish() bool {
	req := &pb.InternalRaftRequest{ClusterMemberAttrSet: &membershippb.ClusterMemberAttrSetRequest{
		Member_ID: s.id,
		MemberAttributes: &membershippb.Attributes{
			Name: s.cfg.Name, ClientUrls: membership.URLStrings(s.cfg.AdvertiseClientURLs),
		},
	}}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
		res, err := s.propose(ctx, req)
		cancel()
		if err == nil {
			err = res.err
		}
		if err == nil {
			s.lg.Info("published local member to cluster through raft", "local-member-id", transport.FormatID(s.id),
				"local-member-attributes", fmt.Sprintf("{Name:%s ClientURLs:%v}", s.cfg.Name, membership.URLStrings(s.cfg.AdvertiseClientURLs)),
				"cluster-id", transport.FormatID(s.cluster))
			return true
		}
		select {
		case <-s.stopping:
			return false
		case <-s.node.Done():
			return false
		default:
		}
		s.lg.Warn("failed to publish local member to cluster through raft; retrying",
			"local-member-id", transport.FormatID(s.id), "error", err)
		// A proposal dropped at once (no leader) must not spin: wait for
		// a leader change or an election timeout.
		select {
		case <-s.node.LeaderChanged():
		case <-time.After(s.cfg.ElectionTimeout()):
		case <-s.stopping:
			return false
		}
	}
}

// applyMemberAttrs applies a published ClusterMemberAttrSet.
func (s *Server) applyMemberAttrs(idx, term uint64, r *membershippb.ClusterMemberAttrSetRequest) {
	w := s.be.BeginWrite()
	s.members.SetAttributes(r.GetMember_ID(), r.GetMemberAttributes().GetName(), r.GetMemberAttributes().GetClientUrls(), w)
	w.End(idx, term)
}
