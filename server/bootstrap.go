package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/membershippb"
	etcdraft "go.etcd.io/raft/v3"

	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/raft/transport"
	"github.com/strata-db/strata/version"
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
	switch {
	case wal.Exist(nil, cfg.WALDir()):
		if s.id, s.cluster, err = raft.ReadIDs(cfg.WALDir()); err != nil {
			return err
		}
	case !cfg.IsNewCluster():
		// Joining: the running cluster says who is who. (A membership
		// persisted without a WAL is from a start that stopped before
		// creating the WAL; it is asked again.)
		s.members = membership.NewSet()
		if err := s.joinIDs(initial); err != nil {
			return err
		}
		persisted = false
	default:
		if cfg.DiscoverySRV != "" && cfg.InitialCluster == "" {
			cluster, err := s.srvInitialCluster()
			if err != nil {
				return err
			}
			cfg.InitialCluster = cluster
			if initial, err = cfg.InitialClusterMap(); err != nil {
				return err
			}
		}
		if len(cfg.Discovery.Endpoints) > 0 {
			// v3 discovery: the token is the cluster token, and the
			// registry decides the initial cluster (etcd's
			// PeerURLsMapAndToken and bootstrapNewClusterNoWAL).
			cfg.InitialClusterToken = cfg.Discovery.Token
			cluster, err := s.discoverInitialCluster(membership.MemberID(cfg.AdvertisePeerURLs, cfg.InitialClusterToken))
			if err != nil {
				return fmt.Errorf("failed to join discovery cluster (%w)", err)
			}
			if err := checkDiscoveredCluster(cluster); err != nil {
				return err
			}
			cfg.InitialCluster = cluster
			if initial, err = cfg.InitialClusterMap(); err != nil {
				return err
			}
		}
		self, ok := initial[cfg.Name]
		if !ok {
			return fmt.Errorf("couldn't find local name %q in the initial cluster configuration", cfg.Name)
		}
		var ids []uint64
		for name, urls := range initial {
			m := &Member{ID: membership.MemberID(urls, cfg.InitialClusterToken), Name: name, PeerURLs: membership.URLStrings(urls)}
			if !persisted {
				s.members.Add(m)
			}
			ids = append(ids, m.ID)
		}
		s.id = membership.MemberID(self, cfg.InitialClusterToken)
		s.cluster = membership.ClusterID(ids)
		if len(initial) > 1 && s.memberBootstrapped(initial) {
			return fmt.Errorf("member %s has already been bootstrapped", transport.FormatID(s.id))
		}
	}
	if s.members.Get(s.id) == nil && !persisted {
		s.members.Add(&Member{ID: s.id, Name: cfg.Name, PeerURLs: membership.URLStrings(cfg.AdvertisePeerURLs)})
	}
	if !persisted {
		// The initial membership, at index 0: every member of a new
		// cluster writes the same records, derived from the same flags; a
		// joining member writes the running cluster's.
		w := s.be.BeginWrite()
		s.members.Persist(w)
		w.End(0, 0)
	}
	return nil
}

// bootstrapPeers are raft's initial voters for a new cluster, each with
// its member record as the conf change's context (as etcd writes them, so
// a member that later joins learns the initial members from the log);
// none for a member that joins a running cluster or restarts.
func (s *Server) bootstrapPeers() []etcdraft.Peer {
	if !s.cfg.IsNewCluster() {
		return nil
	}
	var peers []etcdraft.Peer
	for _, m := range s.members.List() {
		peers = append(peers, etcdraft.Peer{ID: m.ID, Context: m.JSON()})
	}
	return peers
}

