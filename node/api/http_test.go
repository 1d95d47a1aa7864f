package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/rulesraft/rules"
)

type setReply struct {
	Version   uint64           `json:"version"`
	Rules     []rules.Rule     `json:"rules"`
	Overrides []rules.Override `json:"overrides"`
}

func ruleIDs(rs []rules.Rule) []string {
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	return ids
}

func TestHTTPRulesLifecycle(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})

	// Dry run: a diff, nothing written.
	v0 := n.version()
	r := n.do(t, "POST", "/v1/rules:apply?dry_run=true", rulesYAML)
	var ap struct {
		Version uint64   `json:"version"`
		Diff    []string `json:"diff"`
		DryRun  bool     `json:"dry_run"`
	}
	r.json(t, &ap)
	if r.code != 200 || !ap.DryRun || ap.Version != v0 || !slices.Equal(ap.Diff, []string{"+ orders.write", "+ search"}) {
		t.Fatalf("dry run: %d %s", r.code, r.body)
	}
	if n.version() != v0 || len(n.store.Current().Rules) != 0 {
		t.Fatalf("dry run wrote: version %d", n.version())
	}

	// Apply the file.
	r = n.do(t, "POST", "/v1/rules:apply", rulesYAML, "X-Weir-Author: alice")
	r.json(t, &ap)
	if r.code != 200 || ap.DryRun || ap.Version <= v0 || len(ap.Diff) != 2 {
		t.Fatalf("apply: %d %s", r.code, r.body)
	}
	v1 := ap.Version

	var set setReply
	r = n.do(t, "GET", "/v1/rules", nil)
	r.json(t, &set)
	if r.code != 200 || set.Version != v1 || !slices.Equal(ruleIDs(set.Rules), []string{"orders.write", "search"}) {
		t.Fatalf("list: %d %s", r.code, r.body)
	}
	if set.Rules[0].Burst != 20 || set.Rules[0].Period.D() != time.Second || set.Rules[1].Algorithm != "fixed_window" {
		t.Errorf("listed rule fields: %+v", set.Rules)
	}
	if !strings.Contains(string(r.body), `"period":"1s"`) {
		t.Errorf("period must be a Go duration string: %s", r.body)
	}
	r = n.do(t, "GET", "/v1/rules?consistent=true", nil)
	r.json(t, &set)
	if r.code != 200 || set.Version != v1 {
		t.Fatalf("consistent list: %d %s", r.code, r.body)
	}

	// One rule.
	var one struct {
		Version uint64     `json:"version"`
		Rule    rules.Rule `json:"rule"`
	}
	r = n.do(t, "GET", "/v1/rules/search", nil)
	r.json(t, &one)
	if r.code != 200 || one.Version != v1 || one.Rule.ID != "search" || one.Rule.Rate != 100 {
		t.Fatalf("get: %d %s", r.code, r.body)
	}
	if r = n.do(t, "GET", "/v1/rules/nope", nil); r.code != 404 || r.errBody(t).Code != CodeNotFound {
		t.Fatalf("get missing: %d %s", r.code, r.body)
	}

	// PUT with the id omitted, then with a changed rate.
	put := map[string]any{"match": map[string]any{"route": "/v1/users/{id}", "method": "GET"}, "key": "user", "rate": 5, "period": "1m"}
	var wv versionJSON
	r = n.do(t, "PUT", "/v1/rules/users.read", put)
	r.json(t, &wv)
	if r.code != 200 || wv.Version <= v1 {
		t.Fatalf("put: %d %s", r.code, r.body)
	}
	v2 := wv.Version
	put["id"], put["rate"] = "users.read", 7
	r = n.do(t, "PUT", "/v1/rules/users.read", put)
	r.json(t, &wv)
	if got, _ := n.store.Current().Rule("users.read"); r.code != 200 || got.Rate != 7 {
		t.Fatalf("put update: %d %s (rate %d)", r.code, r.body, got.Rate)
	}
	v3 := wv.Version

	// A bad lease over JSON is refused and changes nothing.
	put["lease"] = "sometimes"
	if r = n.do(t, "PUT", "/v1/rules/users.read", put); r.code != 400 || !strings.Contains(string(r.body), "want auto, off or a count") {
		t.Fatalf("put bad lease: %d %s", r.code, r.body)
	}
	if n.store.Current().Version != v3 {
		t.Fatal("a bad lease changed the rules")
	}
	delete(put, "lease")

	// Dry run of a change shows the field diff.
	r = n.do(t, "POST", "/v1/rules:apply?dry_run=true", strings.Replace(rulesYAML, "rate: 10", "rate: 20", 1))
	r.json(t, &ap)
	if !slices.Equal(ap.Diff, []string{"~ orders.write: rate 10 -> 20"}) || ap.Version != v3 {
		t.Fatalf("dry run diff: %s", r.body)
	}
	// replace=true drops users.read.
	r = n.do(t, "POST", "/v1/rules:apply?dry_run=true&replace=true", rulesYAML)
	r.json(t, &ap)
	if !slices.Equal(ap.Diff, []string{"- users.read"}) {
		t.Fatalf("replace dry run diff: %s", r.body)
	}

	// Delete, then history and rollback.
	r = n.do(t, "DELETE", "/v1/rules/search", nil)
	r.json(t, &wv)
	if _, ok := n.store.Current().Rule("search"); r.code != 200 || ok {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	if r = n.do(t, "DELETE", "/v1/rules/search", nil); r.code != 404 {
		t.Fatalf("delete twice: %d %s", r.code, r.body)
	}

	var hist struct {
		Entries []struct {
			Version uint64 `json:"version"`
			Author  string `json:"author"`
			At      string `json:"at"`
			Summary string `json:"summary"`
		} `json:"entries"`
	}
	r = n.do(t, "GET", "/v1/rules/history?limit=10", nil)
	r.json(t, &hist)
	if r.code != 200 || len(hist.Entries) != 4 || hist.Entries[0].Version != wv.Version || hist.Entries[3].Version != v1 {
		t.Fatalf("history: %d %s", r.code, r.body)
	}
	if hist.Entries[3].Author != "alice" || hist.Entries[3].Summary == "" {
		t.Errorf("history entry: %+v", hist.Entries[3])
	}
	if _, err := time.Parse(time.RFC3339, hist.Entries[0].At); err != nil {
		t.Errorf("at %q: %v", hist.Entries[0].At, err)
	}
	r = n.do(t, "GET", "/v1/rules/history?limit=1", nil)
	if r.json(t, &hist); len(hist.Entries) != 1 {
		t.Errorf("limit=1: %s", r.body)
	}

	// The set as of v2, then a rollback to it.
	r = n.do(t, "GET", "/v1/rules?at="+u(v2), nil)
	r.json(t, &set)
	if r.code != 200 || set.Version != v2 || !slices.Equal(ruleIDs(set.Rules), []string{"orders.write", "search", "users.read"}) {
		t.Fatalf("at v2: %d %s", r.code, r.body)
	}
	if r = n.do(t, "GET", "/v1/rules?at=999999", nil); r.code != 404 {
		t.Fatalf("at unknown version: %d %s", r.code, r.body)
	}
	r = n.do(t, "POST", "/v1/rules:rollback", map[string]any{"version": v2})
	r.json(t, &wv)
	if r.code != 200 || wv.Version <= v3 {
		t.Fatalf("rollback: %d %s", r.code, r.body)
	}
	cur := n.store.Current()
	if got, _ := cur.Rule("users.read"); !slices.Equal(ruleIDs(cur.Rules), []string{"orders.write", "search", "users.read"}) || got.Rate != 5 {
		t.Fatalf("after rollback: %+v", cur.Rules)
	}
	if r = n.do(t, "POST", "/v1/rules:rollback", map[string]any{"version": 999999}); r.code != 404 {
		t.Fatalf("rollback to unknown version: %d %s", r.code, r.body)
	}
}

