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
	req, resp := &weirv1.CheckRequest{}, &weirv1.CheckResponse{}
	req.Items, resp.Results = benchItems()
	var r weirv1.CheckRequest
	var s weirv1.CheckResponse
	benchCodecs(b, req, resp, &r, &s, func() bool { return len(r.Items) == 16 && len(s.Results) == 16 })
}

// BenchmarkCodecStream: the same 16 items and results as CheckStream
// messages, which Codec decodes into one block each (block.go).
func BenchmarkCodecStream(b *testing.B) {
	req, resp := &weirv1.CheckStreamRequest{Id: 7}, &weirv1.CheckStreamResponse{Id: 7}
	req.Items, resp.Results = benchItems()
	var r weirv1.CheckStreamRequest
	var s weirv1.CheckStreamResponse
	benchCodecs(b, req, resp, &r, &s, func() bool { return len(r.Items) == 16 && len(s.Results) == 16 })
}

// benchItems is a batch of 16 check items and their results.
func benchItems() (items []*weirv1.CheckItem, results []*weirv1.CheckResult) {
	for i := range 16 {
		items = append(items, &weirv1.CheckItem{Key: "apikey:b1:sdk:" + strconv.Itoa(40000+i), Rule: "bench.persec", Cost: 1, RuleVersion: 12, Group: uint32(i)})
		results = append(results, &weirv1.CheckResult{Allowed: true, Remaining: 9, Limit: 10, ResetMs: 100, WindowMs: 1000})
	}
	return items, results
}

// benchCodecs encodes req and resp and decodes them into r and s with
// grpc's default codec and with Codec, one sub-benchmark each; decoded
// reports whether r and s came out whole.
func benchCodecs(b *testing.B, req, resp, r, s proto.Message, decoded func() bool) {
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"default", encoding.GetCodecV2("proto")}, {"vtproto", Codec{}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, m := range []struct{ in, out proto.Message }{{req, r}, {resp, s}} {
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
			if !decoded() {
				b.Fatal("decoded messages are not whole")
			}
		})
	}
}
