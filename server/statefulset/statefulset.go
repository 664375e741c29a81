// Package statefulset runs a member as a pod of a Kubernetes StatefulSet
// and keeps the cluster's membership equal to the StatefulSet's pods, as
// an etcd operator does: scaling up adds the new pod's member through the
// Cluster API (as a learner, promoted once it has caught up), and scaling
// down removes the member of each pod that goes away, so that no dead
// member is left behind to weigh on the quorum.
//
// Two entry points, both given the member's own flags (etcd's spelling):
//
//   - Prepare, before the member starts ('strata statefulset start'),
//     decides how it starts:
//   - its data directory holds a member that the running cluster still
//     lists: it restarts as it is;
//   - its data directory holds a member the cluster has removed (a pod
//     that was scaled away and whose volume was kept): the data directory
//     is moved aside and the pod joins as a new member;
//   - no data, and no other member of --initial-cluster answers: the
//     cluster is being created; it bootstraps with --initial-cluster;
//   - no data, and the cluster lists this member under the id a
//     bootstrap from --initial-cluster gives it: a member of the first
//     cluster starting late; it bootstraps too, as etcd's parallel start
//     does;
//   - no data, and the cluster lists this member as started (its volume
//     was lost) or does not list it at all (a scale-up): any stale record
//     is removed, the member is added as a learner (member add
//     --learner), and it joins with --initial-cluster-state existing;
//     once it serves, it is promoted as soon as the leader finds it in
//     sync.
//   - Leave, the pod's preStop hook ('strata statefulset stop'), reads the
//     StatefulSet's desired replicas from the Kubernetes API (the pod's
//     service account): when the pod's ordinal is at or above it, the pod
//     is being scaled away and its member is removed (member remove);
//     otherwise the pod is only restarting and nothing changes. A missing
//     StatefulSet (the release is being deleted) removes nothing.
//
// The other members are found at the peer URLs of --initial-cluster (GET
// /members, as etcd's join does); membership changes go to their client
// URLs over the Cluster API.
package statefulset

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/server/config"
)

// Ordinal is the StatefulSet ordinal at the end of a pod name
// ("strata-2" -> 2), and the StatefulSet's name before it.
func Ordinal(name string) (set string, ord int, err error) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", 0, fmt.Errorf("member name %q is not a StatefulSet pod name (<statefulset>-<ordinal>)", name)
	}
	ord, err = strconv.Atoi(name[i+1:])
	if err != nil || ord < 0 {
		return "", 0, fmt.Errorf("member name %q is not a StatefulSet pod name (<statefulset>-<ordinal>)", name)
	}
	return name[:i], ord, nil
}

// Decision is how Prepare starts the member.
type Decision struct {
	// State and InitialCluster replace --initial-cluster-state and
	// --initial-cluster.
	State, InitialCluster string
	// Why says which case applied, for the log.
	Why string
	// MovedDataDir is where a removed member's data directory went.
	MovedDataDir string
	// Learner is set when the member joins as a learner to be promoted.
	Learner bool
	// ID is the member's id when it was added here.
	ID uint64
}