func u(v uint64) string { return strconv.FormatUint(v, 10) }

func TestHTTPAdminToken(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true, token: "s3cret"})
	v := n.version()
	writes := []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/rules:apply", rulesYAML},
		{"POST", "/v1/rules:apply?dry_run=true", rulesYAML},
		{"PUT", "/v1/rules/x", map[string]any{"match": map[string]any{"route": "/"}, "key": "ip", "rate": 1, "period": "1s"}},
		{"DELETE", "/v1/rules/x", nil},
		{"POST", "/v1/rules:rollback", map[string]any{"version": 1}},
		{"PUT", "/v1/overrides", map[string]any{"key": "k", "rule": "x", "rate": 1}},
		{"DELETE", "/v1/overrides?key=k&rule=x", nil},
	}
	for _, w := range writes {
		for _, hdr := range [][]string{nil, {"Authorization: Bearer wrong"}, {"Authorization: s3cret"}} {
			r := n.do(t, w.method, w.path, w.body, hdr...)
			if r.code != http.StatusUnauthorized || r.errBody(t).Code != CodeUnauthorized {
				t.Errorf("%s %s %v: %d %s", w.method, w.path, hdr, r.code, r.body)
			}
		}
	}
	if n.version() != v {
		t.Fatalf("unauthorized writes changed the version: %d -> %d", v, n.version())
	}
	if r := n.do(t, "GET", "/v1/rules", nil); r.code != 200 {
		t.Fatalf("reads need no token: %d", r.code)
	}
	if r := n.do(t, "POST", "/v1/rules:apply", rulesYAML, "Authorization: Bearer s3cret"); r.code != 200 || n.version() == v {
		t.Fatalf("authorized write: %d %s", r.code, r.body)
	}
}

