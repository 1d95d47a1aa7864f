package rls

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// recorder stands in for the node: it keeps the items it was asked and
// allows each with one token left.
type recorder struct {
	set   *rules.Set
	mu    sync.Mutex
	asked []limit.Item
}

func (b *recorder) Rules() *rules.Set { return b.set }

func (b *recorder) Check(_ context.Context, items []limit.Item, out []limit.Result) error {
	b.mu.Lock()
	b.asked = append(b.asked, items...)
	b.mu.Unlock()
	for i := range out {
		out[i] = limit.Result{Allowed: true, Remaining: 1, Limit: 2, Window: time.Minute, Reset: time.Second}
	}
	return nil
}

func (b *recorder) take() []limit.Item {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.asked
	b.asked = nil
	return a
}

// FuzzShouldRateLimit reads outside bytes as a RateLimitRequest (the proto
// Envoy sends) and asks a Server over a few descriptor rules. Whatever the
// bytes: no panic; a refusal is InvalidArgument and checks nothing; an
// answer has one status per descriptor, every item the node is asked is
// valid (limit.ValidateItem) and keyed under the request's domain, and
// header values carry no line breaks.
func FuzzShouldRateLimit(f *testing.F) {
	rs := []rules.Rule{
		{ID: "ip", Match: rules.Match{Domain: "edge", Descriptor: []rules.Entry{{Key: "remote_address"}}}, Rate: 5, Period: rules.Duration(time.Minute)},
		{ID: "ip.one", Match: rules.Match{Domain: "edge", Descriptor: []rules.Entry{{Key: "remote_address", Value: "50.0.0.5"}}}, Rate: 9, Period: rules.Duration(time.Second), Replaces: []string{"ip"}},
		{ID: "gold", Match: rules.Match{Domain: "edge", Descriptor: []rules.Entry{{Key: "tenant"}, {Key: "plan", Value: "gold"}}}, Rate: 50, Period: rules.Duration(24 * time.Hour), Shadow: true},
		{ID: "internal", Match: rules.Match{Domain: "edge", Descriptor: []rules.Entry{{Key: "tenant"}, {Key: "plan", Value: "internal"}}}, Unlimited: true},
	}
	for i := range rs {
		rs[i] = rules.Normalize(rs[i])
	}
	if err := rules.Validate(rs); err != nil {
		f.Fatal(err)
	}
	b := &recorder{set: rules.NewSet(1, rs, nil)}
	s, err := New(DefaultConfig(), b)
	if err != nil {
		f.Fatal(err)
	}
	d := func(kv ...string) *rlv3.RateLimitDescriptor {
		out := &rlv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Entries = append(out.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	neg := d("remote_address", "1.2.3.4")
	neg.HitsAddend, neg.IsNegativeHits = wrapperspb.UInt64(3), true
	over := d("remote_address", "1.2.3.4")
	over.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: typev3.RateLimitUnit_MINUTE}
	for _, r := range []*rlsv3.RateLimitRequest{
		{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d("remote_address", "1.2.3.4")}},
		{Domain: "edge", HitsAddend: 2, Descriptors: []*rlv3.RateLimitDescriptor{d("remote_address", "50.0.0.5"), d("tenant", "t", "plan", "gold"), d("tenant", "t", "plan", "internal")}},
		{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{neg, over}},
		{Domain: "other", Descriptors: []*rlv3.RateLimitDescriptor{d("k", "v")}},
		{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d("", "v")}},
		{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d("remote_address", strings.Repeat("v", 300))}},
	} {
		raw, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(raw, &req) != nil {
			return // gRPC refuses it before the service sees it
		}
		resp, err := s.ShouldRateLimit(context.Background(), &req)
		asked := b.take()
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%v: refused with %v, want InvalidArgument", &req, err)
			}
			if len(asked) > 0 {
				t.Fatalf("%v: refused (%v), but %d items were checked", &req, err, len(asked))
			}
			return
		}
		if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
		for _, it := range asked {
			if err := limit.ValidateItem(it.Key, it.Rule, it.Cost); err != nil {
				t.Fatalf("the node was asked an invalid item %+v: %v", it, err)
			}
			if !strings.HasPrefix(it.Key, "rls:"+req.GetDomain()+"|") || it.Group == 0 || int(it.Group) > len(req.GetDescriptors()) {
				t.Fatalf("item %+v for domain %q and %d descriptors", it, req.GetDomain(), len(req.GetDescriptors()))
			}
		}
		for _, h := range resp.GetResponseHeadersToAdd() {
			if strings.ContainsAny(h.GetKey()+h.GetValue(), "\r\n") {
				t.Fatalf("header %q: %q", h.GetKey(), h.GetValue())
			}
		}
		if _, err := proto.Marshal(resp); err != nil {
			t.Fatalf("marshal the answer: %v", err)
		}
	})
}
