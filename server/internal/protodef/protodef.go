// Package protodef turns plain Go structs into protobuf messages without
// generated code: it derives a proto3 file descriptor from the structs'
// `protobuf` field tags and builds the message types with the runtime that
// generated code uses, so the structs marshal with proto.Marshal, gRPC's
// codec and protojson like any generated message.
//
// It exists for etcd services whose generated Go packages live in
// go.etcd.io/etcd/server/v3, which Strata's core module does not depend
// on: the structs are declared with the same package, message names, field
// numbers and types as etcd's .proto files, so they are wire-compatible.
//
// A message struct has the layout of generated code:
//
//	type LockRequest struct {
//		state         protoimpl.MessageState
//		Name          []byte `protobuf:"bytes,1,opt,name=name,proto3"`
//		Lease         int64  `protobuf:"varint,2,opt,name=lease,proto3"`
//		unknownFields protoimpl.UnknownFields
//		sizeCache     protoimpl.SizeCache
//	}
//
//	func (x *LockRequest) ProtoReflect() protoreflect.Message { return protodef.Reflect(x, &types[0]) }
//
// Supported field types: []byte, string, bool, int32, int64, uint32,
// uint64, and pointers to messages (declared in the same file or generated
// elsewhere), each optionally repeated (a slice). Enums, maps and oneofs
// are not supported.
//
// The files and types are registered in private registries, not the
// global ones, so they never conflict with etcd's generated packages if
// both end up in one binary.
package protodef

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/runtime/protoimpl"
	"google.golang.org/protobuf/types/descriptorpb"
)

// File is one proto3 file.
type File struct {
	// Path is the file's name, e.g. "v3lock.proto".
	Path string
	// Package is the proto package, e.g. "v3lockpb".
	Package string
	// Imports are the paths of the files that declare the external
	// message types the fields refer to (informational: external types
	// are resolved from their Go types).
	Imports []string
	// Messages are nil pointers to the message structs, in declaration
	// order; each struct's name is its message name.
	Messages []any
}

// Build builds the file's message types and returns their infos, in the
// order of Messages, for the structs' ProtoReflect methods. It panics on
// a struct it cannot describe: the structs are fixed at compile time.
func (f File) Build() []protoimpl.MessageInfo {
	fdp, deps, err := f.descriptor()
	if err != nil {
		panic(fmt.Sprintf("protodef: %s: %v", f.Path, err))
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(fdp)
	if err != nil {
		panic(fmt.Sprintf("protodef: %s: %v", f.Path, err))
	}
	goTypes := append(append([]any{}, f.Messages...), deps.types...)
	// Only message field dependencies; the five sub-list offsets follow in
	// reverse order (method outputs, method inputs, extension types,
	// extendees, fields).
	n := int32(len(deps.idx))
	depIdxs := append(deps.idx, n, n, n, n, 0)
	infos := make([]protoimpl.MessageInfo, len(f.Messages))
	protoimpl.TypeBuilder{
		File: protoimpl.DescBuilder{
			GoPackagePath: reflect.TypeOf(f.Messages[0]).Elem().PkgPath(),
			RawDescriptor: raw,
			NumMessages:   int32(len(f.Messages)),
			FileRegistry:  new(protoregistry.Files),
		},
		GoTypes:           goTypes,
		DependencyIndexes: depIdxs,
		MessageInfos:      infos,
		TypeRegistry:      new(protoregistry.Types),
	}.Build()
	return infos
}

// Reflect implements a message struct's ProtoReflect method; mi is the
// struct's entry in the slice Build returned.
func Reflect[T any](x *T, mi *protoimpl.MessageInfo) protoreflect.Message {
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// String implements a message struct's String method.
func String(m protoreflect.ProtoMessage) string { return protoimpl.X.MessageStringOf(m) }

// dependencies are the external Go types the fields refer to (after the
// file's own messages in the type list) and, for every message-typed
// field in declaration order, the index of its type in that list.
type dependencies struct {
	types []any
	idx   []int32
}

func (f File) descriptor() (*descriptorpb.FileDescriptorProto, dependencies, error) {
	var deps dependencies
	if len(f.Messages) == 0 {
		return nil, deps, fmt.Errorf("no messages")
	}
	local := map[reflect.Type]int{}
	for i, m := range f.Messages {
		t := reflect.TypeOf(m)
		if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
			return nil, deps, fmt.Errorf("message %d: %v is not a pointer to a struct", i, t)
		}
		local[t] = i
	}
	external := map[reflect.Type]int{}
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String(f.Path),
		Package:    proto.String(f.Package),
		Dependency: f.Imports,
		Syntax:     proto.String("proto3"),
	}
	for _, m := range f.Messages {
		st := reflect.TypeOf(m).Elem()
		if st.NumField() == 0 || st.Field(0).Name != "state" {
			return nil, deps, fmt.Errorf("%s: the first field must be state protoimpl.MessageState", st.Name())
		}
		md := &descriptorpb.DescriptorProto{Name: proto.String(st.Name())}
		for i := 0; i < st.NumField(); i++ {
			sf := st.Field(i)
			tag, ok := sf.Tag.Lookup("protobuf")
			if !ok {
				continue
			}
			fd, msgType, err := fieldDescriptor(sf, tag)
			if err != nil {
				return nil, deps, fmt.Errorf("%s.%s: %w", st.Name(), sf.Name, err)
			}
			if msgType != nil {
				if j, ok := local[msgType]; ok {
					fd.TypeName = proto.String("." + f.Package + "." + msgType.Elem().Name())
					deps.idx = append(deps.idx, int32(j))
				} else {
					pm, ok := reflect.Zero(msgType).Interface().(protoreflect.ProtoMessage)
					if !ok {
						return nil, deps, fmt.Errorf("%v is neither a message of this file nor a generated message", msgType)
					}
					fd.TypeName = proto.String("." + string(pm.ProtoReflect().Descriptor().FullName()))
					j, ok := external[msgType]
					if !ok {
						j = len(f.Messages) + len(deps.types)
						external[msgType] = j
						deps.types = append(deps.types, reflect.Zero(msgType).Interface())
					}
					deps.idx = append(deps.idx, int32(j))
				}
			}
			md.Field = append(md.Field, fd)
		}
		fdp.MessageType = append(fdp.MessageType, md)
	}
	return fdp, deps, nil
}

