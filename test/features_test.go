package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
	rulesmodel "github.com/weirlimit/weir/rulesraft/rules"
)

// A member of an older version (here n3, configured to advertise no
// concurrency feature, as an older binary would not) makes the leader
// refuse a rule write that uses the feature, naming the member and the
// feature, through any node; rules it understands still pass. Once it
// leaves, the same write passes.
func TestMixedVersionWriteRefused(t *testing.T) {
	c := wrapCluster(t, testcluster.NewConfigured(t, 3, func(cfg *node.Config) {
		if cfg.ID == "n3" {
			cfg.WithoutFeatures = []string{rulesmodel.FeatureConcurrency}
		}
	}))
	c.ApplyRules(exactRules) // no new feature: passes
	testwait.For(t, 10*time.Second, "every member's features in gossip", func() error {
		for _, n := range c.Live() {
			code, body := postRules(t, n, concurrencyRules)
			if code != http.StatusConflict {
				return fmt.Errorf("via %s: %d %s", n.ID(), code, body)
			}
			for _, want := range []string{`member n3 does not support`, `uses \"concurrency\"`, `rule \"inflight\"`} {
				if !strings.Contains(body, want) {
					t.Fatalf("via %s: the refusal %s does not say %s", n.ID(), body, want)
				}
			}
		}
		return nil
	})
	if r := c.checkOnce(c.Nodes[0], "apikey:x", "exact", 0); r == nil {
		t.Fatal("no answer")
	}
	if code, body := getRule(t, c.Nodes[0], "inflight"); code != http.StatusNotFound {
		t.Fatalf("the refused rule is in the rule set: %d %s", code, body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.Nodes[2].Leave(ctx); err != nil {
		t.Fatal(err)
	}
	c.Kill(2)
	c.WaitStable(2)
	// "Let n3 leave, then write again": for a moment after the leave the
	// leader may still list n3 (409, until gossip delivers the leave) or
	// may be n3 itself (503: the others forward to it until they elect
	// another). Both pass; any other answer, or one that lasts, fails.
	testwait.For(t, 10*time.Second, "the write accepted once n3 left", func() error {
		code, body := postRules(t, c.Nodes[0], concurrencyRules)
		switch code {
		case http.StatusOK:
			return nil
		case http.StatusConflict, http.StatusServiceUnavailable:
			return fmt.Errorf("%d %s", code, body)
		}
		t.Fatalf("write after n3 left: %d %s", code, body)
		return nil
	})
	testwait.For(t, 10*time.Second, "the accepted rule in the rule set", func() error {
		if code, body := getRule(t, c.Nodes[0], "inflight"); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}

func postRules(t *testing.T, n *node.Node, yaml string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+n.HTTPAddr()+"/v1/rules:apply", "application/yaml", bytes.NewBufferString(yaml))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func getRule(t *testing.T, n *node.Node, id string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/v1/rules/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
