package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/raft/transport"
	"github.com/strata-db/strata/server/config"
)

// etcd's v3 discovery (--discovery-endpoints, --discovery-token): the
// members of a new cluster find each other through keys on any etcd v3
// endpoint, Strata included.
//
//	/_etcd/registry/<token>/_config/size       the cluster size, set by the operator
//	/_etcd/registry/<token>/members/<id hex>   "name=peerURL,..." of each member
//
// Each member puts its own key, then waits (a watch) until size members
// have registered; the first size by creation revision are the initial
// cluster, and the token is the cluster token. A member that finds size
// others registered before it gets "cluster is full". The protocol talks
// to the endpoints with etcd's gRPC API directly (no client library in
// the server).

const discoveryPrefix = "/_etcd/registry"

// etcd's discovery errors.
var (
	errDiscoverySizeNotFound = errors.New("discovery: size key not found")
	errDiscoveryBadSize      = errors.New("discovery: size key is bad")
	errDiscoveryFull         = errors.New("discovery: cluster is full")
	errDiscoveryRetries      = errors.New("discovery: too many retries")
	errDiscoveryInvalidURL   = errors.New("discovery: invalid peer URL")
)

// discoveryRetries is how many times a failed request to the discovery
// service is retried, with exponential backoff from 2 s (etcd's nRetries
// and maxExponentialRetries).
const (
	discoveryRetries        = 5
	discoveryMaxBackoffStep = 8
)

type discoveryClient struct {
	s      *Server
	cfg    config.Discovery
	token  string // the cluster token
	conns  []*grpc.ClientConn
	authTk string
	tries  int
}

// discoverInitialCluster registers this member with the discovery
// service and returns the initial cluster it agreed on, as an
// --initial-cluster string.
func (s *Server) discoverInitialCluster(id uint64) (string, error) {
	d := &discoveryClient{s: s, cfg: s.cfg.Discovery, token: s.cfg.Discovery.Token}
	defer d.close()
	if err := d.dial(); err != nil {
		return "", err
	}
	s.lg.Info("bootstrapping cluster using v3 discovery", "discovery-token", d.token,
		"discovery-endpoints", strings.Join(d.cfg.Endpoints, ","))
	self := d.memberKey(transport.FormatID(id))
	if _, _, _, err := d.check(self); err != nil {
		return "", err
	}
	var parts []string
	for _, u := range s.cfg.AdvertisePeerURLs {
		parts = append(parts, s.cfg.Name+"="+u.String())
	}
	sort.Strings(parts)
	if err := d.register(self, strings.Join(parts, ",")); err != nil {
		return "", err
	}
	regs, size, rev, err := d.check(self)
	if err != nil {
		return "", err
	}
	if len(regs) < size {
		if regs, err = d.waitPeers(regs, size, rev); err != nil {
			return "", err
		}
	}
	var vals []string
	for _, r := range regs[:size] {
		vals = append(vals, r.value)
	}
	cluster := strings.Join(vals, ",")
	s.lg.Info("discovery joined cluster successfully", "cluster", cluster)
	return cluster, nil
}

// registration is one member's key in the registry.
type registration struct {
	key, value string
	created    int64
}

func (d *discoveryClient) clusterPrefix() string { return discoveryPrefix + "/" + d.token }
func (d *discoveryClient) membersPrefix() string { return d.clusterPrefix() + "/members" }
func (d *discoveryClient) memberKey(id string) string {
	return d.membersPrefix() + "/" + id
}

func (d *discoveryClient) dial() error {
	creds := insecure.NewCredentials()
	if tc, err := d.tlsConfig(); err != nil {
		return err
	} else if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	for _, ep := range d.cfg.Endpoints {
		target := ep
		for _, p := range []string{"https://", "http://"} {
			target = strings.TrimPrefix(target, p)
		}
		// passthrough: the address is dialed as given (the system
		// resolver, /etc/hosts first), without gRPC's DNS resolver and
		// its TXT lookups, which wait out an unreachable name server.
		cc, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(creds))
		if err != nil {
			return fmt.Errorf("discovery endpoint %q: %w", ep, err)
		}
		d.conns = append(d.conns, cc)
	}
	user, pass := d.cfg.User, d.cfg.Password
	if u, p, ok := strings.Cut(user, ":"); ok {
		user, pass = u, p
	}
	if user == "" {
		return nil
	}
	return d.do(func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := pb.NewAuthClient(cc).Authenticate(ctx, &pb.AuthenticateRequest{Name: user, Password: pass})
		if err == nil {
			d.authTk = r.Token
		}
		return err
	})
}

