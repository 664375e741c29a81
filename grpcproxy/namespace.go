package grpcproxy

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// --namespace: as etcd's proxy does through clientv3's namespace package,
// the keys of KV requests and watches get the prefix, and the keys in
// their responses (and in a lease's attached keys) lose it. Elections,
// locks and everything else pass through as they are, as in etcd.
type namespace struct{ pfx []byte }

// errEmptyKey is etcd's refusal of an empty key through a namespaced
// proxy: clientv3's error, which reaches the client with code Unknown.
var errEmptyKey = status.Error(codes.Unknown, rpctypes.ErrEmptyKey.Error())

// interval is clientv3's prefixInterval: key and range end inside the
// namespace ("\x00" as the end, the edge of the key space, becomes the
// end of the namespace).
func (n *namespace) interval(key, end []byte) ([]byte, []byte) {
	k := append(append([]byte(nil), n.pfx...), key...)
	switch {
	case len(end) == 1 && end[0] == 0:
		return k, prefixEnd(n.pfx)
	case len(end) > 0:
		return k, append(append([]byte(nil), n.pfx...), end...)
	}
	return k, nil
}

func (n *namespace) strip(kv *mvccpb.KeyValue) {
	if kv != nil && len(kv.Key) >= len(n.pfx) {
		kv.Key = kv.Key[len(n.pfx):]
	}
}

func (n *namespace) stripAll(kvs []*mvccpb.KeyValue) {
	for _, kv := range kvs {
		n.strip(kv)
	}
}

func (n *namespace) rangeReq(r *pb.RangeRequest) error {
	if len(r.Key) == 0 {
		return errEmptyKey
	}
	r.Key, r.RangeEnd = n.interval(r.Key, r.RangeEnd)
	return nil
}

func (n *namespace) putReq(r *pb.PutRequest) error {
	if len(r.Key) == 0 {
		return errEmptyKey
	}
	r.Key, _ = n.interval(r.Key, nil)
	return nil
}

func (n *namespace) deleteReq(r *pb.DeleteRangeRequest) error {
	if len(r.Key) == 0 {
		return errEmptyKey
	}
	r.Key, r.RangeEnd = n.interval(r.Key, r.RangeEnd)
	return nil
}

func (n *namespace) txnReq(r *pb.TxnRequest) error {
	for _, c := range r.Compare {
		c.Key, c.RangeEnd = n.interval(c.Key, c.RangeEnd)
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			var err error
			switch o := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
				err = n.rangeReq(o.RequestRange)
			case *pb.RequestOp_RequestPut:
				err = n.putReq(o.RequestPut)
			case *pb.RequestOp_RequestDeleteRange:
				err = n.deleteReq(o.RequestDeleteRange)
			case *pb.RequestOp_RequestTxn:
				err = n.txnReq(o.RequestTxn)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (n *namespace) txnResp(r *pb.TxnResponse) {
	for _, op := range r.Responses {
		switch o := op.Response.(type) {
		case *pb.ResponseOp_ResponseRange:
			n.stripAll(o.ResponseRange.Kvs)
		case *pb.ResponseOp_ResponsePut:
			n.strip(o.ResponsePut.PrevKv)
		case *pb.ResponseOp_ResponseDeleteRange:
			n.stripAll(o.ResponseDeleteRange.PrevKvs)
		case *pb.ResponseOp_ResponseTxn:
			n.txnResp(o.ResponseTxn)
		}
	}
}

// watchReq puts a watch's range inside the namespace.
func (n *namespace) watchReq(r *pb.WatchCreateRequest) {
	r.Key, r.RangeEnd = n.interval(r.Key, r.RangeEnd)
}

// watchResp is resp with its events' keys out of the namespace; the
// events are copied (a coalesced watch shares them between watchers).
func (n *namespace) watchResp(resp *pb.WatchResponse) *pb.WatchResponse {
	if len(resp.Events) == 0 {
		return resp
	}
	out := withID(resp, resp.WatchId)
	out.Events = make([]*mvccpb.Event, len(resp.Events))
	for i, ev := range resp.Events {
		e := proto.Clone(ev).(*mvccpb.Event)
		n.strip(e.Kv)
		n.strip(e.PrevKv)
		out.Events[i] = e
	}
	return out
}

// unaryRewrite is a namespaced unary method outside KV (kv.go rewrites
// those): the request is decoded and rewritten (or refused), and the
// response's keys stripped.
type unaryRewrite struct {
	req  func() proto.Message
	resp func() proto.Message
	in   func(n *namespace, m proto.Message) error
	out  func(n *namespace, m proto.Message)
}

var nsMethods = map[string]unaryRewrite{
	"/etcdserverpb.Lease/LeaseTimeToLive": {
		func() proto.Message { return &pb.LeaseTimeToLiveRequest{} }, func() proto.Message { return &pb.LeaseTimeToLiveResponse{} },
		func(*namespace, proto.Message) error { return nil },
		func(n *namespace, m proto.Message) {
			r := m.(*pb.LeaseTimeToLiveResponse)
			for i, k := range r.Keys {
				if len(k) >= len(n.pfx) {
					r.Keys[i] = k[len(n.pfx):]
				}
			}
		}},
}

// forwardNamespaced carries one call of a namespaced unary method.
func (p *Proxy) forwardNamespaced(ss grpc.ServerStream, method string, rw unaryRewrite) error {
	req := rw.req()
	if err := ss.RecvMsg(req); err != nil {
		return err
	}
	if err := rw.in(p.ns, req); err != nil {
		return err
	}
	resp := rw.resp()
	ctx := outgoing(ss.Context())
	if err := p.cc.Invoke(ctx, method, req, resp); err != nil {
		return asEtcdProxyError(method, err)
	}
	rw.out(p.ns, resp)
	return ss.SendMsg(resp)
}
