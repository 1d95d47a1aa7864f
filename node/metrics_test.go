package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
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
