package main

import (
	"strings"
	"testing"

	"github.com/weirlimit/weir/internal/testcluster"
)

// TestRulesRegions compares two regions' global rules through real nodes:
// the same rules agree (exit 0); a different global limit in one region is
// reported (exit 1, both fingerprints shown); a region rule alone does not
// count.
func TestRulesRegions(t *testing.T) {
	eu, us := testcluster.New(t, 1), testcluster.New(t, 1)
	const base = "rules:\n  - {id: g, match: {route: /g}, key: apikey, rate: 10, period: 1s, scope: global}\n"
	eu.ApplyRules(base + "  - {id: r, match: {route: /r}, key: apikey, rate: 5, period: 1s}\n")
	us.ApplyRules(base)
	arg := "eu=" + eu.Nodes[0].HTTPAddr() + ",us=" + us.Nodes[0].HTTPAddr()
	r := runCLI(t, "", nil, "rules", "regions", "--regions", arg)
	if r.code != 0 || !strings.Contains(r.stdout, "the same in every region") {
		t.Fatalf("same global rules: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	us.ApplyRules("rules:\n  - {id: g, match: {route: /g}, key: apikey, rate: 20, period: 1s, scope: global}\n")
	r = runCLI(t, "", nil, "rules", "regions", "--regions", arg)
	if r.code != 1 || !strings.Contains(r.stderr, "global rules differ") {
		t.Fatalf("different global rules: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// One apply to both regions brings them together again.
	r = runCLI(t, base, nil, "rules", "apply", "-f", "-", "--replace", "--regions", arg)
	if r.code != 0 || !strings.Contains(r.stdout, "region eu:") || !strings.Contains(r.stdout, "region us:") {
		t.Fatalf("apply --regions: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", nil, "rules", "regions", "--regions", arg)
	if r.code != 0 {
		t.Fatalf("after apply --regions: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", nil, "rules", "regions", "--regions", "eu")
	if r.code != 2 {
		t.Fatalf("bad --regions: exit %d, want 2 (usage)\n%s", r.code, r.stderr)
	}
}
