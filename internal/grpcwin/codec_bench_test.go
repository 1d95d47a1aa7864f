package grpcwin

import (
	"strconv"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"

	_ "google.golang.org/grpc/encoding/proto" // registers the default codec
)

// BenchmarkCodec: one check request of 16 items and its response, encoded
// and decoded by grpc's default codec and by Codec, back to back.
func BenchmarkCodec(b *testing.B) {
	req := &weirv1.CheckRequest{}
	resp := &weirv1.CheckResponse{}
	for i := range 16 {
		req.Items = append(req.Items, &weirv1.CheckItem{Key: "apikey:b1:sdk:" + strconv.Itoa(40000+i), Rule: "bench.persec", Cost: 1, RuleVersion: 12, Group: uint32(i)})
		resp.Results = append(resp.Results, &weirv1.CheckResult{Allowed: true, Remaining: 9, Limit: 10, ResetMs: 100, WindowMs: 1000})
	}
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"default", encoding.GetCodecV2("proto")}, {"vtproto", Codec{}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var r weirv1.CheckRequest
			var s weirv1.CheckResponse
			for b.Loop() {
				for _, m := range []struct{ in, out proto.Message }{{req, &r}, {resp, &s}} {
					data, err := c.codec.Marshal(m.in)
					if err != nil {
						b.Fatal(err)
					}
					if err := c.codec.Unmarshal(data, m.out); err != nil {
						b.Fatal(err)
					}
					data.Free()
				}
			}
			if len(r.Items) != 16 || len(s.Results) != 16 {
				b.Fatalf("%d items, %d results", len(r.Items), len(s.Results))
			}
		})
	}
}

// BenchmarkCodecStream: the same 16 items and results as CheckStream
// messages, which Codec decodes into one block each (block.go).
func BenchmarkCodecStream(b *testing.B) {
	req := &weirv1.CheckStreamRequest{Id: 7}
	resp := &weirv1.CheckStreamResponse{Id: 7}
	for i := range 16 {
		req.Items = append(req.Items, &weirv1.CheckItem{Key: "apikey:b1:sdk:" + strconv.Itoa(40000+i), Rule: "bench.persec", Cost: 1, RuleVersion: 12, Group: uint32(i)})
		resp.Results = append(resp.Results, &weirv1.CheckResult{Allowed: true, Remaining: 9, Limit: 10, ResetMs: 100, WindowMs: 1000})
	}
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"default", encoding.GetCodecV2("proto")}, {"vtproto", Codec{}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var r weirv1.CheckStreamRequest
			var s weirv1.CheckStreamResponse
			for b.Loop() {
				for _, m := range []struct{ in, out proto.Message }{{req, &r}, {resp, &s}} {
					data, err := c.codec.Marshal(m.in)
					if err != nil {
						b.Fatal(err)
					}
					if err := c.codec.Unmarshal(data, m.out); err != nil {
						b.Fatal(err)
					}
					data.Free()
				}
			}
			if len(r.Items) != 16 || len(s.Results) != 16 {
				b.Fatalf("%d items, %d results", len(r.Items), len(s.Results))
			}
		})
	}
}