// joinIDs takes this member's id, the cluster id and the membership from
// the running cluster it joins (--initial-cluster-state existing), as
// etcd's bootstrapExistingClusterNoWAL does: --initial-cluster must list
// exactly the running cluster's members, each matched by its peer URLs,
// and this member must have been added (member add) under its own peer
// URLs. The membership learned here is the one the transport dials
// first; the leader's log (or snapshot) then brings every change since.
func (s *Server) joinIDs(initial map[string][]url.URL) error {
	var others []string
	for name, us := range initial {
		if name != s.cfg.Name {
			others = append(others, membership.URLStrings(us)...)
		}
	}
	sort.Strings(others)
	cid, remote, err := s.remoteMembers(others, 10*time.Second)
	if err != nil {
		return fmt.Errorf("cannot fetch cluster info from peer urls: %w", err)
	}
	if err := assignIDs(initial, remote); err != nil {
		var desc []string
		for _, m := range remote {
			desc = append(desc, fmt.Sprintf("{ID:%s Name:%s PeerURLs:%v ClientURLs:%v IsLearner:%v}",
				transport.FormatID(m.ID), m.Name, m.PeerURLs, m.ClientURLs, m.IsLearner))
		}
		return fmt.Errorf("error validating peerURLs {ClusterID:%s Members:[%s] RemovedMemberIDs:[]}: %w",
			transport.FormatID(cid), strings.Join(desc, " "), err)
	}
	self := membership.URLStrings(initial[s.cfg.Name])
	sort.Strings(self)
	for _, m := range remote {
		if slices.Equal(sortedCopy(m.PeerURLs), self) {
			s.id = m.ID
		}
	}
	if s.id == 0 {
		return fmt.Errorf("the running cluster has no member with this member's peer URLs %v: add it first (etcdctl member add %s --peer-urls=%s)",
			self, s.cfg.Name, strings.Join(self, ","))
	}
	if err := s.checkJoinVersions(remote); err != nil {
		return err
	}
	learners := 0
	for _, m := range remote {
		if m.IsLearner {
			learners++
		}
	}
	if learners > s.cfg.MaxLearners {
		return membership.ErrTooManyLearners
	}
	s.cluster = cid
	for _, m := range remote {
		s.members.Add(m)
	}
	return nil
}

// errIncompatibleCluster is etcd's refusal to join a cluster of another
// version.
var errIncompatibleCluster = errors.New("incompatible with current running cluster")

// checkJoinVersions is etcd's version check for a joining member
// (isCompatibleWithCluster): every other member that answers GET /version
// on its peer port must run a cluster version this member supports, from
// 3.0 to its own major.minor, or exactly the next minor when a downgrade
// is enabled (the first answer to GET /downgrade/enabled says); at least
// one must answer with a decided version. A member's answer is taken from
// the first of its peer URLs that gives one.
func (s *Server) checkJoinVersions(remote []*Member) error {
	cc, done, err := s.peerHTTPClient(s.requestTimeout())
	if err != nil {
		return err
	}
	defer done()
	get := func(m *Member, path string) ([]byte, bool) {
		for _, u := range m.PeerURLs {
			resp, err := cc.Get(u + path)
			if err != nil {
				s.lg.Warn("failed to reach the peer URL", "address", u+path, "remote-member-id", transport.FormatID(m.ID), "error", err)
				continue
			}
			b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				return b, true
			}
		}
		return nil, false
	}
	var others []*Member
	for _, m := range remote {
		if m.ID != s.id {
			others = append(others, m)
		}
	}
	curMajor, curMinor, _ := parseSemver(version.Cluster)
	lo, hi := [2]int64{3, 0}, [2]int64{curMajor, curMinor}
	for _, m := range others {
		if b, ok := get(m, "/downgrade/enabled"); ok {
			if strings.TrimSpace(string(b)) == "true" {
				lo, hi = [2]int64{curMajor, curMinor + 1}, [2]int64{curMajor, curMinor + 1}
			}
			break
		}
	}
	less := func(a, b [2]int64) bool { return a[0] < b[0] || a[0] == b[0] && a[1] < b[1] }
	ok := false
	for _, m := range others {
		b, answered := get(m, "/version")
		if !answered {
			continue
		}
		var v struct {
			Cluster string `json:"etcdcluster"`
		}
		if json.Unmarshal(b, &v) != nil {
			continue
		}
		major, minor, parsed := parseSemver(v.Cluster)
		if !parsed {
			continue // not_decided
		}
		cv := [2]int64{major, minor}
		switch {
		case less(cv, lo):
			s.lg.Warn("cluster version of remote member is not compatible; too low", "remote-member-id", transport.FormatID(m.ID),
				"remote-member-cluster-version", v.Cluster, "minimum-cluster-version-supported", fmt.Sprintf("%d.%d.0", lo[0], lo[1]))
			return errIncompatibleCluster
		case less(hi, cv):
			s.lg.Warn("cluster version of remote member is not compatible; too high", "remote-member-id", transport.FormatID(m.ID),
				"remote-member-cluster-version", v.Cluster, "maximum-cluster-version-supported", fmt.Sprintf("%d.%d.0", hi[0], hi[1]))
			return errIncompatibleCluster
		}
		ok = true
	}
	if !ok {
		return errIncompatibleCluster
	}
	return nil
}

