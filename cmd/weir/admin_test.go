package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/rulesraft/rules"
)

const badRulesFile = `rules:
  - id: orders.write
    match: {route: /v1/orders, method: POST}
    key: apikey
    rate: 0
    period: 1s
  - id: orders.write
    match: {route: v1/search}
    key: apikey
    algorithm: magic_bucket
    rate: 10
    period: 1s
    colour: blue
`

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestApplyBadFileListsEveryProblemAndSendsNothing(t *testing.T) {
	api := newFakeAPI(t, nil)
	path := writeTemp(t, "rules.yaml", badRulesFile)
	wantLines := []string{
		"line 5: rules[0].rate: must be > 0",
		"line 7: rules[1].id: duplicate id \"orders.write\"",
		"line 8: rules[1].match.route: \"v1/search\" must start with \"/\"",
		"line 10: rules[1].algorithm: unknown algorithm \"magic_bucket\"",
		"line 13: rules[1].colour: unknown field",
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		file  string
	}{
		{"file", "", []string{"rules", "apply", "-f", path, "--addr", api.addr()}, path},
		{"stdin", badRulesFile, []string{"rules", "apply", "--dry-run", "-f", "-", "--addr", api.addr()}, "stdin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.stdin, nil, tc.args...)
			if r.code != exitError {
				t.Errorf("exit %d, want %d", r.code, exitError)
			}
			head := "weir: " + tc.file + " has 5 problems; nothing was sent:\n"
			if !strings.HasPrefix(r.stderr, head) {
				t.Errorf("stderr does not start with %q:\n%s", head, r.stderr)
			}
			for _, l := range wantLines {
				if !strings.Contains(r.stderr, "\n  "+l) {
					t.Errorf("stderr does not list %q:\n%s", l, r.stderr)
				}
			}
			if got := strings.Count(r.stderr, "\n  "); got != len(wantLines) {
				t.Errorf("stderr lists %d problems, want %d:\n%s", got, len(wantLines), r.stderr)
			}
		})
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("a bad file sent %d requests; want none", n)
	}
}

