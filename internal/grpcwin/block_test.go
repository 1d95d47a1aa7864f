package grpcwin

import (
	"fmt"
	"testing"
	"unsafe"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// The block decoder reads the hot stream messages exactly as the
// generated code does; anything it does not know (an unknown field, a
// wrong wire type, truncated bytes) leaves the message to the generated
// code, through Codec, with the same outcome.
func TestBlockDecodeMatchesVT(t *testing.T) {
	full := []proto.Message{}
	for _, m := range []proto.Message{&weirv1.CheckStreamRequest{}, &weirv1.CheckStreamResponse{}, &weirv1.ReplicateRequest{}, &weirv1.CheckRequest{}, &weirv1.CheckResponse{}} {
		f := m.ProtoReflect().New()
		fill(f, 3)
		full = append(full, f.Interface())
	}
	empty := []proto.Message{&weirv1.CheckStreamRequest{}, &weirv1.CheckStreamResponse{}, &weirv1.ReplicateRequest{}, &weirv1.CheckRequest{}, &weirv1.CheckResponse{}}
	c := Codec{}
	for _, in := range append(full, empty...) {
		name := in.ProtoReflect().Descriptor().Name()
		data, err := proto.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		// The block path is taken for well-formed messages.
		got := in.ProtoReflect().New().Interface()
		if !unmarshalBlock(data, got) {
			t.Fatalf("%s: block decoder refused a well-formed message", name)
		}
		if !proto.Equal(in, got) {
			t.Errorf("%s: block decoder\n in: %v\nout: %v", name, in, got)
		}
		variants := map[string][]byte{
			"unknown field":    protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), data...), 99, protowire.VarintType), 7),
			"wrong wire type":  protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), data...), 1, protowire.Fixed64Type), 7),
			"truncated":        data[:len(data)/2],
			"as sent":          data,
			"bad element":      protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), data...), blockField(in), protowire.BytesType), []byte{0xff}),
			"fixed32 at top":   protowire.AppendFixed32(protowire.AppendTag(append([]byte(nil), data...), 5, protowire.Fixed32Type), 1),
			"a repeated twice": append(append([]byte(nil), data...), data...),
		}
		for what, b := range variants {
			want := in.ProtoReflect().New().Interface()
			wantErr := want.(vtMessage).UnmarshalVT(b)
			got := in.ProtoReflect().New()
			fill(got, 1) // a used message: Codec resets it
			gotErr := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got.Interface())
			if (wantErr == nil) != (gotErr == nil) {
				t.Errorf("%s, %s: error %v, generated code's %v", name, what, gotErr, wantErr)
				continue
			}
			if wantErr == nil && !proto.Equal(want, got.Interface()) {
				t.Errorf("%s, %s:\n got: %v\nwant: %v", name, what, got.Interface(), want)
			}
		}
	}
}

// blockField is the number of the message's repeated element field.
func blockField(m proto.Message) protowire.Number {
	switch m.(type) {
	case *weirv1.ReplicateRequest:
		return 3
	case *weirv1.CheckRequest, *weirv1.CheckResponse:
		return 1
	}
	return 2
}

// An item with a field the decoder does not know is decoded by the
// generated code (unknown field kept), and the rest of the batch is not
// affected; rule names are shared between items, up to maxInterned names.
func TestBlockDecodeItems(t *testing.T) {
	item := func(rule string) []byte {
		b, err := proto.Marshal(&weirv1.CheckItem{Key: "apikey:" + rule, Rule: rule, Cost: -3, Group: 7, Refund: true, Hops: 1, OverrideBurst: 9})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	odd := protowire.AppendVarint(protowire.AppendTag(item("r1"), 77, protowire.VarintType), 5)
	var data []byte
	for _, b := range [][]byte{item("r1"), odd, item("r1")} {
		data = protowire.AppendBytes(protowire.AppendTag(data, 2, protowire.BytesType), b)
	}
	want := &weirv1.CheckStreamRequest{}
	if err := want.UnmarshalVT(data); err != nil {
		t.Fatal(err)
	}
	got := &weirv1.CheckStreamRequest{}
	if !unmarshalBlock(data, got) {
		t.Fatal("block decoder refused a batch with one odd item")
	}
	if !proto.Equal(want, got) || len(got.Items[1].ProtoReflect().GetUnknown()) == 0 {
		t.Fatalf("got %v, want %v", got, want)
	}
	if unsafe.StringData(got.Items[0].Rule) != unsafe.StringData(got.Items[2].Rule) {
		t.Error("the two items' rule names were allocated apart")
	}
	for i := range 2 * maxInterned {
		rules.intern([]byte(fmt.Sprintf("made-up-%d", i)))
	}
	if n := len(*rules.m.Load()); n > maxInterned {
		t.Errorf("%d names interned, at most %d", n, maxInterned)
	}
}
