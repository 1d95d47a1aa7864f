package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/limit"
)

// The Raft metrics tell an operator which node leads and how far each
// node's rules are: one leader, the others followers, and every node's
// applied index at least the rules version it was told about.
func TestRaftMetrics(t *testing.T) {
	c := testcluster.New(t, 3)
	v := c.ApplyRules("rules:\n  - id: r\n    match: {route: /r}\n    key: ip\n    rate: 1\n    period: 1s\n")
	testwait.For(t, 10*time.Second, "one leader and two followers in weir_raft_state", func() error {
		leaders, followers := 0, 0
		for _, n := range c.Live() {
			m := scrape(t, n.HTTPAddr())
			if strings.Contains(m, `weir_raft_state{state="leader"} 1`+"\n") {
				leaders++
			}
			if strings.Contains(m, `weir_raft_state{state="follower"} 1`+"\n") {
				followers++
			}
			var applied float64
			for _, line := range strings.Split(m, "\n") {
				if rest, ok := strings.CutPrefix(line, "weir_raft_applied_index "); ok {
					fmt.Sscan(rest, &applied)
				}
			}
			if uint64(applied) < v {
				return fmt.Errorf("%s: weir_raft_applied_index %v < rules version %d", n.ID(), applied, v)
			}
		}
		if leaders != 1 || followers != 2 {
			return fmt.Errorf("%d leaders and %d followers", leaders, followers)
		}
		return nil
	})
}

// A group of several rules where one denies (issue 30, item 1): only the
// rule that denied counts a denial; the members it voided count as
// decision="voided", so dashboards and alerts reading denied do not blame
// innocent rules.
func TestChecksTotalCountsVoidedMembers(t *testing.T) {
	c := testcluster.New(t, 1)
	c.ApplyRules(groupRules + `  - id: wide
    match: {route: /w, method: GET}
    key: apikey
    rate: 1
    period: 1h
    burst: 100
`)
	nd := c.Nodes[0]
	group := []limit.Item{
		{Key: "apikey:g", Rule: "big", Cost: 1, Group: 1},
		{Key: "apikey:g", Rule: "wide", Cost: 1, Group: 1},
		{Key: "apikey:g", Rule: "three", Cost: 1, Group: 1},
	}
	for round := range 5 { // three pass (burst 3), two are denied by "three"
		res := make([]limit.Result, len(group))
		if err := nd.Check(context.Background(), group, res); err != nil {
			t.Fatal(err)
		}
		if want := round < 3; res[2].Allowed != want || res[0].Allowed != want || res[0].Voided == want {
			t.Fatalf("round %d: %+v, want allowed=%v for all, voided for big and wide once three denies", round, res, want)
		}
	}
	m := scrape(t, nd.HTTPAddr())
	for _, line := range []string{
		`weir_checks_total{decision="allowed",rule="three"} 3`,
		`weir_checks_total{decision="denied",rule="three"} 2`,
		`weir_checks_total{decision="voided",rule="three"} 0`,
		`weir_checks_total{decision="allowed",rule="big"} 3`,
		`weir_checks_total{decision="denied",rule="big"} 0`,
		`weir_checks_total{decision="voided",rule="big"} 2`,
		`weir_checks_total{decision="allowed",rule="wide"} 3`,
		`weir_checks_total{decision="denied",rule="wide"} 0`,
		`weir_checks_total{decision="voided",rule="wide"} 2`,
	} {
		if !strings.Contains(m, line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
	if t.Failed() {
		t.Logf("weir_checks_total:\n%s", grepLines(m, "weir_checks_total{"))
	}
}
