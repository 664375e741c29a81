// Package v3electionpb declares etcd's v3election gRPC service (package
// v3electionpb, service Election) and its messages with the same names,
// field numbers and types as etcd's v3election.proto, so that clients
// built on etcd's generated package talk to Strata unchanged. The
// messages are plain structs made into protobuf messages by
// server/internal/protodef.
package v3electionpb

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/runtime/protoimpl"

	"github.com/strata-db/strata/server/internal/protodef"
)

// CampaignRequest campaigns in the election Name with Lease (0: the
// server grants one), proclaiming Value once elected.
type CampaignRequest struct {
	state         protoimpl.MessageState
	Name          []byte `protobuf:"bytes,1,opt,name=name,proto3"`
	Lease         int64  `protobuf:"varint,2,opt,name=lease,proto3"`
	Value         []byte `protobuf:"bytes,3,opt,name=value,proto3"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

// CampaignResponse holds the leadership won.
type CampaignResponse struct {
	state         protoimpl.MessageState
	Header        *pb.ResponseHeader `protobuf:"bytes,1,opt,name=header,proto3"`
	Leader        *LeaderKey         `protobuf:"bytes,2,opt,name=leader,proto3"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

// LeaderKey identifies a leadership: the election, the leader's key, its
// create revision and its lease.
type LeaderKey struct {
	state         protoimpl.MessageState
	Name          []byte `protobuf:"bytes,1,opt,name=name,proto3"`
	Key           []byte `protobuf:"bytes,2,opt,name=key,proto3"`
	Rev           int64  `protobuf:"varint,3,opt,name=rev,proto3"`
	Lease         int64  `protobuf:"varint,4,opt,name=lease,proto3"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

// LeaderRequest names an election for Leader and Observe.
type LeaderRequest struct {
	state         protoimpl.MessageState
	Name          []byte `protobuf:"bytes,1,opt,name=name,proto3"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

// LeaderResponse holds the leader's key and proclaimed value.
type LeaderResponse struct {
	state         protoimpl.MessageState
	Header        *pb.ResponseHeader `protobuf:"bytes,1,opt,name=header,proto3"`
	Kv            *mvccpb.KeyValue   `protobuf:"bytes,2,opt,name=kv,proto3"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

// ResignRequest gives up Leader.
type ResignRequest struct {
	state         protoimpl.MessageState
	Leader        *LeaderKey `protobuf:"bytes,1,opt,name=leader,proto3"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

// ResignResponse is Resign's answer.
type ResignResponse struct {
	state         protoimpl.MessageState
	Header        *pb.ResponseHeader `protobuf:"bytes,1,opt,name=header,proto3"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

// ProclaimRequest replaces the leader's value.
type ProclaimRequest struct {
	state         protoimpl.MessageState
	Leader        *LeaderKey `protobuf:"bytes,1,opt,name=leader,proto3"`
	Value         []byte     `protobuf:"bytes,2,opt,name=value,proto3"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

// ProclaimResponse is Proclaim's answer.
type ProclaimResponse struct {
	state         protoimpl.MessageState
	Header        *pb.ResponseHeader `protobuf:"bytes,1,opt,name=header,proto3"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

var types = protodef.File{
	Path:    "v3election.proto",
	Package: "v3electionpb",
	Imports: []string{"etcd/api/etcdserverpb/rpc.proto", "etcd/api/mvccpb/kv.proto"},
	Messages: []any{
		(*CampaignRequest)(nil), (*CampaignResponse)(nil), (*LeaderKey)(nil), (*LeaderRequest)(nil),
		(*LeaderResponse)(nil), (*ResignRequest)(nil), (*ResignResponse)(nil), (*ProclaimRequest)(nil),
		(*ProclaimResponse)(nil),
	},
}.Build()

func (x *CampaignRequest) ProtoReflect() protoreflect.Message  { return protodef.Reflect(x, &types[0]) }
func (x *CampaignResponse) ProtoReflect() protoreflect.Message { return protodef.Reflect(x, &types[1]) }
func (x *LeaderKey) ProtoReflect() protoreflect.Message        { return protodef.Reflect(x, &types[2]) }
func (x *LeaderRequest) ProtoReflect() protoreflect.Message    { return protodef.Reflect(x, &types[3]) }
func (x *LeaderResponse) ProtoReflect() protoreflect.Message   { return protodef.Reflect(x, &types[4]) }
func (x *ResignRequest) ProtoReflect() protoreflect.Message    { return protodef.Reflect(x, &types[5]) }
func (x *ResignResponse) ProtoReflect() protoreflect.Message   { return protodef.Reflect(x, &types[6]) }
func (x *ProclaimRequest) ProtoReflect() protoreflect.Message  { return protodef.Reflect(x, &types[7]) }
func (x *ProclaimResponse) ProtoReflect() protoreflect.Message { return protodef.Reflect(x, &types[8]) }

func (x *CampaignRequest) String() string  { return protodef.String(x) }
func (x *CampaignResponse) String() string { return protodef.String(x) }
func (x *LeaderKey) String() string        { return protodef.String(x) }
func (x *LeaderRequest) String() string    { return protodef.String(x) }
func (x *LeaderResponse) String() string   { return protodef.String(x) }
func (x *ResignRequest) String() string    { return protodef.String(x) }
func (x *ResignResponse) String() string   { return protodef.String(x) }
func (x *ProclaimRequest) String() string  { return protodef.String(x) }
func (x *ProclaimResponse) String() string { return protodef.String(x) }

// Full method names, as etcd's generated code has them.
const (
	CampaignMethod = "/v3electionpb.Election/Campaign"
	ProclaimMethod = "/v3electionpb.Election/Proclaim"
	LeaderMethod   = "/v3electionpb.Election/Leader"
	ObserveMethod  = "/v3electionpb.Election/Observe"
	ResignMethod   = "/v3electionpb.Election/Resign"
)

// ElectionServer is the Election service.
type ElectionServer interface {
	Campaign(context.Context, *CampaignRequest) (*CampaignResponse, error)
	Proclaim(context.Context, *ProclaimRequest) (*ProclaimResponse, error)
	Leader(context.Context, *LeaderRequest) (*LeaderResponse, error)
	Observe(*LeaderRequest, ObserveServer) error
	Resign(context.Context, *ResignRequest) (*ResignResponse, error)
}

// ObserveServer is the server side of an Observe stream.
type ObserveServer interface {
	Send(*LeaderResponse) error
	grpc.ServerStream
}

// RegisterElectionServer registers srv on s as the service
// v3electionpb.Election.
func RegisterElectionServer(s grpc.ServiceRegistrar, srv ElectionServer) {
	s.RegisterService(&serviceDesc, srv)
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: "v3electionpb.Election",
	HandlerType: (*ElectionServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Campaign", Handler: unary(CampaignMethod, ElectionServer.Campaign)},
		{MethodName: "Proclaim", Handler: unary(ProclaimMethod, ElectionServer.Proclaim)},
		{MethodName: "Leader", Handler: unary(LeaderMethod, ElectionServer.Leader)},
		{MethodName: "Resign", Handler: unary(ResignMethod, ElectionServer.Resign)},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "Observe", Handler: observeHandler, ServerStreams: true},
	},
	Metadata: "v3election.proto",
}

// unary makes a gRPC method handler decoding a Req and calling fn.
func unary[Req, Resp any](method string, fn func(ElectionServer, context.Context, *Req) (*Resp, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(Req)
		if err := dec(in); err != nil {
			return nil, err
		}
		call := func(ctx context.Context, req any) (any, error) {
			return fn(srv.(ElectionServer), ctx, req.(*Req))
		}
		if icpt == nil {
			return call(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, call)
	}
}

type observeServer struct{ grpc.ServerStream }

func (s observeServer) Send(m *LeaderResponse) error { return s.SendMsg(m) }

func observeHandler(srv any, stream grpc.ServerStream) error {
	in := new(LeaderRequest)
	if err := stream.RecvMsg(in); err != nil {
		return err
	}
	return srv.(ElectionServer).Observe(in, observeServer{stream})
}

// ElectionClient calls the Election service.
type ElectionClient struct{ cc grpc.ClientConnInterface }

// NewElectionClient returns a client of the Election service on cc.
func NewElectionClient(cc grpc.ClientConnInterface) *ElectionClient { return &ElectionClient{cc} }

func invoke[Resp any](ctx context.Context, cc grpc.ClientConnInterface, method string, in any, opts []grpc.CallOption) (*Resp, error) {
	out := new(Resp)
	if err := cc.Invoke(ctx, method, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

// Campaign calls Campaign.
func (c *ElectionClient) Campaign(ctx context.Context, in *CampaignRequest, opts ...grpc.CallOption) (*CampaignResponse, error) {
	return invoke[CampaignResponse](ctx, c.cc, CampaignMethod, in, opts)
}

// Proclaim calls Proclaim.
func (c *ElectionClient) Proclaim(ctx context.Context, in *ProclaimRequest, opts ...grpc.CallOption) (*ProclaimResponse, error) {
	return invoke[ProclaimResponse](ctx, c.cc, ProclaimMethod, in, opts)
}

// Leader calls Leader.
func (c *ElectionClient) Leader(ctx context.Context, in *LeaderRequest, opts ...grpc.CallOption) (*LeaderResponse, error) {
	return invoke[LeaderResponse](ctx, c.cc, LeaderMethod, in, opts)
}

// Resign calls Resign.
func (c *ElectionClient) Resign(ctx context.Context, in *ResignRequest, opts ...grpc.CallOption) (*ResignResponse, error) {
	return invoke[ResignResponse](ctx, c.cc, ResignMethod, in, opts)
}

// ObserveStream is the client side of an Observe stream.
type ObserveStream struct{ grpc.ClientStream }

// Recv returns the next leader proclamation.
func (s ObserveStream) Recv() (*LeaderResponse, error) {
	m := new(LeaderResponse)
	if err := s.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

// ObserveStreamDesc describes the Observe stream for grpc.ClientConn.NewStream.
var ObserveStreamDesc = grpc.StreamDesc{StreamName: "Observe", ServerStreams: true}

// Observe opens an Observe stream.
func (c *ElectionClient) Observe(ctx context.Context, in *LeaderRequest, opts ...grpc.CallOption) (ObserveStream, error) {
	cs, err := c.cc.NewStream(ctx, &ObserveStreamDesc, ObserveMethod, opts...)
	if err != nil {
		return ObserveStream{}, err
	}
	if err := cs.SendMsg(in); err != nil {
		return ObserveStream{}, err
	}
	if err := cs.CloseSend(); err != nil {
		return ObserveStream{}, err
	}
	return ObserveStream{cs}, nil
}