func TestPutBadRuleListsProblemsWithTheirOwnLines(t *testing.T) {
	api := newFakeAPI(t, nil)
	// One rule, not a rules file: lines and fields are the rule's own.
	yamlRule := "# one rule\nid: search.read\nmatch: {route: /v1/search}\nkey: cookie\nrate: ten\nperiod: 1s\n"
	r := runCLI(t, "", nil, "rules", "put", "-f", writeTemp(t, "rule.yaml", yamlRule), "--addr", api.addr())
	if r.code != exitError {
		t.Errorf("exit %d, want %d", r.code, exitError)
	}
	for _, l := range []string{
		"line 4: key: unknown key type \"cookie\"",
		"line 5: rate: must be a whole number, got \"ten\"",
	} {
		if !strings.Contains(r.stderr, l) {
			t.Errorf("stderr does not hold %q:\n%s", l, r.stderr)
		}
	}
	jsonRule := `{"id": "a", "match": {"route": "/x"}, "key": "ip", "rate": 5, "period": "soon"}`
	r = runCLI(t, jsonRule, nil, "rules", "put", "-f", "-", "--addr", api.addr())
	if want := "weir: stdin is invalid; nothing was sent: line 1: period: invalid duration \"soon\""; !strings.HasPrefix(r.stderr, want) || r.code != exitError {
		t.Errorf("exit %d, stderr:\n%s\nwant prefix %q", r.code, r.stderr, want)
	}
	r = runCLI(t, "", nil, "rules", "put", "other", "-f", writeTemp(t, "r.json", strings.Replace(jsonRule, "soon", "1s", 1)), "--addr", api.addr())
	if r.code != exitUsage || !strings.Contains(r.stderr, `has id "a", not "other"`) {
		t.Errorf("mismatched ID: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("bad rules sent %d requests; want none", n)
	}
}

func TestMissingFileIsAClearError(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	r := runCLI(t, "", nil, "rules", "apply", "-f", missing, "--addr", closedAddr(t))
	want := "weir: cannot read " + missing + ": no such file or directory\n"
	if r.code != exitError || r.stderr != want {
		t.Errorf("exit %d, stderr %q; want 1, %q", r.code, r.stderr, want)
	}
}

func TestApplySendsTheFileAndPrintsDiffAndVersion(t *testing.T) {
	api := newFakeAPI(t, map[string]cannedAnswer{
		"POST /v1/rules:apply": {body: `{"version":42,"diff":["+ search.read","~ orders.write: rate 10 -> 20"],"dry_run":false}`},
	})
	file := "rules:\n  - id: orders.write\n    match: {route: /v1/orders}\n    key: apikey\n    rate: 20\n    period: 1s\n"
	r := runCLI(t, "", map[string]string{envAddr: api.addr(), envToken: "s3cret", "WEIR_AUTHOR": "alice"},
		"rules", "apply", "-f", writeTemp(t, "rules.yaml", file), "--replace")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	want := "+ search.read\n~ orders.write: rate 10 -> 20\napplied: rules version 42\n"
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
	reqs := api.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	got := reqs[0]
	if got.URI != "/v1/rules:apply?replace=true" || got.Body != file || got.Auth != "Bearer s3cret" || got.Author != "alice" || got.ContentType != "application/yaml" {
		t.Errorf("request = %+v", got)
	}
}

func TestReplaceWithEmptyFileIsRefused(t *testing.T) {
	api := newFakeAPI(t, nil)
	path := writeTemp(t, "empty.yaml", "rules: []\n")
	r := runCLI(t, "", nil, "rules", "apply", "-f", path, "--replace", "--addr", api.addr())
	if r.code != exitUsage || !strings.Contains(r.stderr, "--replace would delete every rule") {
		t.Errorf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("sent %d requests; want none", n)
	}
}

func TestAPIErrorPrintsTheServersSentence(t *testing.T) {
	api := newFakeAPI(t, map[string]cannedAnswer{
		"GET /v1/rules/nope":  {status: 404, body: `{"error":"rule \"nope\" does not exist","code":"not_found"}`},
		"DELETE /v1/rules/x":  {status: 401, body: `{"error":"this node requires an admin token","code":"unauthorized"}`},
		"GET /v1/cluster":     {status: 502, body: "<html>bad gateway</html>\n"},
		"POST /v1/rules:roll": {status: 200, body: "{}"},
		"GET /v1/overrides":   {body: "not json"},
	})
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"rules", "get", "nope"}, "weir: rule \"nope\" does not exist\n"},
		{[]string{"rules", "delete", "x"}, "weir: this node requires an admin token (this node needs an admin token: set --token or WEIR_TOKEN)\n"},
		{[]string{"rules", "delete", "x", "--token", "wrong"}, "weir: this node requires an admin token (check --token or WEIR_TOKEN)\n"},
		{[]string{"members"}, "weir: " + api.addr() + " answered 502 Bad Gateway: \"<html>bad gateway</html>\"\n"},
		{[]string{"overrides", "list"}, "weir: unexpected answer from node: GET /v1/overrides at " + api.addr() + " answered \"not json\", which is not the JSON expected"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			r := runCLI(t, "", map[string]string{envAddr: api.addr()}, tt.args...)
			if r.code != exitError {
				t.Errorf("exit %d, want 1", r.code)
			}
			if !strings.HasPrefix(r.stderr, tt.want) {
				t.Errorf("stderr:\n%q\nwant prefix:\n%q", r.stderr, tt.want)
			}
		})
	}
}

func TestCheckDeniedExits0(t *testing.T) {
	api := newFakeAPI(t, map[string]cannedAnswer{
		"POST /v1/limits/check": {body: `{"allowed":false,"remaining":0,"limit":20,"reset_ms":1500,"retry_after_ms":250}`},
	})
	r := runCLI(t, "", nil, "check", "--key", "apikey:ak_1", "--rule", "orders.write", "--cost", "3", "--addr", api.addr())
	if r.code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	want := "DENIED\n" +
		"key:          apikey:ak_1\n" +
		"rule:         orders.write\n" +
		"cost:         3\n" +
		"remaining:    0 of 20\n" +
		"reset:        in 1.5s\n" +
		"retry after:  250ms\n"
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
	reqs := api.requests()
	if len(reqs) != 1 || reqs[0].Body != `{"key":"apikey:ak_1","rule":"orders.write","cost":3}` {
		t.Errorf("requests = %+v", reqs)
	}

	r = runCLI(t, "", nil, "check", "--key", "apikey:ak_1", "--rule", "orders.write", "-o", "json", "--addr", api.addr())
	var d decision
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || r.code != 0 || d.Allowed || d.Limit != 20 {
		t.Errorf("-o json: exit %d, stdout %q, decoded %+v, err %v", r.code, r.stdout, d, err)
	}
	if got := api.requests()[1].Body; got != `{"key":"apikey:ak_1","rule":"orders.write","cost":1}` {
		t.Errorf("default cost: body %s", got)
	}
}

