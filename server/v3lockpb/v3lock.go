// Package v3lockpb declares etcd's v3lock gRPC service (package v3lockpb,
// service Lock) and its messages with the same names, field numbers and
// types as etcd's v3lock.proto, so that clients built on etcd's generated
// package talk to Strata unchanged. The messages are plain structs made
// into protobuf messages by server/internal/protodef.
package v3lockpb

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/runtime/protoimpl"

	"github.com/strata-db/strata/server/internal/protodef"
)

// LockRequest asks for the lock called Name, held with Lease (0: the
// server grants a lease of its own).
type LockRequest struct {
	state         protoimpl.MessageState
	Name          []byte `protobuf:"bytes,1,opt,name=name,proto3"`
	Lease         int64  `protobuf:"varint,2,opt,name=lease,proto3"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

// LockResponse holds the key that exists while the caller owns the lock.
type LockResponse struct {
	state         protoimpl.MessageState
	Header        *pb.ResponseHeader `protobuf:"bytes,1,opt,name=header,proto3"`
	Key           []byte             `protobuf:"bytes,2,opt,name=key,proto3"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

// UnlockRequest releases the lock owned through Key.
type UnlockRequest struct {
	state         protoimpl.MessageState
	Key           []byte `protobuf:"bytes,1,opt,name=key,proto3"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

// UnlockResponse is Unlock's answer.
type UnlockResponse struct {
	state         protoimpl.MessageState
	Header        *pb.ResponseHeader `protobuf:"bytes,1,opt,name=header,proto3"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

var types = protodef.File{
	Path:    "v3lock.proto",
	Package: "v3lockpb",
	Imports: []string{"etcd/api/etcdserverpb/rpc.proto"},
	Messages: []any{
		(*LockRequest)(nil), (*LockResponse)(nil), (*UnlockRequest)(nil), (*UnlockResponse)(nil),
	},
}.Build()

func (x *LockRequest) ProtoReflect() protoreflect.Message    { return protodef.Reflect(x, &types[0]) }
func (x *LockResponse) ProtoReflect() protoreflect.Message   { return protodef.Reflect(x, &types[1]) }
func (x *UnlockRequest) ProtoReflect() protoreflect.Message  { return protodef.Reflect(x, &types[2]) }
func (x *UnlockResponse) ProtoReflect() protoreflect.Message { return protodef.Reflect(x, &types[3]) }

func (x *LockRequest) String() string    { return protodef.String(x) }
func (x *LockResponse) String() string   { return protodef.String(x) }
func (x *UnlockRequest) String() string  { return protodef.String(x) }
func (x *UnlockResponse) String() string { return protodef.String(x) }

// Full method names, as etcd's generated code has them.
const (
	LockMethod   = "/v3lockpb.Lock/Lock"
	UnlockMethod = "/v3lockpb.Lock/Unlock"
)

// LockServer is the Lock service.
type LockServer interface {
	Lock(context.Context, *LockRequest) (*LockResponse, error)
	Unlock(context.Context, *UnlockRequest) (*UnlockResponse, error)
}

// RegisterLockServer registers srv on s as the service v3lockpb.Lock.
func RegisterLockServer(s grpc.ServiceRegistrar, srv LockServer) {
	s.RegisterService(&serviceDesc, srv)
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: "v3lockpb.Lock",
	HandlerType: (*LockServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Lock", Handler: lockHandler},
		{MethodName: "Unlock", Handler: unlockHandler},
	},
	Metadata: "v3lock.proto",
}

func lockHandler(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
	in := new(LockRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	call := func(ctx context.Context, req any) (any, error) {
		return srv.(LockServer).Lock(ctx, req.(*LockRequest))
	}
	if icpt == nil {
		return call(ctx, in)
	}
	return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: LockMethod}, call)
}

func unlockHandler(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
	in := new(UnlockRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	call := func(ctx context.Context, req any) (any, error) {
		return srv.(LockServer).Unlock(ctx, req.(*UnlockRequest))
	}
	if icpt == nil {
		return call(ctx, in)
	}
	return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: UnlockMethod}, call)
}

// LockClient calls the Lock service.
type LockClient struct{ cc grpc.ClientConnInterface }

// NewLockClient returns a client of the Lock service on cc.
func NewLockClient(cc grpc.ClientConnInterface) *LockClient { return &LockClient{cc} }

// Lock calls Lock.
func (c *LockClient) Lock(ctx context.Context, in *LockRequest, opts ...grpc.CallOption) (*LockResponse, error) {
	out := new(LockResponse)
	if err := c.cc.Invoke(ctx, LockMethod, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

// Unlock calls Unlock.
func (c *LockClient) Unlock(ctx context.Context, in *UnlockRequest, opts ...grpc.CallOption) (*UnlockResponse, error) {
	out := new(UnlockResponse)
	if err := c.cc.Invoke(ctx, UnlockMethod, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}