func TestHTTPBadInput(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true, maxBody: 4096})
	if r := n.do(t, "POST", "/v1/rules:apply", rulesYAML); r.code != 200 {
		t.Fatalf("seed: %d %s", r.code, r.body)
	}
	v := n.version()
	rule := `{"match":{"route":"/x"},"key":"ip","rate":1,"period":"1s"`
	cases := []struct {
		name, method, path, body string
		code                     int
		errCode                  string
		mentions                 []string
	}{
		{"malformed json", "PUT", "/v1/rules/x", rule, 400, CodeInvalidArgument, []string{"malformed JSON"}},
		{"unknown field", "PUT", "/v1/rules/x", rule + `,"colour":"red"}`, 400, CodeInvalidArgument, []string{"colour"}},
		{"trailing data", "PUT", "/v1/rules/x", rule + `}{}`, 400, CodeInvalidArgument, []string{"after the JSON"}},
		{"empty body", "PUT", "/v1/rules/x", ``, 400, CodeInvalidArgument, []string{"empty"}},
		{"bad duration", "PUT", "/v1/rules/x", `{"match":{"route":"/x"},"key":"ip","rate":1,"period":"soon"}`, 400, CodeInvalidArgument, []string{"soon"}},
		{"id mismatch", "PUT", "/v1/rules/x", `{"id":"y","match":{"route":"/x"},"key":"ip","rate":1,"period":"1s"}`, 400, CodeInvalidArgument, []string{`"y"`, `"x"`}},
		{"bad rule lists every problem", "PUT", "/v1/rules/x", `{"match":{"route":"x"},"key":"phone","rate":0,"period":"1s"}`, 400, CodeInvalidArgument,
			[]string{"match.route", "key", "rate"}},
		{"malformed yaml", "POST", "/v1/rules:apply", "rules: [\n  - id: a\n    rate: [", 400, CodeInvalidArgument, []string{"YAML"}},
		{"yaml unknown field and bad rate", "POST", "/v1/rules:apply", "rules:\n  - id: a\n    match: {route: /a}\n    key: ip\n    rate: 0\n    period: 1s\n    colour: red\n", 400, CodeInvalidArgument,
			[]string{"line 5", "rate", "line 7", "colour"}},
		{"bad query bool", "POST", "/v1/rules:apply?dry_run=maybe", rulesYAML, 400, CodeInvalidArgument, []string{"dry_run"}},
		{"huge body", "POST", "/v1/rules:apply", rulesYAML + "#" + strings.Repeat("x", 8192) + "\n", 413, CodeTooLarge, []string{"4096"}},
		{"huge json", "PUT", "/v1/overrides", `{"key":"` + strings.Repeat("k", 8192) + `"}`, 413, CodeTooLarge, nil},
		{"override bad", "PUT", "/v1/overrides", `{"key":"","rule":"orders.write"}`, 400, CodeInvalidArgument, []string{"key", "rate"}},
		{"override unknown rule", "PUT", "/v1/overrides", `{"key":"apikey:a","rule":"nope","rate":5}`, 404, CodeNotFound, []string{"nope"}},
		{"delete override missing args", "DELETE", "/v1/overrides", ``, 400, CodeInvalidArgument, []string{"key and rule"}},
		{"rollback zero", "POST", "/v1/rules:rollback", `{"version":0}`, 400, CodeInvalidArgument, []string{"version"}},
		{"rollback unknown field", "POST", "/v1/rules:rollback", `{"version":1,"force":true}`, 400, CodeInvalidArgument, []string{"force"}},
		{"wait without version", "GET", "/v1/rules?wait=1s", ``, 400, CodeInvalidArgument, []string{"version"}},
		{"bad wait", "GET", "/v1/rules?version=1&wait=forever", ``, 400, CodeInvalidArgument, []string{"wait"}},
		{"stale and consistent", "GET", "/v1/rules?stale=true&consistent=true", ``, 400, CodeInvalidArgument, []string{"stale", "consistent"}},
		{"bad stale", "GET", "/v1/rules/history?stale=maybe", ``, 400, CodeInvalidArgument, []string{"stale"}},
		{"two rules documents", "POST", "/v1/rules:apply", rulesYAML + "---\n" + rulesYAML, 400, CodeInvalidArgument, []string{"line 14", "second YAML document"}},
		{"min_rule_version with items", "POST", "/v1/limits/check", `{"min_rule_version":3,"items":[]}`, 400, CodeInvalidArgument, []string{"not both"}},
		{"unknown endpoint", "GET", "/v2/nothing", ``, 404, CodeNotFound, []string{"/v2/nothing"}},
		{"wrong method", "POST", "/v1/cluster", ``, 405, CodeMethodNotAllowed, []string{"POST", "/v1/cluster", "GET"}},
		{"wrong method on a rule", "POST", "/v1/rules/x", rule + `}`, 405, CodeMethodNotAllowed, []string{"GET, PUT, DELETE"}},
		{"reserved rule id", "PUT", "/v1/rules/history", `{"match":{"route":"/x"},"key":"ip","rate":1,"period":"1s"}`, 400, CodeInvalidArgument, []string{"reserved"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := n.do(t, c.method, c.path, c.body)
			if r.code != c.code {
				t.Fatalf("status %d, want %d: %s", r.code, c.code, r.body)
			}
			e := r.errBody(t)
			if e.Code != c.errCode || e.Error == "" {
				t.Fatalf("error body %+v, want code %s", e, c.errCode)
			}
			for _, m := range c.mentions {
				if !strings.Contains(e.Error, m) {
					t.Errorf("error %q does not mention %q", e.Error, m)
				}
			}
		})
	}
	if n.version() != v {
		t.Fatalf("bad input changed the version: %d -> %d", v, n.version())
	}
}

