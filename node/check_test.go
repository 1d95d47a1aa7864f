package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/ring"
)

const checkRules = `
rules:
  - id: three
    match: {route: /t, method: GET}
    key: apikey
    rate: 1
    period: 1h
    burst: 3
`

// Batches mixing a key decided locally, a key forwarded to its owner and an
// unknown rule: each is decided exactly (burst 3, then denied), the
// caller's items are not changed (the rule version a forwarded item carries
// goes on a copy), and weir_checks_total counts every decision by rule.
func TestCheckLocalForwardedAndCounted(t *testing.T) {
	c := testcluster.New(t, 3)
	ver := c.ApplyRules(checkRules)
	entry := c.Nodes[0]
	local, remote := keysByOwner(t, entry)

	for round := 0; round < 5; round++ {
		items := []limit.Item{
			{Key: local, Rule: "three", Cost: 1},
			{Key: remote, Rule: "three", Cost: 1},
			{Key: local, Rule: "nope", Cost: 1},
		}
		res := make([]limit.Result, len(items))
		if err := entry.Check(context.Background(), items, res); err != nil {
			t.Fatal(err)
		}
		for i, it := range items {
			if it.RuleVersion != 0 {
				t.Fatalf("round %d: item %d RuleVersion changed to %d (the rule set is at %d)", round, i, it.RuleVersion, ver)
			}
		}
		want := round < 3
		for i := 0; i < 2; i++ {
			if res[i].Code != limit.CodeNone || res[i].Allowed != want {
				t.Fatalf("round %d: item %d = %v, want allowed=%v", round, i, res[i], want)
			}
		}
		if res[2].Code != limit.CodeUnknownRule {
			t.Fatalf("round %d: unknown rule answered %v", round, res[2])
		}
	}

	metrics := scrape(t, entry.HTTPAddr())
	for _, line := range []string{
		`weir_checks_total{decision="allowed",rule="three"} 6`,
		`weir_checks_total{decision="denied",rule="three"} 4`,
		`weir_checks_total{decision="error",rule="(invalid)"} 5`,
	} {
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
	if strings.Contains(metrics, `rule="nope"`) {
		t.Error(`an unknown rule name became a label value (rule="nope")`)
	}
}

// memberRing builds the ring nd's member list gives, as a gateway does.
func memberRing(tb testing.TB, nd *node.Node) *ring.Ring {
	tb.Helper()
	m := nd.Members()
	var ids []string
	for _, mm := range m.Members {
		if mm.State == "alive" || mm.State == "suspect" {
			ids = append(ids, mm.ID)
		}
	}
	r, err := ring.New(ids, ring.Config{
		PartitionCount:    int(m.PartitionCount),
		ReplicationFactor: int(m.ReplicationFactor),
		Load:              m.Load,
		Replicas:          ring.DefaultReplicas,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// keysByOwner returns a key nd owns and one another member owns.
func keysByOwner(t *testing.T, nd *node.Node) (local, remote string) {
	t.Helper()
	r := memberRing(t, nd)
	for k := 0; k < 10_000 && (local == "" || remote == ""); k++ {
		key := fmt.Sprintf("apikey:t%d", k)
		if r.Owner(key) == nd.ID() {
			if local == "" {
				local = key
			}
		} else if remote == "" {
			remote = key
		}
	}
	if local == "" || remote == "" {
		t.Fatalf("no local (%q) or remote (%q) key in 10,000", local, remote)
	}
	return local, remote
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A node that has no ring yet (its gossip join has not succeeded: the
// address it joins never answers) fails a check as a whole with
// Unavailable: HTTP 503 unavailable, gRPC Unavailable. Before, the API
// could not see the node's sentinel and answered 500 / Internal.
func TestCheckWithoutRingIsUnavailable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	_ = lis.Close()
	cfg := testcluster.Config(t, "lonely")
	cfg.Join = []string{dead}
	nd, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nd.Close() })
	if err := nd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := nd.Ready(); err == nil || !strings.Contains(err.Error(), "no cluster view") {
		t.Fatalf("Ready() = %v, want no cluster view", err)
	}

	resp, err := http.Post("http://"+nd.HTTPAddr()+"/v1/limits/check", "application/json", strings.NewReader(`{"key":"apikey:a","rule":"three"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"unavailable"`) {
		t.Errorf("HTTP check: %d %s, want 503 unavailable", resp.StatusCode, body)
	}

	cc, err := grpc.NewClient(nd.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	_, err = weirv1.NewLimiterClient(cc).Check(context.Background(), &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: "apikey:a", Rule: "three", Cost: 1}}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC check: %v, want Unavailable", err)
	}
	if err := nd.Check(context.Background(), []limit.Item{{Key: "apikey:a", Rule: "three", Cost: 1}}, make([]limit.Result, 1)); !errors.Is(err, limit.ErrUnavailable) {
		t.Errorf("Node.Check: %v, want limit.ErrUnavailable", err)
	}
}

const groupRules = checkRules + `  - id: big
    match: {route: /b, method: GET}
    key: apikey
    rate: 1
    period: 1h
    burst: 100
`

// The group contract across nodes: items of one group pass only if all
// pass; when one is denied, the others that would have passed are
// answered allowed=false, voided=true (on the wire too), and give their
// tokens back, wherever their owner is.
func TestGroupVoidedAcrossNodes(t *testing.T) {
	c := testcluster.New(t, 2)
	c.ApplyRules(groupRules)
	entry := c.Nodes[0]
	local, remote := keysByOwner(t, entry)
	check := func(items ...limit.Item) []limit.Result {
		t.Helper()
		res := make([]limit.Result, len(items))
		if err := entry.Check(context.Background(), items, res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	if r := check(limit.Item{Key: remote, Rule: "three", Cost: 3}); !r[0].Allowed {
		t.Fatalf("spending the remote key: %+v", r[0])
	}

	// The remote item is denied: the local one is voided, through gRPC.
	cc, err := grpc.NewClient(entry.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	resp, err := weirv1.NewLimiterClient(cc).Check(context.Background(), &weirv1.CheckRequest{Items: []*weirv1.CheckItem{
		{Key: local, Rule: "big", Cost: 2, Group: 5},
		{Key: remote, Rule: "three", Cost: 1, Group: 5},
		{Key: local, Rule: "three", Cost: 1, Group: 6}, // another group: untouched
	}})
	if err != nil {
		t.Fatal(err)
	}
	v, d, other := resp.Results[0], resp.Results[1], resp.Results[2]
	if v.Allowed || !v.Voided || v.RetryAfterMs != 0 || v.ErrorCode != 0 {
		t.Errorf("local item of the denied group: %v, want allowed=false voided=true", v)
	}
	if d.Allowed || d.Voided || d.RetryAfterMs <= 0 {
		t.Errorf("the denied remote item: %v, want denied on its own, not voided", d)
	}
	if !other.Allowed || other.Voided {
		t.Errorf("item of another group: %v, want allowed", other)
	}
	if r := check(limit.Item{Key: local, Rule: "big"}); r[0].Remaining != 100 {
		t.Errorf("local key after the voided group: %d left, want 100 (its tokens given back)", r[0].Remaining)
	}

	// The local item is denied: the remote one is voided and refunded.
	if r := check(limit.Item{Key: local, Rule: "three", Cost: 2}); !r[0].Allowed {
		t.Fatalf("spending the local key: %+v", r[0])
	}
	r := check(limit.Item{Key: remote, Rule: "big", Cost: 5, Group: 1}, limit.Item{Key: local, Rule: "three", Cost: 1, Group: 1})
	if r[0].Allowed || !r[0].Voided || r[1].Allowed || r[1].Voided {
		t.Errorf("group with the local item denied: %+v, want the remote item voided", r)
	}
	if r := check(limit.Item{Key: remote, Rule: "big"}); r[0].Remaining != 100 {
		t.Errorf("remote key after the voided group: %d left, want 100 (its tokens given back)", r[0].Remaining)
	}
}

// A rule at its max_keys on the owner refuses new keys with their own code
// (key_cap, handled like unavailable: the rule's fail mode applies at the
// caller), counts them in weir_shard_key_cap_hits_total, and keeps
// deciding the keys it holds.
func TestCheckKeyCap(t *testing.T) {
	c := testcluster.New(t, 1)
	c.ApplyRules(`
rules:
  - id: capped
    match: {route: /c, method: GET}
    key: apikey
    rate: 1
    period: 1h
    burst: 3
    max_keys: 1
`)
	nd := c.Nodes[0]
	var held []string
	refused := 0
	for k := range 20 {
		key := fmt.Sprintf("apikey:c%d", k)
		res := make([]limit.Result, 1)
		if err := nd.Check(context.Background(), []limit.Item{{Key: key, Rule: "capped", Cost: 1}}, res); err != nil {
			t.Fatal(err)
		}
		switch r := res[0]; {
		case r.Allowed:
			held = append(held, key)
		case r.Code == limit.CodeKeyCap && strings.HasPrefix(r.Err, "key_cap"):
			refused++
		default:
			t.Fatalf("key %s: %+v", key, r)
		}
	}
	// Each shard holds ceil(1/shards) = 1 key of the rule.
	if len(held) < 1 || len(held) > 8 || len(held)+refused != 20 {
		t.Fatalf("%d keys held, %d refused", len(held), refused)
	}
	res := make([]limit.Result, 1)
	if err := nd.Check(context.Background(), []limit.Item{{Key: held[0], Rule: "capped", Cost: 1}}, res); err != nil || !res[0].Allowed {
		t.Fatalf("a held key at the cap: %+v, %v", res[0], err)
	}
	if m := scrape(t, nd.HTTPAddr()); !strings.Contains(m, fmt.Sprintf("weir_shard_key_cap_hits_total{rule=\"capped\"} %d\n", refused)) {
		t.Errorf("metrics lack weir_shard_key_cap_hits_total{rule=\"capped\"} %d", refused)
	}
}
