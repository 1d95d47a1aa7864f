package rls_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/node"
	"github.com/weirlimit/weir/node/rls"
)

const rulesYAML = `rules:
  - id: edge.addr
    match: {domain: edge, descriptor: [{key: remote_address}]}
    rate: 5
    period: 1h
  - id: edge.path
    match: {domain: edge, descriptor: [{key: path, value: /v1/*}]}
    rate: 3
    period: 1h
  - id: edge.shadow
    match: {domain: edge, descriptor: [{key: tenant}]}
    rate: 1
    period: 1h
    shadow: true
  - id: edge.plan
    match: {domain: edge, descriptor: [{key: tenant}, {key: plan}]}
    rate: 2
    period: 1h
  - id: edge.gold
    match: {domain: edge, descriptor: [{key: tenant}, {key: plan, value: gold}]}
    rate: 4
    period: 1h
    replaces: [edge.addr]
  - id: edge.free
    match: {domain: edge, descriptor: [{key: tenant}, {key: plan, value: free}]}
    unlimited: true
`

// rlsClients dials every node's gRPC port with go-control-plane's client.
func rlsClients(t *testing.T, c *testcluster.Cluster) []rlsv3.RateLimitServiceClient {
	t.Helper()
	var out []rlsv3.RateLimitServiceClient
	for _, addr := range c.GRPCAddrs() {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		out = append(out, rlsv3.NewRateLimitServiceClient(cc))
	}
	return out
}

func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func ask(t *testing.T, cl rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

func header(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if strings.EqualFold(h.GetKey(), name) {
			return h.GetValue()
		}
	}
	return ""
}

// remaining peeks (descriptor hits_addend 0) at a descriptor's remaining.
func remaining(t *testing.T, cl rlsv3.RateLimitServiceClient, d *rlv3.RateLimitDescriptor) uint32 {
	t.Helper()
	p := &rlv3.RateLimitDescriptor{Entries: d.Entries, HitsAddend: wrapperspb.UInt64(0)}
	resp := ask(t, cl, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{p}})
	st := resp.GetStatuses()[0]
	if st.GetCurrentLimit() == nil {
		t.Fatalf("peek of %v: no current limit", d)
	}
	return st.GetLimitRemaining()
}

// metricSum adds up one sample line's value over every node's /metrics.
func metricSum(t *testing.T, c *testcluster.Cluster, series string) float64 {
	t.Helper()
	var sum float64
	for _, n := range c.Live() {
		resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, series+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				sum += f
			}
		}
	}
	return sum
}