// tlsConfig is clientv3's rule for the discovery client: TLS when a
// certificate, key or CA is given, or when --discovery-insecure-transport
// is off; none otherwise.
func (d *discoveryClient) tlsConfig() (*tls.Config, error) {
	c := d.cfg
	var tc *tls.Config
	if c.Cert != "" || c.Key != "" || c.CACert != "" {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
		if c.Cert != "" || c.Key != "" {
			kp, err := tls.LoadX509KeyPair(c.Cert, c.Key)
			if err != nil {
				return nil, fmt.Errorf("discovery client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{kp}
		}
		if c.CACert != "" {
			pem, err := os.ReadFile(c.CACert)
			if err != nil {
				return nil, fmt.Errorf("discovery CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("discovery CA %s: no certificate in it", c.CACert)
			}
			tc.RootCAs = pool
		}
	}
	if tc == nil && !c.InsecureTransport {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if c.InsecureSkipVerify {
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tc.InsecureSkipVerify = true
	}
	return tc, nil
}

func (d *discoveryClient) close() {
	for _, cc := range d.conns {
		cc.Close()
	}
}

// do runs one request against the endpoints in turn, within the request
// timeout each, until one answers.
func (d *discoveryClient) do(f func(ctx context.Context, cc *grpc.ClientConn) error) error {
	var err error
	for _, cc := range d.conns {
		ctx, cancel := context.WithTimeout(d.ctx(), max(d.cfg.RequestTimeout, d.cfg.DialTimeout))
		err = f(ctx, cc)
		cancel()
		if err == nil {
			return nil
		}
	}
	return err
}

func (d *discoveryClient) ctx() context.Context {
	ctx := context.Background()
	if d.authTk != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "token", d.authTk)
	}
	return ctx
}

// retry backs off before the next attempt, or gives up.
func (d *discoveryClient) retry(step string, cause error) error {
	if d.tries >= discoveryRetries {
		return errDiscoveryRetries
	}
	d.tries++
	backoff := time.Duration(1<<min(d.tries, discoveryMaxBackoffStep)) * time.Second
	d.s.lg.Warn("retry connecting to discovery service", "reason", step, "error", cause, "backoff", backoff.String())
	select {
	case <-time.After(backoff):
		return nil
	case <-d.s.stopping:
		return errStopped
	}
}

// check reads the size and the registrations; errDiscoveryFull when self
// is not among the first size registered.
func (d *discoveryClient) check(self string) ([]registration, int, int64, error) {
	for {
		size, regs, rev, err := d.read()
		if errors.Is(err, errDiscoverySizeNotFound) || errors.Is(err, errDiscoveryBadSize) {
			return nil, 0, 0, err
		}
		if err != nil {
			if rerr := d.retry("cluster status check", err); rerr != nil {
				return nil, 0, 0, rerr
			}
			continue
		}
		d.tries = 0
		for i, r := range regs {
			if r.key == self {
				break
			}
			if i >= size-1 {
				return regs, size, rev, errDiscoveryFull
			}
		}
		return regs, size, rev, nil
	}
}

func (d *discoveryClient) read() (size int, regs []registration, rev int64, err error) {
	err = d.do(func(ctx context.Context, cc *grpc.ClientConn) error {
		kv := pb.NewKVClient(cc)
		r, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte(d.clusterPrefix() + "/_config/size")})
		if err != nil {
			return err
		}
		if len(r.Kvs) == 0 {
			return errDiscoverySizeNotFound
		}
		n, perr := strconv.ParseInt(string(r.Kvs[0].Value), 10, 0)
		if perr != nil || n <= 0 {
			return errDiscoveryBadSize
		}
		size = int(n)
		prefix := []byte(d.membersPrefix())
		mr, err := kv.Range(ctx, &pb.RangeRequest{Key: prefix, RangeEnd: prefixEnd(prefix)})
		if err != nil {
			return err
		}
		regs = nil
		for _, m := range mr.Kvs {
			regs = d.add(regs, m.Key, m.Value, m.CreateRevision)
		}
		rev = mr.Header.Revision
		return nil
	})
	return size, regs, rev, err
}

