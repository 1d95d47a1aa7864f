package rls

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weirlimit/weir/limit/headers"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// reflective decodes raw as the generated code does, then fromProto.
func reflective(raw []byte) (Request, error) {
	var pb rlsv3.RateLimitRequest
	if err := proto.Unmarshal(raw, &pb); err != nil {
		return Request{}, err
	}
	return fromProto(&pb), nil
}

// checkDecode fails t unless decodeRequest and the reflective codec agree
// on raw: both refuse it, or both give the same Request.
func checkDecode(t *testing.T, raw []byte) {
	t.Helper()
	want, werr := reflective(raw)
	var got Request
	gerr := decodeRequest(raw, &got)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("%x: hand-decoded err %v, reflective err %v", raw, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%x:\nhand-decoded %+v %s\nreflective   %+v %s", raw, got, overrides(got), want, overrides(want))
	}
}

func overrides(r Request) string {
	var sb strings.Builder
	for _, d := range r.Descriptors {
		if d.Override != nil {
			fmt.Fprintf(&sb, "%+v ", *d.Override)
		}
	}
	return sb.String()
}

func randString(rng *rand.Rand) string {
	const alphabet = "ab_:.é日\x00"
	var sb strings.Builder
	for range rng.IntN(6) {
		sb.WriteString(string([]rune(alphabet)[rng.IntN(len([]rune(alphabet)))]))
	}
	return sb.String()
}

func randRequest(rng *rand.Rand) *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: randString(rng), HitsAddend: rng.Uint32N(4) * rng.Uint32()}
	for range rng.IntN(4) {
		d := &rlv3.RateLimitDescriptor{IsNegativeHits: rng.IntN(3) == 0}
		for range rng.IntN(4) {
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: randString(rng), Value: randString(rng)})
		}
		if rng.IntN(2) == 0 {
			d.HitsAddend = wrapperspb.UInt64(rng.Uint64N(3) * rng.Uint64())
		}
		if rng.IntN(2) == 0 {
			d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rng.Uint32N(3) * rng.Uint32(), Unit: typev3.RateLimitUnit(rng.Int32N(10) - 1)}
			if rng.IntN(2) == 0 {
				d.Limit.UnitMultiplier = wrapperspb.UInt32(rng.Uint32N(3))
			}
		}
		r.Descriptors = append(r.Descriptors, d)
	}
	return r
}

// mutate changes a well-formed encoding the ways a peer may: unknown
// fields, known fields of the wrong wire type, a second encoding appended
// (proto merges it), a bad UTF-8 string, a cut.
func mutate(rng *rand.Rand, raw []byte) []byte {
	switch rng.IntN(6) {
	case 0:
		raw = protowire.AppendTag(raw, protowire.Number(4+rng.IntN(20)), protowire.VarintType)
		raw = protowire.AppendVarint(raw, rng.Uint64())
	case 1:
		raw = protowire.AppendTag(raw, protowire.Number(1+rng.IntN(3)), protowire.Fixed32Type)
		raw = protowire.AppendFixed32(raw, rng.Uint32())
	case 2:
		more, _ := proto.Marshal(randRequest(rng))
		raw = append(raw, more...)
	case 3:
		raw = protowire.AppendTag(raw, 1, protowire.BytesType)
		raw = protowire.AppendBytes(raw, []byte{'a', 0xff})
	case 4:
		if len(raw) > 0 {
			raw = raw[:rng.IntN(len(raw))]
		}
	}
	return raw
}

// The hand-written decoder gives what the reflective codec gives, on
// random requests and on random changes to them.
func TestWireDecodeMatchesReflective(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 1))
	for range 20_000 {
		raw, err := proto.Marshal(randRequest(rng))
		if err != nil {
			t.Fatal(err)
		}
		checkDecode(t, raw)
		checkDecode(t, mutate(rng, raw))
	}
}