func TestShouldRateLimitCluster(t *testing.T) {
	// Trusting negative hits and overrides, as an operator who controls
	// Envoy may (--rls-trust); TestShouldRateLimitUntrusted is the default.
	c := testcluster.NewConfigured(t, 3, func(cfg *node.Config) { cfg.RLSTrust = rls.Trust{NegativeHits: true, Overrides: true} })
	c.ApplyRules(rulesYAML)
	cls := rlsClients(t, c)

	t.Run("exact counts across nodes", func(t *testing.T) {
		var ok, over int
		for i := 0; i < 9; i++ {
			resp := ask(t, cls[i%3], &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}})
			st := resp.GetStatuses()[0]
			switch resp.GetOverallCode() {
			case rlsv3.RateLimitResponse_OK:
				ok++
			case rlsv3.RateLimitResponse_OVER_LIMIT:
				over++
				if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || header(resp, "Retry-After") == "" {
					t.Fatalf("over limit without status or Retry-After: %v", resp)
				}
			}
			cur := st.GetCurrentLimit()
			if cur.GetName() != "edge.addr" || cur.GetRequestsPerUnit() != 5 || cur.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR ||
				st.GetDurationUntilReset().AsDuration() <= 0 {
				t.Fatalf("status %v", st)
			}
			if got := header(resp, "X-RateLimit-Limit"); got != "5" {
				t.Fatalf("X-RateLimit-Limit %q in %v", got, resp.GetResponseHeadersToAdd())
			}
			if !strings.HasPrefix(header(resp, "RateLimit-Policy"), `"edge.addr";q=5`) {
				t.Fatalf("RateLimit-Policy %q", header(resp, "RateLimit-Policy"))
			}
		}
		if ok != 5 || over != 4 {
			t.Fatalf("ok %d over %d; want exactly 5 and 4", ok, over)
		}
	})

	t.Run("hits_addend, peek and negative hits", func(t *testing.T) {
		d := desc("remote_address", "10.0.0.2")
		resp := ask(t, cls[0], &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{d}})
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 2 {
			t.Fatalf("hits 3: %v", resp)
		}
		if r := remaining(t, cls[1], d); r != 2 {
			t.Fatalf("peek: remaining %d, want 2", r)
		}
		if r := remaining(t, cls[2], d); r != 2 {
			t.Fatalf("a second peek took tokens: remaining %d", r)
		}
		// A descriptor's hits_addend wins over the request's.
		own := &rlv3.RateLimitDescriptor{Entries: d.Entries, HitsAddend: wrapperspb.UInt64(2)}
		resp = ask(t, cls[1], &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 5, Descriptors: []*rlv3.RateLimitDescriptor{own}})
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 0 {
			t.Fatalf("descriptor hits 2: %v", resp)
		}
		resp = ask(t, cls[2], &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d}})
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("exhausted: %v", resp)
		}
		neg := &rlv3.RateLimitDescriptor{Entries: d.Entries, HitsAddend: wrapperspb.UInt64(2), IsNegativeHits: true}
		resp = ask(t, cls[0], &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{neg}})
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("refund: %v", resp)
		}
		if r := remaining(t, cls[1], d); r != 2 {
			t.Fatalf("after giving 2 back: remaining %d, want 2", r)
		}
	})

	t.Run("unknown domain and descriptor are not limited", func(t *testing.T) {
		for _, req := range []*rlsv3.RateLimitRequest{
			{Domain: "nope", Descriptors: []*rlv3.RateLimitDescriptor{desc("remote_address", "1")}},
			{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "1")}},
			{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{desc("remote_address", "1", "extra", "x")}},
		} {
			for i := 0; i < 7; i++ {
				resp := ask(t, cls[i%3], req)
				if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 1 ||
					resp.GetStatuses()[0].GetCurrentLimit() != nil || len(resp.GetResponseHeadersToAdd()) != 0 {
					t.Fatalf("%v: %v", req, resp)
				}
			}
		}
	})

	t.Run("shadow rules are decided but never over the limit", func(t *testing.T) {
		d := desc("tenant", "t1")
		for i := 0; i < 3; i++ {
			resp := ask(t, cls[i], &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d}})
			st := resp.GetStatuses()[0]
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetCode() != rlsv3.RateLimitResponse_OK ||
				st.GetCurrentLimit().GetName() != "edge.shadow" || st.GetLimitRemaining() != 0 {
				t.Fatalf("shadow %d: %v", i, resp)
			}
		}
		// Decided and counted: 1 allowed, 2 that would have been denied.
		if got := metricSum(t, c, `weir_rls_decisions_total{outcome="shadow_over_limit",rule="edge.shadow"}`); got != 2 {
			t.Fatalf("shadow_over_limit counted %v times, want 2", got)
		}
		if got := metricSum(t, c, `weir_rls_decisions_total{outcome="ok",rule="edge.shadow"}`); got != 1 {
			t.Fatalf("shadow ok counted %v times, want 1", got)
		}
	})

	t.Run("most specific pattern, replaces and unlimited", func(t *testing.T) {
		addr := desc("remote_address", "10.0.0.3")
		gold := desc("tenant", "t2", "plan", "gold")
		// edge.gold replaces edge.addr in a request carrying both.
		for i := 0; i < 6; i++ {
			resp := ask(t, cls[i%3], &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{addr, gold}})
			if g := resp.GetStatuses()[1].GetCurrentLimit().GetName(); g != "edge.gold" {
				t.Fatalf("gold descriptor reported %q", g)
			}
			if resp.GetStatuses()[0].GetCurrentLimit() != nil {
				t.Fatalf("replaced rule still applied: %v", resp)
			}
			if want := i < 4; (resp.GetOverallCode() == rlsv3.RateLimitResponse_OK) != want {
				t.Fatalf("request %d: %v", i, resp)
			}
		}
		if r := remaining(t, cls[0], addr); r != 5 {
			t.Fatalf("replaced edge.addr took tokens: remaining %d", r)
		}
		free := desc("tenant", "t2", "plan", "free")
		for i := 0; i < 5; i++ {
			resp := ask(t, cls[i%3], &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{free}})
			if st := resp.GetStatuses()[0]; resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit() != nil ||
				st.GetLimitRemaining() != 1<<32-1 {
				t.Fatalf("unlimited: %v", resp)
			}
		}
	})

	t.Run("all or nothing", func(t *testing.T) {
		full := desc("path", "/v1/orders")
		for i := 0; i < 3; i++ {
			ask(t, cls[i], &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{full}})
		}
		other := desc("remote_address", "10.0.0.4")
		resp := ask(t, cls[1], &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{other, full}})
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT ||
			resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[1].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%v", resp)
		}
		if r := remaining(t, cls[2], other); r != 5 {
			t.Fatalf("a denied request took from its other descriptor: remaining %d, want 5", r)
		}
	})

	t.Run("limit override", func(t *testing.T) {
		// edge.addr is 5 per hour; the descriptor asks for 8 per day.
		d := desc("remote_address", "10.0.0.6")
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 8, Unit: typev3.RateLimitUnit_DAY}
		ok := 0
		for i := 0; i < 10; i++ {
			resp := ask(t, cls[i%3], &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d}})
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				ok++
			}
			cur := resp.GetStatuses()[0].GetCurrentLimit()
			if cur.GetName() != "edge.addr" || cur.GetRequestsPerUnit() != 8 || cur.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY {
				t.Fatalf("current limit %v", cur)
			}
		}
		if ok != 8 {
			t.Fatalf("%d of 10 passed the override of 8", ok)
		}
		// A descriptor that matches no rule is not limited, override or not.
		u := desc("user", "u1")
		u.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND}
		for i := 0; i < 3; i++ {
			if resp := ask(t, cls[i], &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{u}}); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("unmatched with override: %v", resp)
			}
		}
	})

	t.Run("bad requests change nothing", func(t *testing.T) {
		d := desc("remote_address", "10.0.0.5")
		many := make([]*rlv3.RateLimitDescriptor, 10000)
		for i := range many {
			many[i] = d
		}
		huge := desc("remote_address", strings.Repeat("x", 1<<20))
		for name, req := range map[string]*rlsv3.RateLimitRequest{
			"empty domain":       {Descriptors: []*rlv3.RateLimitDescriptor{d}},
			"10,000 descriptors": {Domain: "edge", Descriptors: many},
			"huge value":         {Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d, huge}},
			"huge hits":          {Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d, {Entries: d.Entries, HitsAddend: wrapperspb.UInt64(1 << 40)}}},
			"no descriptors":     {Domain: "edge"},
			"empty entry key":    {Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d, desc("", "v")}},
			"override in months": {Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d, {Entries: d.Entries,
				Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 100, Unit: typev3.RateLimitUnit_MONTH}}}},
			"override of 0": {Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d, {Entries: d.Entries,
				Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{Unit: typev3.RateLimitUnit_SECOND}}}},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := cls[0].ShouldRateLimit(ctx, req)
			cancel()
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() == "" {
				t.Fatalf("%s: want InvalidArgument with a message, got %v", name, err)
			}
		}
		if r := remaining(t, cls[1], d); r != 5 {
			t.Fatalf("a refused request changed a counter: remaining %d, want 5", r)
		}
	})
}

