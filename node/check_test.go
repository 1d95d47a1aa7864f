package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/weirlimit/weir/internal/testcluster"
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
		items := []*weirv1.CheckItem{
			{Key: local, Rule: "three", Cost: 1},
			{Key: remote, Rule: "three", Cost: 1},
			{Key: local, Rule: "nope", Cost: 1},
		}
		res, err := entry.Check(context.Background(), items)
		if err != nil {
			t.Fatal(err)
		}
		for i, it := range items {
			if it.RuleVersion != 0 {
				t.Fatalf("round %d: item %d RuleVersion changed to %d (the rule set is at %d)", round, i, it.RuleVersion, ver)
			}
		}
		want := round < 3
		for i := 0; i < 2; i++ {
			if res[i].ErrorCode != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED || res[i].Allowed != want {
				t.Fatalf("round %d: item %d = %v, want allowed=%v", round, i, res[i], want)
			}
		}
		if res[2].ErrorCode != weirv1.ErrorCode_ERROR_CODE_UNKNOWN_RULE {
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
			ids = append(ids, mm.Id)
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
