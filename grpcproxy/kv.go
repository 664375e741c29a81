package grpcproxy

import (
	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// The KV service: forwarded to the member as decoded requests, so that
// the range cache (cache.go) sees every range and write, and --namespace
// (namespace.go) can rewrite the keys.

type kvMetrics struct {
	keys         prometheus.Gauge
	hits, misses prometheus.Counter
}

func newKVMetrics(reg prometheus.Registerer) *kvMetrics {
	m := &kvMetrics{
		keys: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "grpc_proxy",
			Name: "cache_keys_total", Help: "Total number of keys/ranges cached"}),
		hits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "grpc_proxy",
			Name: "cache_hits_total", Help: "Total number of cache hits"}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "grpc_proxy",
			Name: "cache_misses_total", Help: "Total number of cache misses"}),
	}
	reg.MustRegister(m.keys, m.hits, m.misses)
	return m
}

var kvMethods = map[string]bool{
	"/etcdserverpb.KV/Range": true, "/etcdserverpb.KV/Put": true, "/etcdserverpb.KV/DeleteRange": true,
	"/etcdserverpb.KV/Txn": true, "/etcdserverpb.KV/Compact": true,
}

// forwardKV carries one KV call.
func (p *Proxy) forwardKV(ss grpc.ServerStream, method string) error {
	ctx := outgoing(ss.Context())
	ns := p.ns
	call := func(req, resp proto.Message) error {
		if err := p.cc.Invoke(ctx, method, req, resp); err != nil {
			return asEtcdProxyError(method, err)
		}
		return nil
	}
	defer func() { p.kvm.keys.Set(float64(p.cache.size())) }()
	switch method {
	case "/etcdserverpb.KV/Range":
		req := &pb.RangeRequest{}
		if err := ss.RecvMsg(req); err != nil {
			return err
		}
		if ns != nil {
			if err := ns.rangeReq(req); err != nil {
				return err
			}
		}
		if req.Serializable {
			resp, err := p.cache.get(req)
			if err != nil {
				p.kvm.hits.Inc()
				return err
			}
			if resp != nil {
				p.kvm.hits.Inc()
				return ss.SendMsg(p.stripRange(resp))
			}
			p.kvm.misses.Inc()
		}
		resp := &pb.RangeResponse{}
		if err := call(req, resp); err != nil {
			return err
		}
		if p.cfg.SerializableOrdering {
			if req.Serializable && resp.GetHeader().GetRevision() < p.lastRev.Load() {
				// The member is behind what this proxy already
				// returned: ask again linearizably.
				lin := proto.Clone(req).(*pb.RangeRequest)
				lin.Serializable = false
				resp = &pb.RangeResponse{}
				if err := call(lin, resp); err != nil {
					return err
				}
			}
			for r := resp.GetHeader().GetRevision(); ; r = resp.GetHeader().GetRevision() {
				old := p.lastRev.Load()
				if r <= old || p.lastRev.CompareAndSwap(old, r) {
					break
				}
			}
		}
		// Kept as the answer to the serializable form of the request.
		key := proto.Clone(req).(*pb.RangeRequest)
		key.Serializable = true
		p.cache.add(key, resp)
		return ss.SendMsg(p.stripRange(resp))
	case "/etcdserverpb.KV/Put":
		req, resp := &pb.PutRequest{}, &pb.PutResponse{}
		if err := ss.RecvMsg(req); err != nil {
			return err
		}
		if ns != nil {
			if err := ns.putReq(req); err != nil {
				return err
			}
		}
		p.cache.invalidate(req.Key, nil)
		if err := call(req, resp); err != nil {
			return err
		}
		if ns != nil {
			ns.strip(resp.PrevKv)
		}
		return ss.SendMsg(resp)
	case "/etcdserverpb.KV/DeleteRange":
		req, resp := &pb.DeleteRangeRequest{}, &pb.DeleteRangeResponse{}
		if err := ss.RecvMsg(req); err != nil {
			return err
		}
		if ns != nil {
			if err := ns.deleteReq(req); err != nil {
				return err
			}
		}
		p.cache.invalidate(req.Key, req.RangeEnd)
		if err := call(req, resp); err != nil {
			return err
		}
		if ns != nil {
			ns.stripAll(resp.PrevKvs)
		}
		return ss.SendMsg(resp)
	case "/etcdserverpb.KV/Txn":
		req, resp := &pb.TxnRequest{}, &pb.TxnResponse{}
		if err := ss.RecvMsg(req); err != nil {
			return err
		}
		if ns != nil {
			if err := ns.txnReq(req); err != nil {
				return err
			}
		}
		if err := call(req, resp); err != nil {
			return err
		}
		ops := req.Failure
		if resp.Succeeded {
			ops = req.Success
		}
		p.txnToCache(ops, resp.Responses)
		if ns != nil {
			resp = proto.Clone(resp).(*pb.TxnResponse) // the cache holds the ranges
			ns.txnResp(resp)
		}
		return ss.SendMsg(resp)
	case "/etcdserverpb.KV/Compact":
		req, resp := &pb.CompactionRequest{}, &pb.CompactionResponse{}
		if err := ss.RecvMsg(req); err != nil {
			return err
		}
		if err := call(req, resp); err != nil {
			return err
		}
		p.cache.compact(req.Revision)
		return ss.SendMsg(resp)
	}
	return nil
}

// txnToCache applies a txn's operations to the cache, as etcd's proxy
// does: writes invalidate, ranges are kept.
func (p *Proxy) txnToCache(ops []*pb.RequestOp, resps []*pb.ResponseOp) {
	for i, r := range resps {
		if i >= len(ops) {
			return
		}
		switch rv := r.Response.(type) {
		case *pb.ResponseOp_ResponsePut:
			p.cache.invalidate(ops[i].GetRequestPut().GetKey(), nil)
		case *pb.ResponseOp_ResponseDeleteRange:
			d := ops[i].GetRequestDeleteRange()
			p.cache.invalidate(d.GetKey(), d.GetRangeEnd())
		case *pb.ResponseOp_ResponseRange:
			if rr := ops[i].GetRequestRange(); rr != nil {
				key := proto.Clone(rr).(*pb.RangeRequest)
				key.Serializable = true
				p.cache.add(key, rv.ResponseRange)
			}
		}
	}
}

// stripRange is resp for the client: with --namespace a copy without the
// prefix (the cache keeps the member's answer).
func (p *Proxy) stripRange(resp *pb.RangeResponse) *pb.RangeResponse {
	if p.ns == nil {
		return resp
	}
	out := proto.Clone(resp).(*pb.RangeResponse)
	p.ns.stripAll(out.Kvs)
	return out
}
