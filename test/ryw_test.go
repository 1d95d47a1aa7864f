package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// Reads are read-your-writes by default (issue 12): a write acknowledged by
// any node is in every later read and check, on every node.

// roles returns the leader and the followers of a 3-node cluster, once
// every node agrees who leads.
func roles(t *testing.T, c *cluster) (leader *node.Node, followers []*node.Node) {
	t.Helper()
	testwait.For(t, 10*time.Second, "one leader all agree on", func() error {
		leader, followers = nil, nil
		for _, n := range c.Live() {
			if n.Store().IsLeader() {
				leader = n
			} else {
				followers = append(followers, n)
			}
		}
		if leader == nil {
			return fmt.Errorf("no leader")
		}
		for _, n := range followers {
			if id, _ := n.Store().Leader(); id != leader.ID() {
				return fmt.Errorf("%s thinks the leader is %q", n.ID(), id)
			}
		}
		return nil
	})
	return leader, followers
}

// call sends one HTTP request and decodes a JSON answer into out (when not
// nil); it returns the status and the raw body.
func call(t *testing.T, method, url, ctype, body string, out any) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, raw)
		}
	}
	return resp.StatusCode, string(raw)
}

func ruleJSON(id string) string {
	return fmt.Sprintf(`{"match":{"route":"/ryw/%s","method":"GET"},"key":"apikey","algorithm":"token_bucket","rate":100,"period":"1s","burst":100}`, id)
}

// TestFollowerWriteThenReadAndCheck: PUT a rule on a follower, then read it
// back and check against it on that same follower right away (20 of 20),
// over HTTP and gRPC. Before read-your-writes, the GET said "not found"
// and the check "unknown rule".
func TestFollowerWriteThenReadAndCheck(t *testing.T) {
	c := newCluster(t, 3)
	_, fs := roles(t, c)
	f := fs[0]
	base := "http://" + f.HTTPAddr()
	cc, err := grpc.NewClient(f.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rc := weirv1.NewRulesClient(cc)
	for i := range 20 {
		id := fmt.Sprintf("ryw.%d", i)
		var w struct {
			Version uint64 `json:"version"`
		}
		if code, body := retried(func() (int, string) {
			return call(t, http.MethodPut, base+"/v1/rules/"+id, "application/json", ruleJSON(id), &w)
		}); code != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", id, code, body)
		}
		var got struct {
			Version uint64 `json:"version"`
			Read    string `json:"read"`
		}
		if code, body := retried(func() (int, string) { return call(t, http.MethodGet, base+"/v1/rules/"+id, "", "", &got) }); code != http.StatusOK {
			t.Fatalf("try %d: GET %s on the follower right after PUT answered %d: %s", i, id, code, body)
		}
		if got.Version < w.Version || got.Read != "consistent" {
			t.Fatalf("try %d: GET answered version %d (read %q) after a write at %d", i, got.Version, got.Read, w.Version)
		}
		var d struct {
			Allowed bool `json:"allowed"`
		}
		chk := fmt.Sprintf(`{"key":"apikey:ryw%d","rule":%q,"min_rule_version":%d}`, i, id, w.Version)
		if code, body := call(t, http.MethodPost, base+"/v1/limits/check", "application/json", chk, &d); code != http.StatusOK || !d.Allowed {
			t.Fatalf("try %d: check against %s right after PUT: %d %s", i, id, code, body)
		}
		// A leader election (a loaded machine) makes the follower answer
		// "no leader is known yet; retry shortly": retried, as documented.
		_, err := rc.GetRule(context.Background(), &weirv1.GetRuleRequest{Id: id})
		for deadline := time.Now().Add(10 * time.Second); status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "retry shortly") && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond) // retry pace
			_, err = rc.GetRule(context.Background(), &weirv1.GetRuleRequest{Id: id})
		}
		if err != nil {
			t.Fatalf("try %d: gRPC GetRule %s: %v", i, id, err)
		}
	}

	// A check that asks for a version no node has is refused (503), not
	// decided by older rules; min_rule_version 0 means any.
	far := fmt.Sprintf(`{"key":"apikey:far","rule":"ryw.0","min_rule_version":%d}`, f.Store().Current().Version+1000)
	start := time.Now()
	if code, body := call(t, http.MethodPost, base+"/v1/limits/check", "application/json", far, nil); code != http.StatusServiceUnavailable || !strings.Contains(body, "not applied") {
		t.Fatalf("check with a future min_rule_version: %d %s", code, body)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("check with a future min_rule_version took %v", d)
	}

	// ?stale=true is the local copy, and says so; consistent=true is the
	// default's alias.
	var st struct {
		Read string `json:"read"`
	}
	if code, body := call(t, http.MethodGet, base+"/v1/rules?stale=true", "", "", &st); code != http.StatusOK || st.Read != "stale" {
		t.Fatalf("stale read: %d %s", code, body)
	}
	if code, body := call(t, http.MethodGet, base+"/v1/rules?consistent=true", "", "", &st); code != http.StatusOK || st.Read != "consistent" {
		t.Fatalf("consistent=true: %d %s", code, body)
	}
	if _, err := rc.ListRules(context.Background(), &weirv1.ListRulesRequest{Stale: true}); err != nil {
		t.Fatal(err)
	}
}