// add adds a registration, kept in creation order; a value that is not
// "name=url" is skipped, as etcd does.
func (d *discoveryClient) add(regs []registration, key, value []byte, created int64) []registration {
	k, v := strings.TrimSpace(string(key)), strings.TrimSpace(string(value))
	if !strings.Contains(v, "=") {
		d.s.lg.Warn("invalid peer info returned from discovery service", "memberKey", k, "memberInfo", v)
		return regs
	}
	for _, r := range regs {
		if r.key == k {
			return regs
		}
	}
	d.s.lg.Info("found peer from discovery service", "memberKey", k, "memberInfo", v)
	regs = append(regs, registration{key: k, value: v, created: created})
	sort.SliceStable(regs, func(i, j int) bool { return regs[i].created < regs[j].created })
	return regs
}

func (d *discoveryClient) register(key, value string) error {
	for {
		err := d.do(func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := pb.NewKVClient(cc).Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte(value)})
			return err
		})
		if err == nil {
			d.tries = 0
			d.s.lg.Info("register member itself successfully", "memberKey", key, "memberInfo", value)
			return nil
		}
		if rerr := d.retry("register member itself", err); rerr != nil {
			return rerr
		}
	}
}

// waitPeers watches the registry from rev+1 until size members have
// registered.
func (d *discoveryClient) waitPeers(regs []registration, size int, rev int64) ([]registration, error) {
	d.s.lg.Info("waiting for peers from discovery service", "clusterSize", size, "found-peers", len(regs))
	for len(regs) < size {
		got, next, err := d.watchOnce(regs, size, rev)
		regs, rev = got, next
		if err == nil {
			break
		}
		if rerr := d.retry("waiting for peers", err); rerr != nil {
			return nil, rerr
		}
	}
	d.s.lg.Info("found all needed peers from discovery service", "clusterSize", size, "found-peers", len(regs))
	return regs, nil
}

func (d *discoveryClient) watchOnce(regs []registration, size int, rev int64) ([]registration, int64, error) {
	var lastErr error
	for _, cc := range d.conns {
		ctx, cancel := context.WithCancel(d.ctx())
		go func() {
			select {
			case <-d.s.stopping:
				cancel()
			case <-ctx.Done():
			}
		}()
		w, err := pb.NewWatchClient(cc).Watch(ctx)
		if err == nil {
			prefix := []byte(d.membersPrefix())
			err = w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
				Key: prefix, RangeEnd: prefixEnd(prefix), StartRevision: rev + 1}}})
		}
		for err == nil && len(regs) < size {
			var r *pb.WatchResponse
			if r, err = w.Recv(); err != nil {
				break
			}
			if r.Canceled || r.CompactRevision != 0 {
				err = fmt.Errorf("discovery watch canceled: %s (compacted at %d)", r.CancelReason, r.CompactRevision)
				break
			}
			for _, ev := range r.Events {
				if ev.Type == 0 && ev.Kv != nil { // PUT
					regs = d.add(regs, ev.Kv.Key, ev.Kv.Value, ev.Kv.CreateRevision)
				}
				if ev.Kv != nil && ev.Kv.ModRevision > rev {
					rev = ev.Kv.ModRevision
				}
			}
		}
		cancel()
		if err == nil {
			return regs, rev, nil
		}
		lastErr = err
	}
	return regs, rev, lastErr
}

// checkDiscoveredCluster is etcd's check of what discovery returned.
func checkDiscoveredCluster(cluster string) error {
	c := &config.Config{InitialCluster: cluster}
	m, err := c.InitialClusterMap()
	if err != nil {
		return errDiscoveryInvalidURL
	}
	seen := map[string]bool{}
	for _, us := range m {
		for _, u := range membership.URLStrings(us) {
			if seen[u] {
				return fmt.Errorf("discovery cluster %s has duplicate url", cluster)
			}
			seen[u] = true
		}
	}
	return nil
}
