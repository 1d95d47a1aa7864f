package grpcwin

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Codec is the gRPC codec of every Weir connection: the messages of
// proto/weirv1 are marshalled and unmarshalled by the code vtprotobuf
// generates for them (weir_vtproto.pb.go: no reflection, about twice as
// fast as the generic path on the check and forward streams), into
// grpc's pooled buffers; any other message (health, reflection) takes
// the generic protobuf path. The check and replication messages
// decode their repeated elements into one block (block.go). The wire
// format is protobuf either way (name "proto"), so a peer with the default
// codec reads it.
//
// The generated code must match the .proto files: `make proto` generates
// both, and TestVTMatchesProto fails when they differ.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// vtMessage is what vtprotobuf generates for each message.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
	UnmarshalVT([]byte) error
}

// Name is the default codec's, so the content type is unchanged.
func (Codec) Name() string { return "proto" }

// Marshal encodes v.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(vtMessage); ok {
		size := m.SizeVT()
		if mem.IsBelowBufferPoolingThreshold(size) {
			buf := make([]byte, size)
			if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
				return nil, err
			}
			return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
		}
		pool := mem.DefaultBufferPool()
		buf := pool.Get(size)
		if _, err := m.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
			pool.Put(buf)
			return nil, err
		}
		return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
	}
	pm, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("grpcwin: cannot marshal %T: not a proto message", v)
	}
	b, err := proto.Marshal(pm)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// Unmarshal decodes data into v (reset first, as proto.Unmarshal does: a
// caller may receive into a reused message). The generated code copies
// strings and bytes out of data, so its buffer is freed at once.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	if m, ok := v.(vtMessage); ok {
		r, canReset := v.(interface{ Reset() })
		if canReset {
			r.Reset() // UnmarshalVT merges, as proto.Unmarshal after a reset does not
			if unmarshalBlock(buf.ReadOnlyData(), v) {
				return nil
			}
			r.Reset() // decodeBlock gave up part way: decode afresh
		}
		return m.UnmarshalVT(buf.ReadOnlyData())
	}
	pm, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("grpcwin: cannot unmarshal into %T: not a proto message", v)
	}
	return proto.Unmarshal(buf.ReadOnlyData(), pm)
}