// TestWriteOnOneFollowerReadOnAnother: apply and rollback through one
// follower, then list (HTTP and gRPC), read history and overrides through
// the other: each read shows the write (20 of 20 for apply).
func TestWriteOnOneFollowerReadOnAnother(t *testing.T) {
	c := newCluster(t, 3)
	_, fs := roles(t, c)
	w, r := "http://"+fs[0].HTTPAddr(), "http://"+fs[1].HTTPAddr()
	cc, err := grpc.NewClient(fs[1].GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rc := weirv1.NewRulesClient(cc)

	type setAnswer struct {
		Version uint64 `json:"version"`
		Rules   []struct {
			ID string `json:"id"`
		} `json:"rules"`
		Read string `json:"read"`
	}
	has := func(a setAnswer, id string) bool {
		for _, x := range a.Rules {
			if x.ID == id {
				return true
			}
		}
		return false
	}
	var first uint64
	for i := range 20 {
		id := fmt.Sprintf("spread.%d", i)
		file := fmt.Sprintf("rules:\n  - id: %s\n    match: {route: /spread/%d, method: GET}\n    key: apikey\n    rate: 5\n    period: 1s\n    burst: 5\n", id, i)
		var a struct {
			Version uint64 `json:"version"`
		}
		if code, body := retried(func() (int, string) {
			return call(t, http.MethodPost, w+"/v1/rules:apply", "application/yaml", file, &a)
		}); code != http.StatusOK {
			t.Fatalf("apply: %d %s", code, body)
		}
		if first == 0 {
			first = a.Version
		}
		var got setAnswer
		if code, body := call(t, http.MethodGet, r+"/v1/rules", "", "", &got); code != http.StatusOK {
			t.Fatalf("list: %d %s", code, body)
		}
		if got.Version < a.Version || !has(got, id) {
			t.Fatalf("try %d: list on the other follower shows version %d without %s after apply answered %d", i, got.Version, id, a.Version)
		}
		p, err := rc.ListRules(context.Background(), &weirv1.ListRulesRequest{})
		if err != nil || p.GetVersion() < a.Version {
			t.Fatalf("try %d: gRPC ListRules: version %d, %v; want ≥ %d", i, p.GetVersion(), err, a.Version)
		}
		h, err := rc.History(context.Background(), &weirv1.HistoryRequest{Limit: 1})
		if err != nil || len(h.GetEntries()) != 1 || h.GetEntries()[0].GetVersion() < a.Version {
			t.Fatalf("try %d: gRPC History: %v, %v; want version ≥ %d", i, h, err, a.Version)
		}
	}

	// Rollback to before the first apply, through the writer; read through
	// the other follower.
	var rb struct {
		Version uint64 `json:"version"`
	}
	if code, body := call(t, http.MethodPost, w+"/v1/rules:rollback", "application/json", fmt.Sprintf(`{"version":%d}`, first), &rb); code != http.StatusOK {
		t.Fatalf("rollback: %d %s", code, body)
	}
	var got setAnswer
	if code, body := call(t, http.MethodGet, r+"/v1/rules", "", "", &got); code != http.StatusOK {
		t.Fatalf("list: %d %s", code, body)
	}
	if got.Version < rb.Version || has(got, "spread.1") || !has(got, "spread.0") {
		t.Fatalf("after rollback answered %d, list shows version %d: %+v", rb.Version, got.Version, got.Rules)
	}
	var hist struct {
		Entries []struct {
			Version uint64 `json:"version"`
		} `json:"entries"`
		Read string `json:"read"`
	}
	if code, body := call(t, http.MethodGet, r+"/v1/rules/history?limit=1", "", "", &hist); code != http.StatusOK || len(hist.Entries) != 1 || hist.Entries[0].Version < rb.Version || hist.Read != "consistent" {
		t.Fatalf("history after rollback %d: %d %s", rb.Version, code, body)
	}

	// An override set through one follower is listed by the other.
	var o struct {
		Version uint64 `json:"version"`
	}
	if code, body := call(t, http.MethodPut, w+"/v1/overrides", "application/json", `{"key":"apikey:vip","rule":"spread.0","rate":50,"burst":50}`, &o); code != http.StatusOK {
		t.Fatalf("override: %d %s", code, body)
	}
	var ov struct {
		Version   uint64            `json:"version"`
		Overrides []json.RawMessage `json:"overrides"`
	}
	if code, body := call(t, http.MethodGet, r+"/v1/overrides", "", "", &ov); code != http.StatusOK || ov.Version < o.Version || len(ov.Overrides) != 1 {
		t.Fatalf("overrides after a write at %d: %d %s", o.Version, code, body)
	}
}

// TestReadWithoutLeaderIs503: with no Raft leader reachable, a read is
// refused with 503 within the read timeout; a stale read still answers.
func TestReadWithoutLeaderIs503(t *testing.T) {
	c := newCluster(t, 3)
	leader, fs := roles(t, c)
	for i, n := range c.Nodes {
		if n == leader || n == fs[0] {
			c.Kill(i)
		}
	}
	base := "http://" + fs[1].HTTPAddr()
	start := time.Now()
	code, body := call(t, http.MethodGet, base+"/v1/rules", "", "", nil)
	if code != http.StatusServiceUnavailable || !bytes.Contains([]byte(body), []byte("stale")) {
		t.Fatalf("read with no leader: %d %s", code, body)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("read with no leader took %v", d)
	}
	if code, body := call(t, http.MethodGet, base+"/v1/rules?stale=true", "", "", nil); code != http.StatusOK {
		t.Fatalf("stale read with no leader: %d %s", code, body)
	}
}

// retried calls f again while it is answered "retry shortly" (a leader
// election on a loaded machine: no leader known, or leadership moving), as
// that answer says, for up to 10 s; it returns the last answer.
func retried(f func() (int, string)) (int, string) {
	code, body := f()
	for deadline := time.Now().Add(10 * time.Second); code != http.StatusOK && strings.Contains(body, "retry shortly") && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond) // retry pace, not a wait for an event
		code, body = f()
	}
	return code, body
}
