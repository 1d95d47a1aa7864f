package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/events"
	"github.com/weirlimit/weir/node/opsapi"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

const opsRules = `
rules:
  - id: reads.free
    match: {route: /r, plan: "*"}
    key: apikey
    rate: 10
    period: 1m
  - id: reads.pro
    match: {route: /r, plan: pro}
    key: apikey
    rate: 100
    period: 1m
  - id: burst2
    match: {route: /b, method: GET}
    key: apikey
    rate: 1
    period: 1h
    burst: 2
    events: {sample: 1}
  - id: secret
    match: {route: /s, method: GET}
    key: user
    rate: 1
    period: 1h
    burst: 1
    events: {sample: 1, redact: true}
  - id: perip
    match: {route: /i}
    key: ip
    rate: 5
    period: 1m
  - id: glob
    match: {route: /g}
    key: global
    rate: 10
    period: 1m
  - id: tenant
    match: {route: /t}
    key: header:X-Tenant
    rate: 3
    period: 1m
`

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

func postJSON(t *testing.T, url, body string, v any) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

// A burst of denials on a rule sampling every denial yields events that
// carry the rule version that decided them, from every node through any
// node; a redacted rule's events carry a hash; the HTTP answer and the
// gRPC result carry the version too; Ops.Events streams the same events.
func TestEventsCarryRuleVersion(t *testing.T) {
	c := testcluster.New(t, 3)
	ver := c.ApplyRules(opsRules)
	base := func(i int) string { return "http://" + c.Nodes[i].HTTPAddr() }

	denied := 0
	for i := 0; i < 12; i++ { // 4 keys, 3 checks each: 2 allowed, 1 denied
		var r struct {
			Allowed     bool   `json:"allowed"`
			RuleVersion uint64 `json:"rule_version"`
		}
		code := postJSON(t, base(i%3)+"/v1/limits/check", fmt.Sprintf(`{"key":"apikey:k%d","rule":"burst2"}`, i%4), &r)
		if code != http.StatusOK || r.RuleVersion != ver {
			t.Fatalf("check %d: %d, rule_version %d, want %d", i, code, r.RuleVersion, ver)
		}
		if !r.Allowed {
			denied++
		}
	}
	postJSON(t, base(0)+"/v1/limits/check", `{"key":"user:alice","rule":"secret","cost":2}`, nil)

	var got struct {
		Events   []events.Event `json:"events"`
		Answered []string       `json:"answered"`
	}
	if code := getJSON(t, base(1)+"/v1/events?rule=burst2&decision=denied", &got); code != http.StatusOK {
		t.Fatalf("GET /v1/events: %d", code)
	}
	if len(got.Events) != denied || denied != 4 || len(got.Answered) != 3 {
		t.Fatalf("%d events from %v, want %d denials from 3 nodes", len(got.Events), got.Answered, denied)
	}
	nodes := map[string]bool{}
	for _, e := range got.Events {
		if e.RuleVersion != ver || e.Decision != events.Denied || !strings.HasPrefix(e.Key, "apikey:k") || e.Remaining != 0 {
			t.Fatalf("event %+v: want a denial of burst2 at version %d", e, ver)
		}
		nodes[e.Node] = true
	}
	if len(nodes) != 3 {
		t.Fatalf("events from nodes %v, want each entry node", nodes)
	}
	getJSON(t, base(2)+"/v1/events?rule=secret", &got)
	if len(got.Events) != 1 || got.Events[0].Key != events.Redact("user:alice") {
		t.Fatalf("redacted rule's events = %+v, want the key's hash", got.Events)
	}
	if code := getJSON(t, base(0)+"/v1/events?decision=maybe", nil); code != http.StatusBadRequest {
		t.Fatalf("bad decision filter: %d, want 400", code)
	}

	// gRPC: the result and the Ops.Events stream.
	conn, err := grpc.NewClient(c.Nodes[0].GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := weirv1.NewLimiterClient(conn).Check(context.Background(), &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: "apikey:k0", Rule: "burst2", Cost: 1}}})
	if err != nil || resp.Results[0].GetRuleVersion() != ver || resp.Results[0].GetAllowed() {
		t.Fatalf("gRPC check: %v %v, want denied at version %d", resp, err, ver)
	}
	st, err := weirv1.NewOpsClient(conn).Events(context.Background(), &weirv1.EventsRequest{Rule: "burst2"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		e, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if e.GetRuleVersion() != ver || e.GetNode() != c.Nodes[0].ID() {
			t.Fatalf("streamed event %v", e)
		}
		n++
	}
	if n < 2 { // node 0 was the entry of at least one denial, plus the gRPC one
		t.Fatalf("Ops.Events streamed %d events of node 0, want >= 2", n)
	}
}