// TestShouldRateLimitUntrusted: by default an Envoy request cannot give
// hits back or raise a rule's limit (issue 25, finding 3); what was ignored
// is counted.
func TestShouldRateLimitUntrusted(t *testing.T) {
	c := testcluster.New(t, 1)
	c.ApplyRules(rulesYAML)
	cl := rlsClients(t, c)[0]
	d := desc("remote_address", "10.9.0.1")
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d}}
	for i := 0; i < 5; i++ {
		if resp := ask(t, cl, req); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("hit %d of 5: %v", i+1, resp)
		}
	}
	if resp := ask(t, cl, req); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("6th hit: %v", resp)
	}
	neg := &rlv3.RateLimitDescriptor{Entries: d.Entries, HitsAddend: wrapperspb.UInt64(5), IsNegativeHits: true}
	ask(t, cl, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{neg}})
	if r := remaining(t, cl, d); r != 0 {
		t.Fatalf("negative hits gave %d back", r)
	}
	if resp := ask(t, cl, req); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after negative hits: %v; want still OVER_LIMIT", resp)
	}

	// edge.addr is 5 per hour; the descriptor asks for 1,000,000 a second.
	o := desc("remote_address", "10.9.0.2")
	o.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1_000_000, Unit: typev3.RateLimitUnit_SECOND}
	ok := 0
	for i := 0; i < 10; i++ {
		resp := ask(t, cl, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{o}})
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			ok++
		}
		if cur := resp.GetStatuses()[0].GetCurrentLimit(); cur.GetRequestsPerUnit() != 5 || cur.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
			t.Fatalf("current limit %v; want the rule's 5 per hour", cur)
		}
	}
	if ok != 5 {
		t.Fatalf("%d of 10 passed with an untrusted override; want the rule's 5", ok)
	}
	if got := metricSum(t, c, `weir_rls_ignored_total{kind="negative_hits"}`); got != 1 {
		t.Fatalf("ignored negative hits counted %v, want 1", got)
	}
	if got := metricSum(t, c, `weir_rls_ignored_total{kind="override"}`); got != 10 {
		t.Fatalf("ignored overrides counted %v, want 10", got)
	}
}