func TestHTTPLongPoll(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	if r := n.do(t, "POST", "/v1/rules:apply", rulesYAML); r.code != 200 {
		t.Fatal(r.code)
	}
	v := n.version()

	// Nothing newer within the wait: the current set comes back.
	var set setReply
	r := n.do(t, "GET", "/v1/rules?version="+u(v)+"&wait=20ms", nil)
	r.json(t, &set)
	if r.code != 200 || set.Version != v {
		t.Fatalf("empty poll: %d %s", r.code, r.body)
	}
	// A version the caller is already behind answers at once.
	r = n.do(t, "GET", "/v1/rules?version=0&wait=60s", nil)
	r.json(t, &set)
	if set.Version != v {
		t.Fatalf("behind: %s", r.body)
	}

	got := make(chan reply, 1)
	go func() { got <- n.do(t, "GET", "/v1/rules?version="+u(v)+"&wait=60s", nil) }()
	r = n.do(t, "PUT", "/v1/rules/late", map[string]any{"match": map[string]any{"route": "/late"}, "key": "ip", "rate": 1, "period": "1s"})
	var wv versionJSON
	r.json(t, &wv)
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("long poll did not return after a write")
	}
	r.json(t, &set)
	if r.code != 200 || set.Version < wv.Version || !slices.Contains(ruleIDs(set.Rules), "late") {
		t.Fatalf("long poll: %d %s", r.code, r.body)
	}
}

func TestHTTPOverrides(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	if r := n.do(t, "POST", "/v1/rules:apply", rulesYAML); r.code != 200 {
		t.Fatal(r.code)
	}
	exp := time.Unix(0, n.b.now).Add(time.Hour).UTC()
	var wv versionJSON
	r := n.do(t, "PUT", "/v1/overrides", map[string]any{"key": "apikey:ak_1", "rule": "orders.write", "rate": 100, "expires_at": exp.Format(time.RFC3339)})
	r.json(t, &wv)
	if r.code != 200 || wv.Version != n.version() {
		t.Fatalf("put override: %d %s", r.code, r.body)
	}
	var ov struct {
		Version   uint64           `json:"version"`
		Overrides []rules.Override `json:"overrides"`
	}
	r = n.do(t, "GET", "/v1/overrides", nil)
	r.json(t, &ov)
	if r.code != 200 || len(ov.Overrides) != 1 || ov.Overrides[0].Rate != 100 || !ov.Overrides[0].ExpiresAt.Equal(exp) {
		t.Fatalf("list overrides: %d %s", r.code, r.body)
	}
	// The override applies to checks: the limit is now 100.
	var res checkResultJSON
	r = n.do(t, "POST", "/v1/limits/check", map[string]any{"key": "apikey:ak_1", "rule": "orders.write"})
	r.json(t, &res)
	if !res.Allowed || res.Limit != 100 {
		t.Fatalf("check under override: %s", r.body)
	}
	r = n.do(t, "DELETE", "/v1/overrides?key=apikey:ak_1&rule=orders.write", nil)
	if r.code != 200 || len(n.store.Current().Overrides) != 0 {
		t.Fatalf("delete override: %d %s", r.code, r.body)
	}
	if r = n.do(t, "DELETE", "/v1/overrides?key=apikey:ak_1&rule=orders.write", nil); r.code != 404 {
		t.Fatalf("delete twice: %d", r.code)
	}
}

