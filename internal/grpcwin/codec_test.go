package grpcwin

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// fill sets every field of m (one per oneof) to a value that is not the
// default, down to depth levels of nested messages.
func fill(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() && m.WhichOneof(o) != nil {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range 2 {
				if fd.Kind() == protoreflect.MessageKind {
					if depth > 0 {
						e := l.NewElement()
						fill(e.Message(), depth-1)
						l.Append(e)
					}
				} else {
					l.Append(scalar(fd, int64(l.Len()+1)))
				}
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			k := scalar(fd.MapKey(), 7).MapKey()
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				if depth > 0 {
					v := mp.NewValue()
					fill(v.Message(), depth-1)
					mp.Set(k, v)
				}
			} else {
				mp.Set(k, scalar(fd.MapValue(), 9))
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			if depth > 0 {
				fill(m.Mutable(fd).Message(), depth-1)
			}
		default:
			m.Set(fd, scalar(fd, 3))
		}
	}
}

func scalar(fd protoreflect.FieldDescriptor, n int64) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(vs.Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(-n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(-n << 33)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(n) << 40)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(n) + 0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(n) + 0.25)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("s" + string(rune('a'+n)))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{byte(n), 0, 0xff})
	}
	panic("unhandled kind " + fd.Kind().String())
}

// TestVTMatchesProto: for every message of proto/weirv1, with every field
// set, the vtprotobuf code and the generic protobuf code read each other's
// bytes back to an equal message, through Codec. A field added to the
// .proto without regenerating weir_vtproto.pb.go (make proto) fails here:
// vtprotobuf would drop it on the wire.
func TestVTMatchesProto(t *testing.T) {
	msgs := weirv1.File_weir_v1_weir_proto.Messages()
	if msgs.Len() < 10 {
		t.Fatalf("only %d messages", msgs.Len())
	}
	c := Codec{}
	for i := 0; i < msgs.Len(); i++ {
		md := msgs.Get(i)
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
		if err != nil {
			t.Fatal(err)
		}
		m := mt.New()
		fill(m, 3)
		in := m.Interface()
		if _, ok := in.(vtMessage); !ok {
			t.Errorf("%s: no vtprotobuf methods", md.FullName())
			continue
		}
		// vtprotobuf's bytes read by the generic code.
		data, err := c.Marshal(in)
		if err != nil {
			t.Fatalf("%s: %v", md.FullName(), err)
		}
		back := mt.New().Interface()
		if err := proto.Unmarshal(data.Materialize(), back); err != nil || !proto.Equal(in, back) {
			t.Errorf("%s: vtprotobuf → protobuf: %v\n in: %v\nout: %v", md.FullName(), err, in, back)
		}
		// The generic code's bytes read by vtprotobuf, into a used message.
		b, err := proto.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		used := mt.New()
		fill(used, 1)
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, used.Interface()); err != nil || !proto.Equal(in, used.Interface()) {
			t.Errorf("%s: protobuf → vtprotobuf: %v\n in: %v\nout: %v", md.FullName(), err, in, used.Interface())
		}
	}
	// A message without vtprotobuf methods takes the generic path.
	dm := dynamicpb.NewMessage(msgs.Get(0))
	fill(dm, 2)
	data, err := c.Marshal(dm)
	if err != nil {
		t.Fatal(err)
	}
	back := dynamicpb.NewMessage(msgs.Get(0))
	if err := c.Unmarshal(data, back); err != nil || !proto.Equal(dm, back) {
		t.Errorf("dynamic message: %v", err)
	}
}