func TestRulesDiffComputesLocally(t *testing.T) {
	api := newFakeAPI(t, map[string]cannedAnswer{
		"GET /v1/rules": {byQuery: map[string]string{
			"at=3": `{"version":3,"rules":[
				{"id":"a","match":{"route":"/a"},"key":"ip","rate":10,"period":"1s"},
				{"id":"b","match":{"route":"/b"},"key":"ip","rate":10,"period":"1s"}]}`,
			"at=7": `{"version":7,"rules":[
				{"id":"a","match":{"route":"/a"},"key":"ip","rate":20,"period":"1s"},
				{"id":"c","match":{"route":"/c"},"key":"ip","rate":10,"period":"1m0s"}]}`,
		}},
	})
	r := runCLI(t, "", nil, "rules", "diff", "3", "7", "--addr", api.addr())
	want := "rules version 3 -> 7:\n~ a: rate 10 -> 20\n~ a: burst 10 -> 20\n- b\n+ c\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d, stdout:\n%s\nwant:\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
	}
	r = runCLI(t, "", nil, "rules", "diff", "-o", "json", "7", "7", "--addr", api.addr())
	if want := "{\n  \"from\": 7,\n  \"to\": 7,\n  \"diff\": []\n}\n"; r.stdout != want {
		t.Errorf("json diff:\n%s\nwant:\n%s", r.stdout, want)
	}
}

// A version that only added, changed or removed an override is a change:
// diff shows it (it printed "no changes" when it compared rules only).
func TestRulesDiffShowsOverrideChanges(t *testing.T) {
	rule := `{"id":"a","match":{"route":"/a"},"key":"apikey","rate":10,"period":"1s"}`
	api := newFakeAPI(t, map[string]cannedAnswer{
		"GET /v1/rules": {byQuery: map[string]string{
			"at=4": `{"version":4,"rules":[` + rule + `],"overrides":[
				{"key":"apikey:ak_1","rule":"a","rate":100},
				{"key":"apikey:ak_2","rule":"a","block":true}]}`,
			"at=5": `{"version":5,"rules":[` + rule + `],"overrides":[
				{"key":"apikey:ak_1","rule":"a","rate":200},
				{"key":"apikey:ak_3","rule":"a","rate":5,"expires_at":"2026-12-01T00:00:00Z"}]}`,
		}},
	})
	r := runCLI(t, "", nil, "rules", "diff", "4", "5", "--addr", api.addr())
	want := "rules version 4 -> 5:\n" +
		"~ override apikey:ak_1 for rule a: rate 100 -> 200\n" +
		"~ override apikey:ak_1 for rule a: burst 100 -> 200\n" +
		"- override apikey:ak_2 for rule a\n" +
		"+ override apikey:ak_3 for rule a\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d, stdout:\n%s\nwant:\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
	}
}

func TestOverridesSetSendsTheOverride(t *testing.T) {
	api := newFakeAPI(t, map[string]cannedAnswer{"PUT /v1/overrides": {body: `{"version":9}`}})
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var out, errOut strings.Builder
	c := &cli{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut,
		getenv: func(string) string { return "" }, now: func() time.Time { return now }}
	code := c.run(t.Context(), []string{"overrides", "set", "--key", "apikey:ak_9", "--rule", "orders.write",
		"--rate", "100", "--burst", "150", "--ttl", "2h", "--addr", api.addr()})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var got rules.Override
	if err := json.Unmarshal([]byte(api.requests()[0].Body), &got); err != nil {
		t.Fatal(err)
	}
	want := rules.Override{Key: "apikey:ak_9", Rule: "orders.write", Rate: 100, Burst: 150, ExpiresAt: now.Add(2 * time.Hour)}
	if !got.ExpiresAt.Equal(want.ExpiresAt) || got.Key != want.Key || got.Rule != want.Rule || got.Rate != want.Rate || got.Burst != want.Burst || got.Block {
		t.Errorf("sent %+v, want %+v", got, want)
	}
	if out.String() != "override set: apikey:ak_9 for rule orders.write: rate 100, burst 150, expires 2026-11-29T14:00:00Z: rules version 9\n" {
		t.Errorf("stdout %q", out.String())
	}
}