// peerHTTPClient is a client for the other members' peer ports, with
// this member's peer TLS; done releases its connections.
func (s *Server) peerHTTPClient(timeout time.Duration) (*http.Client, func(), error) {
	clientTLS, err := s.cfg.PeerClientTLS()
	if err != nil {
		return nil, nil, err
	}
	rt := &http.Transport{TLSClientConfig: clientTLS}
	cc := &http.Client{Transport: rt, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return cc, rt.CloseIdleConnections, nil
}

// assignIDs checks that the initial cluster lists the same members as the
// running one (etcd's ValidateClusterAndAssignIDs): as many, and each
// running member's peer URLs are some listed member's.
func assignIDs(initial map[string][]url.URL, remote []*Member) error {
	if len(initial) != len(remote) {
		return errors.New("member count is unequal")
	}
	for _, m := range remote {
		want := sortedCopy(m.PeerURLs)
		found := false
		for _, us := range initial {
			got := membership.URLStrings(us)
			sort.Strings(got)
			if slices.Equal(got, want) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("PeerURLs: no match found for existing member (%s, %v), last resolver error (<nil>)", transport.FormatID(m.ID), m.PeerURLs)
		}
	}
	return nil
}

func sortedCopy(ss []string) []string {
	out := slices.Clone(ss)
	sort.Strings(out)
	return out
}

// remoteMembers asks the peer URLs in turn for the cluster's membership
// (GET /members, and the cluster id in its X-Etcd-Cluster-ID header), each
// within timeout; the first that answers decides.
func (s *Server) remoteMembers(urls []string, timeout time.Duration) (uint64, []*Member, error) {
	cc, done, err := s.peerHTTPClient(timeout)
	if err != nil {
		return 0, nil, err
	}
	defer done()
	for _, u := range urls {
		resp, err := cc.Get(u + "/members")
		if err != nil {
			s.lg.Debug("failed to get cluster response", "address", u+"/members", "error", err)
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			continue
		}
		ms, err := decodeMembers(b)
		if err != nil {
			continue
		}
		cid, err := strconv.ParseUint(resp.Header.Get("X-Etcd-Cluster-ID"), 16, 64)
		if err != nil {
			s.lg.Warn("failed to parse cluster ID", "address", u+"/members", "header", resp.Header.Get("X-Etcd-Cluster-ID"), "error", err)
			continue
		}
		return cid, ms, nil
	}
	return 0, nil, errors.New("could not retrieve cluster information from the given URLs")
}

// decodeMembers decodes a peer port's member list (etcd's
// membership.Member as JSON: /members, a promotion's answer).
func decodeMembers(b []byte) ([]*Member, error) { return membership.ParseJSONList(b) }

// memberBootstrapped asks the other members of the initial cluster for
// their membership (GET /members on the peer port, etcd's
// isMemberBootstrapped) and reports whether one of them lists this member
// with client URLs. Members that do not answer within a second count for
// nothing, as in etcd: at a first start the others are not up yet.
func (s *Server) memberBootstrapped(initial map[string][]url.URL) bool {
	var urls []string
	for name, us := range initial {
		if name == s.cfg.Name {
			continue
		}
		urls = append(urls, membership.URLStrings(us)...)
	}
	sort.Strings(urls)
	// The first member that answers decides, as in etcd.
	_, ms, err := s.remoteMembers(urls, time.Second)
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.ID == s.id {
			return len(m.ClientURLs) > 0
		}
	}
	return false
}

// publish proposes this member's name and client URLs through raft
// (ClusterMemberAttrSet) until one proposal is applied, or the member
// stops; false means it stopped first.
func (s *Server) publish() bool {
	urls := membership.URLStrings(s.cfg.AdvertiseClientURLs)
	// Each attempt waits an election timeout or two, not a whole request
	// timeout: a member that joins by a snapshot may get its own
	// publication inside that snapshot (the leader applied it before
	// cutting the image), and then its wait never ends. So after an
	// attempt that did not come back, the member looks at its membership
	// before proposing again (the proposal is idempotent).
	attempt := min(s.requestTimeout(), max(2*s.cfg.ElectionTimeout(), time.Second))
	for {
		// A new request each attempt: a proposed one is never changed
		// (proposeAs), and each proposal gets its own header.
		req := &pb.InternalRaftRequest{ClusterMemberAttrSet: &membershippb.ClusterMemberAttrSetRequest{
			Member_ID: s.id,
			MemberAttributes: &membershippb.Attributes{
				Name: s.cfg.Name, ClientUrls: membership.URLStrings(s.cfg.AdvertiseClientURLs),
			},
		}}
		ctx, cancel := context.WithTimeout(context.Background(), attempt)
		res, err := s.propose(ctx, req)
		cancel()
		if err == nil {
			err = res.err
		}
		if m := s.members.Get(s.id); err != nil && m != nil && m.Name == s.cfg.Name && slices.Equal(m.ClientURLs, urls) {
			err = nil // applied elsewhere: in a snapshot this member installed
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