// FuzzWireRequest: on any bytes, the hand-written decoder and the
// reflective codec agree.
func FuzzWireRequest(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		raw, _ := proto.Marshal(randRequest(rng))
		f.Add(raw)
	}
	f.Fuzz(checkDecode)
}

func randResponse(rng *rand.Rand) Response {
	codes := []Code{OK, OverLimit}
	r := Response{Overall: codes[rng.IntN(2)]}
	windows := []time.Duration{0, time.Second, 90 * time.Second, time.Minute, 2 * time.Hour, 24 * time.Hour, 1500 * time.Millisecond, 1 << 62}
	vals := []int64{0, 1, -5, 7, 1<<32 - 1, 1 << 32, 1 << 40}
	for range rng.IntN(4) {
		s := Status{Code: codes[rng.IntN(2)], Unlimited: rng.IntN(4) == 0}
		if rng.IntN(3) > 0 {
			s.Rule = randString(rng) + "r"
			s.Limit, s.Remaining = vals[rng.IntN(len(vals))], vals[rng.IntN(len(vals))]
			s.Window = windows[rng.IntN(len(windows))]
			s.Reset = time.Duration(vals[rng.IntN(len(vals))]) * time.Duration(rng.IntN(1e6))
		}
		r.Statuses = append(r.Statuses, s)
	}
	for range rng.IntN(3) {
		r.Headers = append(r.Headers, headers.Field{Name: randString(rng), Value: randString(rng)})
	}
	return r
}

// The hand-written encoder writes the bytes proto.Marshal writes for
// toProto's message, and SizeVT is their length.
func TestWireEncodeMatchesReflective(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 2))
	for range 20_000 {
		r := randResponse(rng)
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(toProto(r))
		if err != nil {
			t.Fatal(err)
		}
		w := &wireResponse{r: r}
		got := make([]byte, w.SizeVT())
		if _, err := w.MarshalToSizedBufferVT(got); err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if !bytes.Equal(got, want) {
			var back rlsv3.RateLimitResponse
			_ = proto.Unmarshal(got, &back)
			t.Fatalf("%+v:\nhand-encoded %x (%v)\nreflective   %x (%v)", r, got, &back, want, toProto(r))
		}
	}
}

// Under a server with gRPC's default codec (not a node's), the service
// still answers, through the generated messages.
func TestWireDefaultCodec(t *testing.T) {
	rs := []rules.Rule{rules.Normalize(rules.Rule{ID: "ip", Match: rules.Match{Domain: "edge", Descriptor: []rules.Entry{{Key: "remote_address"}}}, Rate: 5, Period: rules.Duration(time.Minute)})}
	s, err := New(DefaultConfig(), &recorder{set: rules.NewSet(1, rs, nil)})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	defer func() { g.Stop(); <-served }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "1.2.3.4"}}}}}
	resp, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(resp, want) || len(resp.GetStatuses()) != 1 || resp.GetStatuses()[0].GetCurrentLimit().GetName() != "ip" {
		t.Fatalf("answered %v, want %v", resp, want)
	}
}

func BenchmarkWireDecode(b *testing.B) {
	raw, _ := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}, {Key: "path", Value: "/v1/orders"}}}}})
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		var r Request
		for b.Loop() {
			_ = decodeRequest(raw, &r)
		}
	})
	b.Run("reflective", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = reflective(raw)
		}
	})
}

func BenchmarkWireEncode(b *testing.B) {
	r := Response{Overall: OK, Statuses: []Status{{Code: OK, Rule: "ip", Limit: 100, Remaining: 99, Window: time.Second, Reset: 10 * time.Millisecond}},
		Headers: []headers.Field{{Name: "RateLimit-Limit", Value: "100"}, {Name: "RateLimit-Remaining", Value: "99"}}}
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w := &wireResponse{r: r}
			buf := make([]byte, w.SizeVT())
			_, _ = w.MarshalToSizedBufferVT(buf)
		}
	})
	b.Run("reflective", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = proto.Marshal(toProto(r))
		}
	})
}