func TestHTTPCheck(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	if r := n.do(t, "POST", "/v1/rules:apply", rulesYAML); r.code != 200 {
		t.Fatal(r.code)
	}
	var res checkResultJSON
	r := n.do(t, "POST", "/v1/limits/check", `{"key":"apikey:ak_1","rule":"orders.write"}`)
	r.json(t, &res)
	if r.code != 200 || !res.Allowed || res.Limit != 20 || res.Remaining != 19 || res.RetryAfterMS != 0 {
		t.Fatalf("check (cost defaults to 1): %d %s", r.code, r.body)
	}
	r = n.do(t, "POST", "/v1/limits/check", `{"key":"apikey:ak_1","rule":"orders.write","cost":0}`)
	r.json(t, &res)
	if !res.Allowed || res.Remaining != 19 {
		t.Fatalf("peek: %s", r.body)
	}
	r = n.do(t, "POST", "/v1/limits/check", `{"key":"apikey:ak_1","rule":"orders.write","cost":19}`)
	r.json(t, &res)
	if !res.Allowed || res.Remaining != 0 {
		t.Fatalf("drain: %s", r.body)
	}
	r = n.do(t, "POST", "/v1/limits/check", `{"key":"apikey:ak_1","rule":"orders.write"}`)
	r.json(t, &res)
	if r.code != 200 || res.Allowed || res.RetryAfterMS <= 0 {
		t.Fatalf("denied: %d %s", r.code, r.body)
	}

	for _, c := range []struct {
		body, code string
		status     int
	}{
		{`{"key":"k","rule":"nope"}`, CodeNotFound, 404},
		{`{"key":"k","rule":"orders.write","cost":-1}`, CodeInvalidArgument, 400},
		{`{"key":"","rule":"orders.write"}`, CodeInvalidArgument, 400},
		{`{"key":"` + strings.Repeat("k", 257) + `","rule":"orders.write"}`, CodeInvalidArgument, 400},
		{`{"key":"k","rule":"orders.write","kost":1}`, CodeInvalidArgument, 400},
		{`{"key":"k","items":[]}`, CodeInvalidArgument, 400},
	} {
		if r := n.do(t, "POST", "/v1/limits/check", c.body); r.code != c.status || r.errBody(t).Code != c.code {
			t.Errorf("%s: %d %s", c.body, r.code, r.body)
		}
	}

	var batch struct {
		Results []checkResultJSON `json:"results"`
	}
	r = n.do(t, "POST", "/v1/limits/check", `{"items":[{"key":"ip:1.2.3.4","rule":"search","cost":2},{"key":"k","rule":"nope"},{"key":"k","rule":"search","cost":-3},{"key":"ip:1.2.3.4","rule":"search"}]}`)
	r.json(t, &batch)
	if r.code != 200 || len(batch.Results) != 4 {
		t.Fatalf("batch: %d %s", r.code, r.body)
	}
	b := batch.Results
	if !b[0].Allowed || b[0].Remaining != 98 || b[0].Error != "" {
		t.Errorf("batch[0]: %+v", b[0])
	}
	if b[1].Allowed || b[1].ErrorCode != "unknown_rule" || b[1].Error == "" {
		t.Errorf("batch[1]: %+v", b[1])
	}
	if b[2].Allowed || b[2].ErrorCode != CodeInvalidArgument || !strings.Contains(b[2].Error, "cost") {
		t.Errorf("batch[2]: %+v", b[2])
	}
	if !b[3].Allowed || b[3].Remaining != 97 {
		t.Errorf("batch[3] (the bad item took nothing): %+v", b[3])
	}

	var lim struct {
		Key    string `json:"key"`
		Limits []struct {
			Rule string `json:"rule"`
			checkResultJSON
		} `json:"limits"`
	}
	r = n.do(t, "GET", "/v1/limits/ip:1.2.3.4", nil)
	r.json(t, &lim)
	if r.code != 200 || lim.Key != "ip:1.2.3.4" || len(lim.Limits) != 2 || lim.Limits[1].Rule != "search" || lim.Limits[1].Remaining != 97 {
		t.Fatalf("limits: %d %s", r.code, r.body)
	}
	if r = n.do(t, "GET", "/v1/limits/"+strings.Repeat("k", 300), nil); r.code != 400 {
		t.Fatalf("long key: %d", r.code)
	}
}