// Following events over SSE shows a denial made through another node.
func TestEventsFollowSSE(t *testing.T) {
	c := testcluster.New(t, 2)
	c.ApplyRules(opsRules)
	req, _ := http.NewRequest(http.MethodGet, "http://"+c.Nodes[0].HTTPAddr()+"/v1/events?rule=burst2", nil)
	req.Header.Set("Accept", "text/event-stream")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	go func() {
		for i := 0; i < 3; i++ {
			resp, err := http.Post("http://"+c.Nodes[1].HTTPAddr()+"/v1/limits/check", "application/json", strings.NewReader(`{"key":"apikey:sse","rule":"burst2"}`))
			if err == nil {
				resp.Body.Close()
			}
		}
	}()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e events.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatal(err)
		}
		if e.Key != "apikey:sse" || e.Node != c.Nodes[1].ID() || e.Decision != events.Denied {
			t.Fatalf("followed event %+v", e)
		}
		return
	}
	t.Fatalf("stream ended without an event: %v", sc.Err())
}

// A flood of unique keys, every check denied and sampled, keeps each
// node's events buffer and hot-key sketches bounded.
func TestEventsBoundedUnderFlood(t *testing.T) {
	c := testcluster.New(t, 1)
	c.ApplyRules(opsRules)
	nd := c.Nodes[0]
	const flood = 6000
	items := make([]limit.Item, 500)
	res := make([]limit.Result, len(items))
	for b := 0; b < flood/len(items); b++ {
		for i := range items {
			items[i] = limit.Item{Key: fmt.Sprintf("apikey:u%d", b*len(items)+i), Rule: "burst2", Cost: 3} // above the burst: denied
		}
		if err := nd.Check(context.Background(), items, res); err != nil {
			t.Fatal(err)
		}
		if res[0].Allowed {
			t.Fatal("cost above the burst allowed")
		}
	}
	var got struct {
		Events []events.Event `json:"events"`
	}
	getJSON(t, "http://"+nd.HTTPAddr()+"/v1/events?scope=local&limit=0", &got)
	if len(got.Events) != events.DefaultCapacity {
		t.Fatalf("%d events held after %d denials, want the capacity %d", len(got.Events), flood, events.DefaultCapacity)
	}
	if last := got.Events[len(got.Events)-1]; last.Key != fmt.Sprintf("apikey:u%d", flood-1) {
		t.Fatalf("newest event %+v, want the last key", last)
	}
	var hot struct {
		Keys []opsapi.HotKey `json:"keys"`
	}
	getJSON(t, "http://"+nd.HTTPAddr()+"/v1/hotkeys?rule=burst2&top=1000&scope=local", &hot)
	if len(hot.Keys) == 0 || len(hot.Keys) > 2*64 {
		t.Fatalf("%d hot keys after a flood, want 1 to %d (two bounded windows)", len(hot.Keys), 2*64)
	}
}

