package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
)

func TestImportBrokenConfigListsLinesAndAppliesNothing(t *testing.T) {
	api := newFakeAPI(t, nil)
	bad := "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n  - key: user\n    colour: red\n"
	path := writeTemp(t, "ratelimit.yaml", bad)
	r := runCLI(t, "", nil, "rules", "import", "--from", "envoy-ratelimit", path, "--addr", api.addr())
	if r.code != exitError || !strings.Contains(r.stderr, "has 2 problems; nothing was sent") ||
		!strings.Contains(r.stderr, path+":4: unit \"fortnight\"") || !strings.Contains(r.stderr, path+":6: unknown descriptor field \"colour\"") {
		t.Errorf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r = runCLI(t, "", nil, "rules", "import", "--from", "redis-cell", path, "--addr", api.addr())
	if r.code != exitUsage {
		t.Errorf("--from redis-cell: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("sent %d requests; want none", n)
	}
}

// TestImportAppliesThroughRaftAndLimits imports envoyproxy/ratelimit's own
// example into a 3-node cluster (a dry run first, which changes nothing)
// and limits through ShouldRateLimit by it.
func TestImportAppliesThroughRaftAndLimits(t *testing.T) {
	c := testcluster.New(t, 3)
	data, err := os.ReadFile("../../rulesraft/rules/envoyrl/testdata/every-field.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := writeTemp(t, "edge.yaml", string(data))
	addr := "http://" + c.Nodes[1].HTTPAddr()
	r := runCLI(t, "", nil, "rules", "import", "--from", "envoy-ratelimit", "--dry-run", path, "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "+ per_ip") || !strings.Contains(r.stdout, "dry run: nothing changed") {
		t.Fatalf("dry run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if n := len(c.Nodes[0].Store().Current().Rules); n != 0 {
		t.Fatalf("a dry run applied %d rules", n)
	}
	r = runCLI(t, "", nil, "rules", "import", "--from", "envoy-ratelimit", "--algorithm", "fixed_window", path, "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "imported 7 rules") || !strings.Contains(r.stderr, "note: ") {
		t.Fatalf("import: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", nil, "rules", "get", "edge.tenant.plan_gold", "--addr", addr)
	for _, want := range []string{"match.domain:", "edge", "match.descriptor:", "tenant,plan=gold", "replaces:", "per_ip", "shadow:", "true"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("rules get: no %q in\n%s%s", want, r.stdout, r.stderr)
		}
	}
	r = runCLI(t, "", nil, "rules", "list", "--addr", addr)
	if !strings.Contains(r.stdout, "edge:remote_address=50.0.0.5") {
		t.Fatalf("rules list:\n%s%s", r.stdout, r.stderr)
	}
	cc, err := grpc.NewClient(c.Nodes[2].GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cl := rlsv3.NewRateLimitServiceClient(cc)
	testwait.For(t, 10*time.Second, "the imported rules on n3", func() error {
		if len(c.Nodes[2].Store().Current().Rules) != 7 {
			return errors.New("not yet")
		}
		return nil
	})
	ok := 0
	// 50.0.0.5 has 20 per 5 minutes; the 21st is over the limit.
	for i := 0; i < 21; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "50.0.0.5"}}}}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			ok++
		}
		if cur := resp.GetStatuses()[0].GetCurrentLimit(); cur.GetRequestsPerUnit() != 20 || cur.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE ||
			cur.GetUnitMultiplier().GetValue() != 5 {
			t.Fatalf("current limit %v", cur)
		}
	}
	if ok != 20 {
		t.Fatalf("%d of 21 passed; want 20", ok)
	}
}
