package grpcproxy

import (
	"context"
	"encoding/json"
	"os"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// clusterProxy is the Cluster service: membership changes go to the
// members; MemberList lists the proxies, as etcd's proxy does (clients
// that sync their endpoints through it then keep using proxies).
type clusterProxy struct {
	pb.UnimplementedClusterServer
	p *Proxy
}

func newClusterProxy(p *Proxy) *clusterProxy { return &clusterProxy{p: p} }

func (c *clusterProxy) upstream() pb.ClusterClient { return pb.NewClusterClient(c.p.cc) }

func (c *clusterProxy) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	return c.upstream().MemberAdd(outgoing(ctx), r)
}

func (c *clusterProxy) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	return c.upstream().MemberRemove(outgoing(ctx), r)
}

func (c *clusterProxy) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	return c.upstream().MemberUpdate(outgoing(ctx), r)
}

func (c *clusterProxy) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	return c.upstream().MemberPromote(outgoing(ctx), r)
}

// MemberList lists the proxies registered under --resolver-prefix, or
// with none registered (or no prefix) this proxy alone: a member with no
// ID, the host name as its name and --advertise-client-url as its client
// URL.
func (c *clusterProxy) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	p := c.p
	if p.cfg.AdvertiseClientURL == "" {
		return c.upstream().MemberList(outgoing(ctx), r)
	}
	if p.cfg.ResolverPrefix != "" {
		prefix := []byte(p.cfg.ResolverPrefix + "/")
		resp, err := pb.NewKVClient(p.cc).Range(ctx, &pb.RangeRequest{Key: prefix, RangeEnd: prefixEnd(prefix)})
		if err != nil {
			return nil, err
		}
		var mbs []*pb.Member
		for _, kv := range resp.Kvs {
			var u endpointUpdate
			if json.Unmarshal(kv.Value, &u) != nil || u.Addr == "" {
				continue
			}
			var m proxyMeta
			if s, ok := u.Metadata.(string); ok {
				_ = json.Unmarshal([]byte(s), &m)
			}
			mbs = append(mbs, &pb.Member{Name: m.Name, ClientURLs: []string{u.Addr}})
		}
		if len(mbs) > 0 {
			return &pb.MemberListResponse{Header: resp.Header, Members: mbs}, nil
		}
	}
	host, _ := os.Hostname()
	return &pb.MemberListResponse{Members: []*pb.Member{{Name: host, ClientURLs: []string{p.cfg.AdvertiseClientURL}}}}, nil
}

// endpointUpdate is the value clientv3's endpoints manager (etcd's
// naming) stores for an endpoint; etcd's proxies register themselves so.
type endpointUpdate struct {
	Op       uint8
	Addr     string
	Metadata any
}

// proxyMeta is the metadata of a registered proxy, as a JSON string.
type proxyMeta struct {
	Name string `json:"name"`
}

func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// register keeps this proxy registered under --resolver-prefix as
// "<prefix>/<advertise-client-url>" with a lease of --resolver-ttl
// seconds, kept alive, and registers again after a lost lease; on stop
// the lease is revoked.
func (p *Proxy) register() {
	ttl := int64(p.cfg.ResolverTTL)
	if ttl <= 0 {
		ttl = 60 // clientv3's session default, which etcd's proxy uses
	}
	host, _ := os.Hostname()
	meta, _ := json.Marshal(proxyMeta{Name: host})
	val, _ := json.Marshal(endpointUpdate{Op: 0, Addr: p.cfg.AdvertiseClientURL, Metadata: string(meta)})
	key := []byte(p.cfg.ResolverPrefix + "/" + p.cfg.AdvertiseClientURL)
	lc, kv := pb.NewLeaseClient(p.cc), pb.NewKVClient(p.cc)
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for {
		ctx, cancel := context.WithCancel(context.Background())
		id, err := func() (int64, error) {
			g, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: ttl})
			if err != nil {
				return 0, err
			}
			if _, err := kv.Put(ctx, &pb.PutRequest{Key: key, Value: val, Lease: g.ID}); err != nil {
				return g.ID, err
			}
			return g.ID, nil
		}()
		if err == nil {
			p.lg.Info("registered session with lease", "addr", p.cfg.AdvertiseClientURL, "lease-ttl", ttl)
			err = p.keepAlive(ctx, lc, id, ttl)
		}
		cancel()
		if id != 0 {
			rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = lc.LeaseRevoke(rctx, &pb.LeaseRevokeRequest{ID: id})
			rcancel()
		}
		select {
		case <-p.stopc:
			return
		case <-retry.C:
		}
		p.lg.Warn("registering the proxy again", "prefix", p.cfg.ResolverPrefix, "error", err)
	}
}

// keepAlive renews lease id every third of its TTL until the proxy stops
// (nil) or the lease is lost (the error).
func (p *Proxy) keepAlive(ctx context.Context, lc pb.LeaseClient, id, ttl int64) error {
	ka, err := lc.LeaseKeepAlive(ctx)
	if err != nil {
		return err
	}
	t := time.NewTicker(time.Duration(ttl) * time.Second / 3)
	defer t.Stop()
	for {
		if err := ka.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
			return err
		}
		resp, err := ka.Recv()
		if err != nil {
			return err
		}
		if resp.TTL <= 0 {
			return errLeaseLost
		}
		select {
		case <-p.stopc:
			return nil
		case <-t.C:
		}
	}
}

type leaseLost struct{}

func (leaseLost) Error() string { return "grpc-proxy: the registration lease expired" }

var errLeaseLost error = leaseLost{}