// The hottest key of a rule tops /v1/hotkeys (merged over the cluster),
// the snapshot and the bounded weir_hot_key_rate metric; a gateway report
// counts in weir_checks_total, the per-rule rates, the gateways list and
// the events; a bad report changes nothing.
func TestHotKeysRatesAndGatewayReports(t *testing.T) {
	c := testcluster.New(t, 3)
	ver := c.ApplyRules(opsRules)
	entry := c.Nodes[0]
	items := make([]limit.Item, 0, 2000) // hot-key sampling takes 1 item in 32
	for i := 0; i < 2000; i++ {
		k := "ip:10.0.0.1"
		if i%4 == 3 {
			k = fmt.Sprintf("ip:10.1.0.%d", i)
		}
		items = append(items, limit.Item{Key: k, Rule: "perip", Cost: 1})
	}
	if err := entry.Check(context.Background(), items, make([]limit.Result, len(items))); err != nil {
		t.Fatal(err)
	}
	var hot struct {
		Keys []opsapi.HotKey `json:"keys"`
	}
	getJSON(t, "http://"+c.Nodes[2].HTTPAddr()+"/v1/hotkeys?rule=perip&top=3", &hot)
	if len(hot.Keys) == 0 || hot.Keys[0].Key != "ip:10.0.0.1" || len(hot.Keys) > 3 {
		t.Fatalf("hot keys %+v, want ip:10.0.0.1 first, at most 3", hot.Keys)
	}
	m := scrape(t, entry.HTTPAddr())
	if !strings.Contains(m, `weir_hot_key_rate{key="ip:10.0.0.1",rank="1",rule="perip"}`) {
		t.Fatalf("metrics lack the hottest key:\n%s", grepLines(m, "weir_hot_key"))
	}

	rep := fmt.Sprintf(`{"gateway":"gw-1","counts":[{"rule":"perip","local_denied":7,"fail_open":5}],"events":[{"rule":"perip","rule_version":%d,"key":"ip:9.9.9.9","decision":"allowed","remaining":0}]}`, ver)
	if code := postJSON(t, "http://"+c.Nodes[1].HTTPAddr()+"/v1/gateways/report", `{"gateway":"","counts":[]}`, nil); code != http.StatusBadRequest {
		t.Fatalf("report without a gateway: %d, want 400", code)
	}
	if code := postJSON(t, "http://"+c.Nodes[1].HTTPAddr()+"/v1/gateways/report", rep, nil); code != http.StatusOK {
		t.Fatalf("report: %d", code)
	}
	m = scrape(t, c.Nodes[1].HTTPAddr())
	for _, line := range []string{
		`weir_checks_total{decision="denied",rule="perip"} 7`,
		`weir_checks_total{decision="allowed",rule="perip"} 5`,
		`weir_gateway_decisions_total{decision="allowed",reason="fail_open",rule="perip"} 5`,
	} {
		if !strings.Contains(m, line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
	var snap opsapi.Snapshot
	testwait.For(t, 15*time.Second, "rates and the gateway in the snapshot", func() error {
		snap = opsapi.Snapshot{}
		getJSON(t, "http://"+c.Nodes[2].HTTPAddr()+"/v1/ops/snapshot", &snap)
		if len(snap.Gateways) != 1 || snap.Gateways[0].ID != "gw-1" || snap.Gateways[0].FailOpen != 5 {
			return fmt.Errorf("gateways %+v", snap.Gateways)
		}
		for _, rr := range snap.Rates {
			for _, p := range rr.Points {
				if rr.Rule == "perip" && p.Denied > 0 {
					return nil
				}
			}
		}
		return fmt.Errorf("no denied rate for perip yet: %+v", snap.Rates)
	})
	if snap.Cluster == nil || len(snap.Cluster.Members) != 3 || snap.Rules == nil || snap.Rules.Version != ver || snap.Rules.LastChange == nil || len(snap.Rules.LastChange.Diff) != 7 {
		t.Fatalf("snapshot cluster %+v rules %+v", snap.Cluster, snap.Rules)
	}
	found := false
	for _, e := range snap.Events {
		found = found || (e.Gateway == "gw-1" && e.Key == "ip:9.9.9.9" && e.RuleVersion == ver)
	}
	if !found {
		t.Fatalf("snapshot events lack the gateway's: %+v", snap.Events)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// GET /v1/limits/{key} lists only the rules of the key's type, for every
// key type, with reset_at; the global rule's remaining is the global
// counter's.
func TestGetLimitsByKeyType(t *testing.T) {
	c := testcluster.New(t, 3)
	c.ApplyRules(opsRules)
	base := "http://" + c.Nodes[1].HTTPAddr()
	for i := 0; i < 3; i++ {
		postJSON(t, base+"/v1/limits/check", `{"key":"global:global","rule":"glob"}`, nil)
	}
	for key, want := range map[string]string{
		"ip:127.0.0.1":       "perip",
		"apikey:zz":          "burst2,reads.free,reads.pro",
		"apikey:zz?plan=pro": "burst2,reads.pro",
		"apikey:zz?plan=x":   "burst2,reads.free",
		"user:bob":           "secret",
		"global:global":      "glob",
		"header:X-Tenant:t1": "tenant",
		"cookie:x":           "",
	} {
		var got struct {
			Limits []struct {
				Rule      string `json:"rule"`
				Remaining int64  `json:"remaining"`
				ResetAt   string `json:"reset_at"`
			} `json:"limits"`
		}
		if code := getJSON(t, base+"/v1/limits/"+key, &got); code != http.StatusOK {
			t.Fatalf("%s: %d", key, code)
		}
		var rules []string
		for _, l := range got.Limits {
			rules = append(rules, l.Rule)
			if _, err := time.Parse(time.RFC3339, l.ResetAt); err != nil {
				t.Fatalf("%s: reset_at %q: %v", key, l.ResetAt, err)
			}
			if l.Rule == "glob" && l.Remaining != 7 {
				t.Fatalf("glob remaining %d, want 7 after 3 checks", l.Remaining)
			}
		}
		if strings.Join(rules, ",") != want {
			t.Fatalf("%s lists %v, want [%s]", key, rules, want)
		}
	}
}

// With the default 1% sampling, README's loop (six checks against five a
// minute, one denied) shows its denial in the events: the first denial of
// a rule in each second is always kept (issue 30, item 5).
func TestEventsKeepFirstDenialAtDefaultSampling(t *testing.T) {
	c := testcluster.New(t, 1)
	c.ApplyRules(opsRules) // perip: 5 a minute, events at the default share
	nd := c.Nodes[0]
	denied := 0
	for range 6 {
		res := make([]limit.Result, 1)
		if err := nd.Check(context.Background(), []limit.Item{{Key: "ip:203.0.113.7", Rule: "perip", Cost: 1}}, res); err != nil {
			t.Fatal(err)
		}
		if !res[0].Allowed {
			denied++
		}
	}
	var got struct {
		Events []events.Event `json:"events"`
	}
	getJSON(t, "http://"+nd.HTTPAddr()+"/v1/events?scope=local&rule=perip", &got)
	if denied != 1 || len(got.Events) != 1 || got.Events[0].Decision != events.Denied || got.Events[0].Key != "ip:203.0.113.7" {
		t.Fatalf("%d denied, events %+v; want the one denial as an event", denied, got.Events)
	}
}

// The snapshot counts a concurrency rule's permits in use over the
// cluster (keys owned by either node), with scope=local each node's own,
// and follows a release.
func TestSnapshotCountsPermitsInUse(t *testing.T) {
	c := testcluster.New(t, 2)
	c.ApplyRules("rules:\n  - id: jobs\n    match: {route: /j}\n    key: apikey\n    algorithm: concurrency\n    limit: 50\n    permit_ttl: 5m\n")
	var permits []string
	for i := range 8 {
		var res struct {
			Allowed bool   `json:"allowed"`
			Permit  string `json:"permit"`
		}
		url := "http://" + c.Nodes[i%2].HTTPAddr() + "/v1/limits/check"
		if code := postJSON(t, url, fmt.Sprintf(`{"key":"apikey:k%d","rule":"jobs"}`, i), &res); code != http.StatusOK || !res.Allowed || res.Permit == "" {
			t.Fatalf("check %d: %d %+v", i, code, res)
		}
		permits = append(permits, res.Permit)
	}
	inUse := func(addr, scope string) int64 {
		t.Helper()
		var s opsapi.Snapshot
		if code := getJSON(t, "http://"+addr+"/v1/ops/snapshot?scope="+scope, &s); code != http.StatusOK {
			t.Fatalf("snapshot: %d", code)
		}
		var n int64
		for _, p := range s.Permits {
			if p.Rule != "jobs" {
				t.Errorf("permits of rule %q, want jobs only", p.Rule)
			}
			n += p.InUse
		}
		return n
	}
	if n := inUse(c.Nodes[0].HTTPAddr(), "cluster"); n != 8 {
		t.Fatalf("cluster in use %d, want 8", n)
	}
	local0, local1 := inUse(c.Nodes[0].HTTPAddr(), "local"), inUse(c.Nodes[1].HTTPAddr(), "local")
	if local0+local1 != 8 || local0 == 0 || local1 == 0 {
		t.Errorf("local in use %d + %d, want 8 over both owners", local0, local1)
	}
	var rel struct {
		Released bool `json:"released"`
	}
	if code := postJSON(t, "http://"+c.Nodes[1].HTTPAddr()+"/v1/limits/release", fmt.Sprintf(`{"key":"apikey:k0","rule":"jobs","permit":%q}`, permits[0]), &rel); code != http.StatusOK || !rel.Released {
		t.Fatalf("release: %d %+v", code, rel)
	}
	if n := inUse(c.Nodes[1].HTTPAddr(), "cluster"); n != 7 {
		t.Fatalf("cluster in use after a release %d, want 7", n)
	}
}