// fieldDescriptor describes one struct field from its tag, e.g.
// "bytes,1,opt,name=name,proto3", and its Go type. msgType is the
// field's message type (a pointer) for message fields.
func fieldDescriptor(sf reflect.StructField, tag string) (fd *descriptorpb.FieldDescriptorProto, msgType reflect.Type, err error) {
	parts := strings.Split(tag, ",")
	if len(parts) < 3 {
		return nil, nil, fmt.Errorf("bad protobuf tag %q", tag)
	}
	num, err := strconv.Atoi(parts[1])
	if err != nil || num <= 0 {
		return nil, nil, fmt.Errorf("bad field number in %q", tag)
	}
	fd = &descriptorpb.FieldDescriptorProto{Number: proto.Int32(int32(num))}
	label := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
	switch parts[2] {
	case "opt":
	case "rep":
		label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
	default:
		return nil, nil, fmt.Errorf("bad cardinality in %q", tag)
	}
	fd.Label = label.Enum()
	for _, p := range parts[3:] {
		if name, ok := strings.CutPrefix(p, "name="); ok {
			fd.Name = proto.String(name)
		}
	}
	if fd.GetName() == "" {
		return nil, nil, fmt.Errorf("no name in %q", tag)
	}
	fd.JsonName = proto.String(jsonName(fd.GetName()))
	t := sf.Type
	if label == descriptorpb.FieldDescriptorProto_LABEL_REPEATED {
		if t.Kind() != reflect.Slice {
			return nil, nil, fmt.Errorf("repeated field of type %v", t)
		}
		t = t.Elem()
	}
	var typ descriptorpb.FieldDescriptorProto_Type
	wire := "varint"
	switch {
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		typ, wire = descriptorpb.FieldDescriptorProto_TYPE_BYTES, "bytes"
	case t.Kind() == reflect.String:
		typ, wire = descriptorpb.FieldDescriptorProto_TYPE_STRING, "bytes"
	case t.Kind() == reflect.Bool:
		typ = descriptorpb.FieldDescriptorProto_TYPE_BOOL
	case t.Kind() == reflect.Int32:
		typ = descriptorpb.FieldDescriptorProto_TYPE_INT32
	case t.Kind() == reflect.Int64:
		typ = descriptorpb.FieldDescriptorProto_TYPE_INT64
	case t.Kind() == reflect.Uint32:
		typ = descriptorpb.FieldDescriptorProto_TYPE_UINT32
	case t.Kind() == reflect.Uint64:
		typ = descriptorpb.FieldDescriptorProto_TYPE_UINT64
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		typ, wire, msgType = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, "bytes", t
	default:
		return nil, nil, fmt.Errorf("unsupported type %v", sf.Type)
	}
	if parts[0] != wire {
		return nil, nil, fmt.Errorf("tag %q: a %v is encoded as %s", tag, t, wire)
	}
	fd.Type = typ.Enum()
	return fd, msgType, nil
}

// jsonName is protoc's default JSON name: lowerCamelCase of the field name.
func jsonName(name string) string {
	var b strings.Builder
	up := false
	for _, c := range name {
		if c == '_' {
			up = true
			continue
		}
		if up && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		b.WriteRune(c)
	}
	return b.String()
}