// Prepare decides how the member of cfg starts and applies the decision
// to cfg (state, initial cluster). It adds the member to the running
// cluster when it has to. initialized says whether the data directory
// holds a member.
func Prepare(ctx context.Context, cfg *config.Config, initialized bool, lg *slog.Logger) (Decision, error) {
	if _, _, err := Ordinal(cfg.Name); err != nil {
		return Decision{}, err
	}
	initial, err := cfg.InitialClusterMap()
	if err != nil {
		return Decision{}, err
	}
	self := sortedStrings(membership.URLStrings(initial[cfg.Name]))
	if len(self) == 0 {
		return Decision{}, fmt.Errorf("--initial-cluster has no entry for this member (%s)", cfg.Name)
	}
	c, err := newCluster(cfg, initial)
	if err != nil {
		return Decision{}, err
	}
	defer c.close()
	members, err := c.members(ctx)
	if err != nil && !errors.Is(err, errNoPeer) {
		return Decision{}, err
	}
	d := Decision{State: config.ClusterStateNew, InitialCluster: cfg.InitialCluster}
	listed := find(members, self)
	switch {
	case initialized && (members == nil || listed != nil):
		d.Why = "the data directory holds a member of the cluster; restarting it"
		return d, nil
	case initialized:
		moved := fmt.Sprintf("%s.removed-%s", filepath.Clean(cfg.DataDir), time.Now().UTC().Format("20060102T150405Z"))
		if err := os.Rename(cfg.DataDir, moved); err != nil {
			return Decision{}, fmt.Errorf("this member was removed from the cluster; moving its data directory aside: %w", err)
		}
		d.MovedDataDir = moved
		lg.Warn("the cluster no longer lists this member (it was scaled away); its data directory was moved aside and it joins again as a new member",
			"data-dir", cfg.DataDir, "moved-to", moved)
	case members == nil:
		d.Why = "no other member answers; bootstrapping the cluster from --initial-cluster"
		return d, nil
	case listed != nil && listed.ID == membership.MemberID(urls(self), cfg.InitialClusterToken) &&
		(listed.Name == "" || len(listed.ClientURLs) == 0):
		// This member's bootstrap record, never started: a member that
		// did start has published its client URLs. The bootstrap names
		// every member from --initial-cluster (as etcd does), so the
		// name alone does not tell.
		d.Why = "the cluster lists this member from its bootstrap; joining the bootstrap"
		return d, nil
	}
	if listed != nil {
		// Started once, but its data is gone (or was moved aside above):
		// the old record can never come back; replace it.
		lg.Warn("removing this member's stale record before adding it again", "member-id", fmt.Sprintf("%x", listed.ID))
		if err := c.remove(ctx, listed.ID); err != nil {
			return Decision{}, err
		}
	}
	id, after, err := c.addLearner(ctx, self)
	if err != nil {
		return Decision{}, err
	}
	d.State, d.Learner, d.ID = config.ClusterStateExisting, true, id
	d.InitialCluster = initialCluster(after, id, cfg.Name)
	switch {
	case d.MovedDataDir != "":
		d.Why = "removed from the cluster earlier; added again as a learner"
	case listed != nil:
		d.Why = "its data was lost; added again as a learner"
	default:
		d.Why = "added to the running cluster as a learner (scale-up)"
	}
	return d, nil
}

// Apply writes d into cfg.
func (d Decision) Apply(cfg *config.Config) {
	cfg.InitialClusterState, cfg.InitialCluster = d.State, d.InitialCluster
}