func TestFormatRules(t *testing.T) {
	rs := []rules.Rule{
		{ID: "orders.write", Match: rules.Match{Route: "/v1/orders", Method: "POST"}, Key: "apikey",
			Rate: 10, Period: rules.Duration(time.Second), Burst: 20},
		{ID: "search", Match: rules.Match{Route: "/v1/search/*", Plan: "free"}, Key: "header:x-tenant",
			Algorithm: "sliding_window", Rate: 600, Period: rules.Duration(time.Hour), FailMode: "closed", Shadow: true, Lease: 5},
	}
	var b strings.Builder
	if err := formatRules(&b, 12, rs); err != nil {
		t.Fatal(err)
	}
	want := `rules version 12: 2 rules
ID            ROUTE         METHOD  PLAN  KEY              ALGORITHM       RATE    BURST  FAIL    TIMEOUT  SHADOW  LEASE
orders.write  /v1/orders    POST    *     apikey           token_bucket    10/1s   20     open    5ms      no      auto
search        /v1/search/*  *       free  header:X-Tenant  sliding_window  600/1h  600    closed  5ms      yes     5
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	formatRules(&b, 3, nil)
	if b.String() != "rules version 3: 0 rules\n" {
		t.Errorf("empty: %q", b.String())
	}
}

func TestFormatRule(t *testing.T) {
	var b strings.Builder
	r := rules.Rule{ID: "a", Match: rules.Match{Route: "/a"}, Key: "ip", Rate: 5, Period: rules.Duration(time.Minute)}
	if err := formatRule(&b, 4, r); err != nil {
		t.Fatal(err)
	}
	want := `id:             a
match.route:    /a
match.method:   *
match.plan:     *
key:            ip
algorithm:      token_bucket
rate:           5
period:         1m
burst:          5
fail_mode:      open
timeout:        5ms
shadow:         false
lease:          auto
rules version:  4
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestFormatCluster(t *testing.T) {
	var b strings.Builder
	err := formatCluster(&b, clusterAnswer{
		Self: "n2", Leader: "n1", RulesVersion: 17, RingVersion: 3,
		Members: []member{
			{ID: "n1", State: "alive", RaftRole: "leader", PartitionsOwned: 90, ReplicasHeld: 181,
				HTTPAddr: "10.0.0.1:8080", GRPCAddr: "10.0.0.1:9090", RaftAddr: "10.0.0.1:7000", GossipAddr: "10.0.0.1:7946"},
			{ID: "n2", State: "alive", RaftRole: "follower", PartitionsOwned: 181, ReplicasHeld: 90,
				HTTPAddr: "10.0.0.2:8080", GRPCAddr: "10.0.0.2:9090", RaftAddr: "10.0.0.2:7000", GossipAddr: "10.0.0.2:7946"},
			{ID: "n3", State: "suspect", PartitionsOwned: 0},
			{ID: "n4", State: "dead", RaftRole: "none"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `leader: n1   rules version: 17   ring version: 3   members: 3 (+1 leaving or gone)
ID         STATE    RAFT      PARTITIONS  REPLICAS  HTTP           GRPC           RAFT ADDR      GOSSIP
n1 *       alive    leader    90          181       10.0.0.1:8080  10.0.0.1:9090  10.0.0.1:7000  10.0.0.1:7946
n2 (self)  alive    follower  181         90        10.0.0.2:8080  10.0.0.2:9090  10.0.0.2:7000  10.0.0.2:7946
n3         suspect  -         0           0         -              -              -              -
n4         dead     none      0           0         -              -              -              -
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

// A node that knows why it has no leader (a missing flag) says so under
// the summary line.
func TestFormatClusterNoLeader(t *testing.T) {
	var b strings.Builder
	err := formatCluster(&b, clusterAnswer{Self: "n1", NoLeader: "no Raft leader: started with neither --bootstrap-expect nor --join",
		Members: []member{{ID: "n1", State: "alive", RaftRole: "none"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "leader: -   rules version: 0   ring version: 0   members: 1\n" +
		"no Raft leader: started with neither --bootstrap-expect nor --join\n"
	if !strings.HasPrefix(b.String(), want) {
		t.Errorf("got:\n%s\nwant it to start with:\n%s", b.String(), want)
	}
}

func TestFormatOverridesAndHistory(t *testing.T) {
	var b strings.Builder
	err := formatOverrides(&b, 8, []rules.Override{
		{Key: "apikey:ak_1", Rule: "orders.write", Rate: 100},
		{Key: "ip:10.1.2.3", Rule: "search", Block: true, ExpiresAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `rules version 8: 2 overrides
RULE          KEY          LIMIT                EXPIRES
orders.write  apikey:ak_1  rate 100, burst 100  never
search        ip:10.1.2.3  blocked              2026-12-01T00:00:00Z
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	err = formatHistory(&b, []historyEntry{
		{Version: 12, Author: "admin", At: "2026-11-29T19:05:07Z", Summary: "apply: +1 ~1"},
		{Version: 3, At: "2026-11-28T08:00:00Z", Summary: "put orders.write"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want = `VERSION  AT                    AUTHOR  SUMMARY
12       2026-11-29T19:05:07Z  admin   apply: +1 ~1
3        2026-11-28T08:00:00Z  -       put orders.write
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestJSONOutputIsTheServersJSONIndented(t *testing.T) {
	raw := `{"self":"n1","leader":"n1","rules_version":2,"ring_version":1,"members":[],"extra":{"kept":true}}`
	api := newFakeAPI(t, map[string]cannedAnswer{"GET /v1/cluster": {body: raw}})
	r := runCLI(t, "", nil, "status", "-o", "json", "--addr", api.addr())
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := "{\n  \"self\": \"n1\",\n  \"leader\": \"n1\",\n  \"rules_version\": 2,\n  \"ring_version\": 1,\n  \"members\": [],\n  \"extra\": {\n    \"kept\": true\n  }\n}\n"
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
}