func TestHTTPClusterHealthMetrics(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	var cl struct {
		Self         string       `json:"self"`
		Leader       string       `json:"leader"`
		RulesVersion uint64       `json:"rules_version"`
		RingVersion  uint64       `json:"ring_version"`
		Members      []memberJSON `json:"members"`
	}
	r := n.do(t, "GET", "/v1/cluster", nil)
	r.json(t, &cl)
	if r.code != 200 || cl.Self != "n1" || cl.Leader != "n1" || cl.RingVersion != 7 || cl.RulesVersion != n.version() ||
		len(cl.Members) != 1 || cl.Members[0].RaftRole != "leader" || cl.Members[0].PartitionsOwned != 271 {
		t.Fatalf("cluster: %d %s", r.code, r.body)
	}
	if r = n.do(t, "GET", "/healthz", nil); r.code != 200 || strings.TrimSpace(string(r.body)) != "ok" {
		t.Fatalf("healthz: %d %q", r.code, r.body)
	}
	if r = n.do(t, "GET", "/readyz", nil); r.code != 200 || strings.TrimSpace(string(r.body)) != "ready" {
		t.Fatalf("readyz: %d %q", r.code, r.body)
	}
	notReady := errorString("no Raft leader known")
	var e error = notReady
	n.b.ready.Store(&e)
	if r = n.do(t, "GET", "/readyz", nil); r.code != 503 || !strings.Contains(string(r.body), "no Raft leader known") {
		t.Fatalf("readyz not ready: %d %q", r.code, r.body)
	}
	n.do(t, "PUT", "/v1/rules/x", "{") // one 400
	r = n.do(t, "GET", "/metrics", nil)
	for _, want := range []string{
		`weir_api_http_requests_total{code="200",route="GET /v1/cluster"} 1`,
		`weir_api_http_requests_total{code="503",route="GET /readyz"} 1`,
		`weir_api_http_requests_total{code="400",route="PUT /v1/rules/{id}"} 1`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// Keys are byte-exact: a JSON body whose key holds a byte that is not
// UTF-8 (or an escaped lone surrogate) is refused, where encoding/json
// would have replaced it with U+FFFD, so that "apikey:\xff",
// "apikey:\xfe" and "apikey:\ufffd" shared one counter. The real U+FFFD
// and a proper surrogate pair are keys like any other.
func TestHTTPCheckKeysAreByteExact(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	if r := n.do(t, "POST", "/v1/rules:apply", rulesYAML); r.code != 200 {
		t.Fatal(r.code)
	}
	for _, body := range []string{
		"{\"key\":\"apikey:\xff\",\"rule\":\"orders.write\"}",
		"{\"key\":\"apikey:\xfe\",\"rule\":\"orders.write\"}",
		"{\"items\":[{\"key\":\"apikey:\xff\",\"rule\":\"orders.write\"}]}",
		`{"key":"apikey:\udcff","rule":"orders.write"}`,
		`{"key":"apikey:\ud83d","rule":"orders.write"}`,
		`{"key":"apikey:\ud83d\u0041","rule":"orders.write"}`,
		"{\"key\":\"apikey:ok\",\"rule\":\"orders.write\",\"x\xff\":1}",
	} {
		r := n.do(t, "POST", "/v1/limits/check", body)
		if e := r.errBody(t); r.code != 400 || e.Code != CodeInvalidArgument || !strings.Contains(e.Error, "UTF") {
			t.Errorf("%q: %d %s, want 400 naming UTF-8/UTF-16", body, r.code, r.body)
		}
	}
	if r := n.do(t, "GET", "/v1/limits/apikey:%FF", nil); r.code != 400 || !strings.Contains(r.errBody(t).Error, "UTF-8") {
		t.Errorf("key \\xff in the path: %d %s", r.code, r.body)
	}
	// Nothing above took a token from the U+FFFD key's counter.
	var res checkResultJSON
	for _, c := range []struct {
		body      string
		remaining int64
	}{
		{`{"key":"apikey:` + "\ufffd" + `","rule":"orders.write"}`, 19},
		{`{"key":"apikey:\ufffd","rule":"orders.write"}`, 18}, // the same key, escaped
		{`{"key":"apikey:\ud83d\ude00","rule":"orders.write"}`, 19},
		{`{"key":"apikey:` + "\U0001F600" + `","rule":"orders.write"}`, 18},
	} {
		r := n.do(t, "POST", "/v1/limits/check", c.body)
		r.json(t, &res)
		if r.code != 200 || !res.Allowed || res.Remaining != c.remaining {
			t.Errorf("%s: %d %s, want allowed with %d left", c.body, r.code, r.body, c.remaining)
		}
	}
}

// A name given twice in one JSON object, at any depth and in any case, is
// refused: encoding/json would keep the last one.
func TestHTTPRepeatedJSONNames(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	if r := n.do(t, "POST", "/v1/rules:apply", rulesYAML); r.code != 200 {
		t.Fatal(r.code)
	}
	v := n.version()
	for _, c := range []struct{ method, path, body, name string }{
		{"POST", "/v1/limits/check", `{"key":"apikey:a","rule":"orders.write","cost":-5,"cost":1}`, "cost"},
		{"POST", "/v1/limits/check", `{"key":"apikey:a","rule":"orders.write","cost":1,"Cost":50}`, "Cost"},
		{"POST", "/v1/limits/check", `{"items":[{"key":"apikey:a","rule":"orders.write"},{"key":"apikey:a","rule":"orders.write","key":"apikey:b"}]}`, "key"},
		{"POST", "/v1/limits/check", `{"items":[],"items":[{"key":"apikey:a","rule":"orders.write"}]}`, "items"},
		{"PUT", "/v1/rules/x", `{"match":{"route":"/x","route":"/y"},"key":"ip","rate":1,"period":"1s"}`, "route"},
		{"PUT", "/v1/rules/x", `{"match":{"route":"/x"},"key":"ip","rate":1,"rate":1000,"period":"1s"}`, "rate"},
		{"PUT", "/v1/overrides", `{"key":"apikey:a","rule":"orders.write","rate":5,"rate":500}`, "rate"},
		{"POST", "/v1/rules:rollback", `{"version":1,"version":2}`, "version"},
	} {
		r := n.do(t, c.method, c.path, c.body)
		if e := r.errBody(t); r.code != 400 || e.Code != CodeInvalidArgument || !strings.Contains(e.Error, `"`+c.name+`" is given twice`) {
			t.Errorf("%s %s %s: %d %s, want 400 naming %q", c.method, c.path, c.body, r.code, r.body, c.name)
		}
	}
	if n.version() != v {
		t.Fatalf("refused writes changed the version: %d -> %d", v, n.version())
	}
	// Nothing was taken; the same names in different objects are fine.
	var batch struct {
		Results []checkResultJSON `json:"results"`
	}
	r := n.do(t, "POST", "/v1/limits/check", `{"items":[{"key":"apikey:a","rule":"orders.write"},{"key":"apikey:a","rule":"orders.write","cost":0}]}`)
	r.json(t, &batch)
	if r.code != 200 || len(batch.Results) != 2 || batch.Results[1].Remaining != 19 {
		t.Fatalf("same names in two objects: %d %s", r.code, r.body)
	}
}

func TestStrictJSON(t *testing.T) {
	for _, c := range []struct {
		body string
		bad  string // "" when the body is fine, else what the error names
	}{
		{`{"key":"apikey:a","rule":"r","cost":1}`, ""},
		{`{"items":[{"key":"a","rule":"r"},{"key":"b","rule":"r"}]}`, ""},
		{`{"key":"a:{\"key\":1,\"key\":2}","rule":"r"}`, ""}, // names inside a string are text
		{`{"a":{"b":1},"b":{"a":{"b":[{"b":1},{"b":2}]}}}`, ""},
		{`{"key":"\ud83d\ude00\u00e9\n\"\\"}`, ""},
		{`[[[[[[[[[[{"a":1,"b":{"c":[1,2,{"d":3}]}}]]]]]]]]]]`, ""},
		{`{"cost":-5,"cost":1}`, `"cost" is given twice`},
		{`{"cost":-5,"COST":1}`, `"COST" is given twice`},
		{`{"cost":-5,"co\u0073t":1}`, `"cost" is given twice`}, // encoding/json unescapes names
		{`{"a":{"x":1},"b":{"x":1},"a":2}`, `"a" is given twice`},
		{`{"items":[{"key":"a"},{"key":"a","key":"b"}]}`, `"key" is given twice`},
		{`[[[[[[[[[[{"a":1,"b":{"c":[1,2,{"d":3,"d":4}]}}]]]]]]]]]]`, `"d" is given twice`},
		{`{"key":"\udcff"}`, `\udcff at byte 8`},
		{`{"key":"x\ud83d"}`, `\ud83d at byte 9`},
		{`{"key":"\ud83d\u0041"}`, `\ud83d at byte 8`},
		{`{"\udc00":1}`, `\udc00 at byte 2`},
	} {
		err := strictJSON([]byte(c.body))
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%s: %v, want accepted", c.body, err)
		case c.bad != "" && (!errors.Is(err, limit.ErrInvalid) || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%s: %v, want an invalid-argument error naming %s", c.body, err, c.bad)
		}
	}
}

// TestReadsSayHowTheyWereServed: reads are consistent (read-your-writes)
// by default, ?stale=true is the local copy, ?consistent=true the default's
// alias; on the gRPC side ReadIndex answers the leader's version.
func TestReadsSayHowTheyWereServed(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	if r := n.do(t, "POST", "/v1/rules:apply", rulesYAML); r.code != 200 {
		t.Fatalf("seed: %d %s", r.code, r.body)
	}
	for _, c := range []struct{ path, read string }{
		{"/v1/rules", "consistent"}, {"/v1/rules?consistent=true", "consistent"}, {"/v1/rules?stale=true", "stale"},
		{"/v1/rules?at=" + u(n.version()), "consistent"},
		{"/v1/rules/search", "consistent"}, {"/v1/rules/search?stale=1", "stale"},
		{"/v1/rules/history", "consistent"}, {"/v1/rules/history?stale=true", "stale"},
		{"/v1/overrides", "consistent"}, {"/v1/overrides?stale=true", "stale"},
	} {
		r := n.do(t, "GET", c.path, nil)
		var got struct {
			Version uint64 `json:"version"`
			Read    string `json:"read"`
		}
		if r.code != 200 {
			t.Fatalf("%s: %d %s", c.path, r.code, r.body)
		}
		r.json(t, &got)
		if got.Read != c.read || got.Version != n.version() {
			t.Errorf("%s: read %q at %d, want %q at %d", c.path, got.Read, got.Version, c.read, n.version())
		}
	}
	rc := weirv1.NewRulesClient(n.conn)
	ri, err := rc.ReadIndex(context.Background(), &weirv1.ReadIndexRequest{})
	if err != nil || ri.GetVersion() != n.version() {
		t.Fatalf("ReadIndex = %v, %v; want %d", ri, err, n.version())
	}
}

// oldLeader is a leader that predates Rules.ReadIndex: it only has the
// consistent ListRules.
type oldLeader struct {
	weirv1.UnimplementedRulesServer
	version    uint64
	consistent atomic.Bool
}

func (o *oldLeader) ListRules(_ context.Context, req *weirv1.ListRulesRequest) (*weirv1.RuleSet, error) {
	o.consistent.Store(req.GetConsistent())
	return &weirv1.RuleSet{Version: o.version}, nil
}

// TestReadIndexFromALeaderWithoutIt: during a rolling upgrade a follower
// takes the read index from an old leader's consistent ListRules; with no
// leader known, a read is 503 and a stale read answers.
func TestReadIndexFromALeaderWithoutIt(t *testing.T) {
	n := startNode(t, nodeOpts{}) // not bootstrapped: never the leader
	if r := n.do(t, "GET", "/v1/rules", nil); r.code != http.StatusServiceUnavailable || !strings.Contains(r.errBody(t).Error, "stale") ||
		r.header.Get("Retry-After") != "1" {
		t.Fatalf("no leader: %d %s %v", r.code, r.body, r.header)
	}
	if r := n.do(t, "GET", "/v1/rules?stale=true", nil); r.code != 200 {
		t.Fatalf("stale read with no leader: %d %s", r.code, r.body)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	old := &oldLeader{}
	g := grpc.NewServer()
	weirv1.RegisterRulesServer(g, old)
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	defer func() { g.Stop(); <-served }()
	addr := lis.Addr().String()
	n.b.leader.Store(&addr)
	r := n.do(t, "GET", "/v1/rules", nil)
	if r.code != 200 || !old.consistent.Load() {
		t.Fatalf("read through an old leader: %d %s (consistent ListRules asked: %v)", r.code, r.body, old.consistent.Load())
	}
}
