package node_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testlog"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
)

// A node started with neither --bootstrap-expect nor --join never gets a
// leader (it does not bootstrap itself). It says so, naming both flags: in
// its log at start, in readiness and in GET /v1/cluster (weir members). A
// node with --bootstrap-expect 1 says nothing of the kind.
func TestNoLeaderSaysWhichFlagIsMissing(t *testing.T) {
	start := func(t *testing.T, expect int) (*node.Node, *testlog.Buffer) {
		var logs testlog.Buffer
		cfg := testcluster.Config(t, "alone")
		cfg.BootstrapExpect, cfg.Join = expect, nil
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		nd, err := node.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nd.Close() })
		if err := nd.Start(); err != nil {
			t.Fatal(err)
		}
		return nd, &logs
	}
	noLeader := func(t *testing.T, nd *node.Node) string {
		resp, err := http.Get("http://" + nd.HTTPAddr() + "/v1/cluster")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Leader   string `json:"leader"`
			NoLeader string `json:"no_leader"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out.NoLeader
	}
	hasFlags := func(s string) bool {
		return strings.Contains(s, "--bootstrap-expect") && strings.Contains(s, "--join")
	}

	t.Run("neither flag", func(t *testing.T) {
		nd, logs := start(t, 0)
		if !hasFlags(logs.String()) {
			t.Errorf("log at start does not name the missing flags:\n%s", logs)
		}
		// Once the node has a view, readiness says why there is no leader.
		// (Whether one could be elected is not a matter of waiting: with
		// neither flag and no Raft state the node never bootstraps.)
		testwait.For(t, 10*time.Second, "a cluster view", func() error {
			if err := nd.Ready(); err != nil && strings.Contains(err.Error(), "no cluster view") {
				return err
			}
			return nil
		})
		if err := nd.Ready(); err == nil || !hasFlags(err.Error()) {
			t.Errorf("Ready() = %v; want the missing flags named", err)
		}
		if why := noLeader(t, nd); !hasFlags(why) {
			t.Errorf("GET /v1/cluster no_leader = %q; want the missing flags named", why)
		}
	})
	t.Run("bootstrap-expect 1", func(t *testing.T) {
		nd, logs := start(t, 1)
		testwait.For(t, 20*time.Second, "ready", nd.Ready)
		if why := noLeader(t, nd); why != "" {
			t.Errorf("no_leader = %q with a leader", why)
		}
		if strings.Contains(logs.String(), "--bootstrap-expect") {
			t.Errorf("log names a missing flag:\n%s", logs)
		}
	})
}