// initialCluster is --initial-cluster for joining: every member with its
// peer URLs, this one under its own name (as etcdctl member add prints
// it). Members added but not started yet have no name; they are listed
// under their id, which no pod name can take.
func initialCluster(ms []*membership.Member, self uint64, name string) string {
	var parts []string
	for _, m := range ms {
		n := m.Name
		if m.ID == self {
			n = name
		} else if n == "" {
			n = fmt.Sprintf("unstarted-%x", m.ID)
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	return strings.Join(parts, ",")
}

// PromoteWhenReady promotes the learner id until the cluster accepts it,
// waiting every interval while the leader says it is not in sync yet. It
// returns when the member is a voter, or when ctx ends.
func PromoteWhenReady(ctx context.Context, cfg *config.Config, id uint64, interval time.Duration, lg *slog.Logger) error {
	initial, err := cfg.InitialClusterMap()
	if err != nil {
		return err
	}
	c, err := newCluster(cfg, initial)
	if err != nil {
		return err
	}
	defer c.close()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := c.promote(ctx, id)
		if err == nil || rpctypes.ErrorDesc(err) == rpctypes.ErrMemberNotLearner.Error() {
			lg.Info("promoted this member from learner to voter", "member-id", fmt.Sprintf("%x", id))
			return nil
		}
		lg.Debug("learner not promoted yet", "member-id", fmt.Sprintf("%x", id), "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Learner reports whether the running cluster lists the member of cfg as
// a learner, and its id: a pod that restarts before its promotion
// finishes it.
func Learner(ctx context.Context, cfg *config.Config) (uint64, bool, error) {
	initial, err := cfg.InitialClusterMap()
	if err != nil {
		return 0, false, err
	}
	c, err := newCluster(cfg, initial)
	if err != nil {
		return 0, false, err
	}
	defer c.close()
	ms, err := c.members(ctx)
	if err != nil {
		return 0, false, err
	}
	m := find(ms, sortedStrings(membership.URLStrings(initial[cfg.Name])))
	if m == nil {
		return 0, false, nil
	}
	return m.ID, m.IsLearner, nil
}

// Kube is where Leave reads the StatefulSet's desired replicas: the
// Kubernetes API with the pod's service account.
type Kube struct {
	// Server is the API's base URL; TokenFile and CAFile authenticate.
	Server, TokenFile, CAFile string
	// Namespace and StatefulSet name the object.
	Namespace, StatefulSet string
}

// InCluster fills what is empty in k from the pod's environment, as
// client-go's in-cluster config does.
func (k Kube) InCluster() Kube {
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
	if k.Server == "" {
		if h, p := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"); h != "" {
			if strings.Contains(h, ":") {
				h = "[" + h + "]"
			}
			k.Server = "https://" + h + ":" + p
		}
	}
	if k.TokenFile == "" {
		k.TokenFile = sa + "token"
	}
	if k.CAFile == "" {
		k.CAFile = sa + "ca.crt"
	}
	if k.Namespace == "" {
		if b, err := os.ReadFile(sa + "namespace"); err == nil {
			k.Namespace = strings.TrimSpace(string(b))
		}
	}
	return k
}

// errNoStatefulSet is the API's 404 for the StatefulSet.
var errNoStatefulSet = errors.New("the StatefulSet does not exist")

// Replicas reads the StatefulSet's spec.replicas.
func (k Kube) Replicas(ctx context.Context) (int, error) {
	if k.Server == "" || k.Namespace == "" || k.StatefulSet == "" {
		return 0, fmt.Errorf("no Kubernetes API to ask (server %q, namespace %q, statefulset %q): outside a pod, pass --kube-apiserver, --kube-namespace and --statefulset", k.Server, k.Namespace, k.StatefulSet)
	}
	token, err := os.ReadFile(k.TokenFile)
	if err != nil {
		return 0, fmt.Errorf("the service account token: %w", err)
	}
	tcfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if k.CAFile != "" {
		pem, err := os.ReadFile(k.CAFile)
		if err != nil {
			return 0, fmt.Errorf("the Kubernetes API's CA: %w", err)
		}
		tcfg.RootCAs = x509.NewCertPool()
		if !tcfg.RootCAs.AppendCertsFromPEM(pem) {
			return 0, fmt.Errorf("the Kubernetes API's CA %s holds no certificate", k.CAFile)
		}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tcfg}, Timeout: 10 * time.Second}
	u := fmt.Sprintf("%s/apis/apps/v1/namespaces/%s/statefulsets/%s", strings.TrimRight(k.Server, "/"),
		url.PathEscape(k.Namespace), url.PathEscape(k.StatefulSet))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return 0, errNoStatefulSet
	case resp.StatusCode != http.StatusOK:
		return 0, fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	var sts struct {
		Spec struct {
			Replicas *int `json:"replicas"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &sts); err != nil {
		return 0, fmt.Errorf("GET %s: %w", u, err)
	}
	if sts.Spec.Replicas == nil {
		return 1, nil // the API's default
	}
	return *sts.Spec.Replicas, nil
}

// Leave removes the member of cfg from the cluster when the StatefulSet
// no longer wants its pod (ordinal >= replicas). It reports whether it
// removed it.
func Leave(ctx context.Context, cfg *config.Config, k Kube, lg *slog.Logger) (bool, error) {
	set, ord, err := Ordinal(cfg.Name)
	if err != nil {
		return false, err
	}
	if k.StatefulSet == "" {
		k.StatefulSet = set
	}
	replicas, err := k.Replicas(ctx)
	if errors.Is(err, errNoStatefulSet) {
		lg.Info("the StatefulSet is gone (the release is being deleted); leaving the membership as it is", "statefulset", k.StatefulSet)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if ord < replicas {
		lg.Info("the pod is restarting, not scaled away; the member stays", "ordinal", ord, "replicas", replicas)
		return false, nil
	}
	initial, err := cfg.InitialClusterMap()
	if err != nil {
		return false, err
	}
	c, err := newCluster(cfg, initial)
	if err != nil {
		return false, err
	}
	defer c.close()
	ms, err := c.members(ctx)
	if err != nil {
		return false, err
	}
	m := find(ms, sortedStrings(membership.URLStrings(initial[cfg.Name])))
	if m == nil {
		lg.Info("the cluster no longer lists this member", "name", cfg.Name)
		return false, nil
	}
	if err := c.remove(ctx, m.ID); err != nil {
		return false, err
	}
	lg.Info("scaled away: removed this member from the cluster", "member-id", fmt.Sprintf("%x", m.ID), "ordinal", ord, "replicas", replicas)
	return true, nil
}

// cluster reaches the other members: their peer ports for the
// membership, their client ports for changes.
type cluster struct {
	self      string   // this member's name
	peerURLs  []string // the other members' peer URLs
	peerHTTP  *http.Client
	clientTLS *tls.Config
	conns     map[string]*grpc.ClientConn
}

var errNoPeer = errors.New("no other member answers")

func newCluster(cfg *config.Config, initial map[string][]url.URL) (*cluster, error) {
	c := &cluster{self: cfg.Name, conns: map[string]*grpc.ClientConn{}}
	for name, us := range initial {
		if name != cfg.Name {
			c.peerURLs = append(c.peerURLs, membership.URLStrings(us)...)
		}
	}
	sort.Strings(c.peerURLs)
	ptls, err := cfg.PeerClientTLS()
	if err != nil {
		return nil, err
	}
	c.peerHTTP = &http.Client{Transport: &http.Transport{TLSClientConfig: ptls}, Timeout: 3 * time.Second}
	if c.clientTLS, err = clientTLS(cfg.ClientSecurity); err != nil {
		return nil, err
	}
	return c, nil
}

// clientTLS dials the client ports with the member's own certificate
// (the client one when given) and --trusted-ca-file.
func clientTLS(info config.TLSInfo) (*tls.Config, error) {
	if info.CertFile == "" && info.TrustedCAFile == "" {
		return nil, nil
	}
	out := &tls.Config{MinVersion: tls.VersionTLS12}
	certFile, keyFile := info.CertFile, info.KeyFile
	if info.ClientCertFile != "" {
		certFile, keyFile = info.ClientCertFile, info.ClientKeyFile
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		out.Certificates = []tls.Certificate{cert}
	}
	if info.TrustedCAFile != "" {
		pem, err := os.ReadFile(info.TrustedCAFile)
		if err != nil {
			return nil, err
		}
		out.RootCAs = x509.NewCertPool()
		out.RootCAs.AppendCertsFromPEM(pem)
	}
	return out, nil
}

func (c *cluster) close() {
	for _, cc := range c.conns {
		cc.Close()
	}
	c.peerHTTP.CloseIdleConnections()
}

// members asks the other members' peer ports in turn; errNoPeer when
// none answers.
func (c *cluster) members(ctx context.Context) ([]*membership.Member, error) {
	for _, u := range c.peerURLs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/members", nil)
		if err != nil {
			return nil, err
		}
		resp, err := c.peerHTTP.Do(req)
		if err != nil {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			continue
		}
		ms, err := membership.ParseJSONList(b)
		if err != nil {
			return nil, fmt.Errorf("GET %s/members: %w", u, err)
		}
		return ms, nil
	}
	return nil, errNoPeer
}

// call runs f against the started members' client ports in turn until
// one answers (a member that is down, or a follower that cannot reach
// the leader, is skipped); the last error when none does.
func (c *cluster) call(ctx context.Context, f func(context.Context, etcdserverpb.ClusterClient) error) error {
	ms, err := c.members(ctx)
	if err != nil {
		return err
	}
	last := errNoPeer
	for _, m := range ms {
		if m.Name == c.self || m.Name == "" || m.IsLearner {
			continue
		}
		for _, u := range m.ClientURLs {
			cc, err := c.dial(u)
			if err != nil {
				last = err
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = f(cctx, etcdserverpb.NewClusterClient(cc))
			cancel()
			if err == nil {
				return nil
			}
			last = err
		}
	}
	return last
}

func (c *cluster) dial(raw string) (*grpc.ClientConn, error) {
	if cc, ok := c.conns[raw]; ok {
		return cc, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if u.Scheme == "https" {
		tcfg := c.clientTLS
		if tcfg == nil {
			tcfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(tcfg)
	}
	cc, err := grpc.NewClient("passthrough:///"+u.Host, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	c.conns[raw] = cc
	return cc, nil
}

// retry runs call until it succeeds, fails for a reason waiting cannot
// change, or ctx ends: a cluster that has just started refuses
// membership changes until its members have been connected a while
// ("unhealthy cluster"), and one that is electing has no leader.
func (c *cluster) retry(ctx context.Context, f func(context.Context, etcdserverpb.ClusterClient) error) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		err := c.call(ctx, f)
		if err == nil || !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-t.C:
		}
	}
}

func transient(err error) bool {
	if errors.Is(err, errNoPeer) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

func (c *cluster) addLearner(ctx context.Context, peerURLs []string) (uint64, []*membership.Member, error) {
	var id uint64
	var after []*membership.Member
	err := c.retry(ctx, func(ctx context.Context, cl etcdserverpb.ClusterClient) error {
		resp, err := cl.MemberAdd(ctx, &etcdserverpb.MemberAddRequest{PeerURLs: peerURLs, IsLearner: true})
		if err != nil {
			return err
		}
		id = resp.Member.ID
		after = after[:0]
		for _, m := range resp.Members {
			after = append(after, &membership.Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
		}
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("member add --learner %v: %w", peerURLs, err)
	}
	return id, after, nil
}

func (c *cluster) remove(ctx context.Context, id uint64) error {
	err := c.retry(ctx, func(ctx context.Context, cl etcdserverpb.ClusterClient) error {
		_, err := cl.MemberRemove(ctx, &etcdserverpb.MemberRemoveRequest{ID: id})
		return err
	})
	if err != nil {
		return fmt.Errorf("member remove %x: %w", id, err)
	}
	return nil
}

func (c *cluster) promote(ctx context.Context, id uint64) error {
	return c.call(ctx, func(ctx context.Context, cl etcdserverpb.ClusterClient) error {
		_, err := cl.MemberPromote(ctx, &etcdserverpb.MemberPromoteRequest{ID: id})
		return err
	})
}

// find is the member whose peer URLs are self's.
func find(ms []*membership.Member, self []string) *membership.Member {
	for _, m := range ms {
		if slices.Equal(sortedStrings(m.PeerURLs), self) {
			return m
		}
	}
	return nil
}

func sortedStrings(ss []string) []string {
	out := slices.Clone(ss)
	sort.Strings(out)
	return out
}

func urls(ss []string) []url.URL {
	out := make([]url.URL, 0, len(ss))
	for _, s := range ss {
		if u, err := url.Parse(s); err == nil {
			out = append(out, *u)
		}
	}
	return out
}
