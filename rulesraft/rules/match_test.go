package rules

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

func rule(id, route, method, plan, key string) Rule {
	return Rule{ID: id, Match: Match{Route: route, Method: method, Plan: plan}, Key: key,
		Rate: 10, Period: Duration(time.Second)}
}

func matchIDs(m *Matcher, route, method, plan string) []string {
	out := []string{}
	for _, r := range m.Match(route, method, plan, nil) {
		out = append(out, r.ID)
	}
	return out
}

func TestMatch(t *testing.T) {
	rs := []Rule{
		rule("exact", "/v1/orders", "POST", "", KeyAPIKey),
		rule("exact.any", "/v1/orders", "*", "", KeyIP),
		rule("param", "/v1/users/{id}", "GET", "", KeyUser),
		rule("param.deep", "/v1/users/{id}/orders/{order}", "GET", "", KeyUser),
		rule("param.static", "/v1/users/me", "GET", "", KeyUser),
		rule("wild", "/v1/admin/*", "*", "", KeyIP),
		rule("wild.param", "/v2/{tenant}/*", "GET", "", KeyAPIKey),
		rule("root", "/", "GET", "", KeyIP),
		rule("all", "/*", "DELETE", "", KeyGlobal),
		// Plan replacement: same route, method and key.
		rule("reads.free", "/v1/items/*", "GET", "*", KeyAPIKey),
		rule("reads.free.hour", "/v1/items/*", "GET", "", KeyAPIKey), // "" is "*"
		rule("reads.pro", "/v1/items/*", "GET", "pro", KeyAPIKey),
		rule("reads.ent", "/v1/items/*", "GET", "enterprise", KeyAPIKey),
		rule("reads.ent.hour", "/v1/items/*", "GET", "enterprise", KeyAPIKey),
		// Same route and method, other key: not replaced.
		rule("reads.ip", "/v1/items/*", "GET", "*", KeyIP),
		// Same route and key, other method pattern: not replaced.
		rule("reads.anymethod", "/v1/items/*", "*", "*", KeyAPIKey),
		// Param names do not matter for the group.
		rule("acct.free", "/v1/acct/{a}", "GET", "*", KeyAPIKey),
		rule("acct.pro", "/v1/acct/{b}/", "GET", "pro", KeyAPIKey),
		// Several windows on one key.
		rule("search.s", "/v1/search", "GET", "*", KeyAPIKey),
		rule("search.m", "/v1/search", "GET", "*", KeyAPIKey),
		rule("search.h", "/v1/search", "GET", "*", KeyAPIKey),
	}
	m, err := Compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		route, method, plan string
		want                []string
	}{
		{"/v1/orders", "POST", "", []string{"exact", "exact.any"}},
		{"/v1/orders", "GET", "", []string{"exact.any"}},
		{"/v1/orders/", "POST", "", []string{"exact", "exact.any"}},
		{"//v1//orders", "POST", "", []string{"exact", "exact.any"}},
		{"/v1/orders?page=2", "POST", "", []string{"exact", "exact.any"}},
		{"/v1/x/../orders", "POST", "", []string{"exact", "exact.any"}},
		{"/v1/orders/7", "POST", "", []string{}},
		{"/v1/Orders", "POST", "", []string{}},
		{"/v1/orders", "post", "", []string{"exact.any"}},
		{"/v1", "POST", "", []string{}},
		{"/v1/users/42", "GET", "", []string{"param"}},
		{"/v1/users/me", "GET", "", []string{"param", "param.static"}},
		{"/v1/users/42/orders/9", "GET", "", []string{"param.deep"}},
		{"/v1/users/42/orders", "GET", "", []string{}},
		{"/v1/users", "GET", "", []string{}},
		{"/v1/users/42", "PUT", "", []string{}},
		{"/v1/admin", "POST", "", []string{"wild"}},
		{"/v1/admin/", "POST", "", []string{"wild"}},
		{"/v1/admin/users/1", "POST", "", []string{"wild"}},
		{"/v1/administrator", "POST", "", []string{}},
		{"/v2/acme", "GET", "", []string{"wild.param"}},
		{"/v2/acme/a/b/c", "GET", "", []string{"wild.param"}},
		{"/v2", "GET", "", []string{}},
		{"/", "GET", "", []string{"root"}},
		{"", "GET", "", []string{"root"}},
		{"/v1/admin/x", "DELETE", "", []string{"all", "wild"}},
		{"/", "DELETE", "", []string{"all"}},
		// Plan replacement.
		{"/v1/items/1", "GET", "", []string{"reads.anymethod", "reads.free", "reads.free.hour", "reads.ip"}},
		{"/v1/items/1", "GET", "free", []string{"reads.anymethod", "reads.free", "reads.free.hour", "reads.ip"}},
		{"/v1/items/1", "GET", "pro", []string{"reads.anymethod", "reads.ip", "reads.pro"}},
		{"/v1/items/1", "GET", "enterprise", []string{"reads.anymethod", "reads.ent", "reads.ent.hour", "reads.ip"}},
		{"/v1/items/1", "POST", "pro", []string{"reads.anymethod"}},
		{"/v1/acct/1", "GET", "pro", []string{"acct.pro"}},
		{"/v1/acct/1", "GET", "free", []string{"acct.free"}},
		// Several windows all apply.
		{"/v1/search", "GET", "pro", []string{"search.h", "search.m", "search.s"}},
	}
	for _, tt := range tests {
		got := matchIDs(m, tt.route, tt.method, tt.plan)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Match(%q, %q, %q) = %q, want %q", tt.route, tt.method, tt.plan, got, tt.want)
		}
	}

	// Match appends after what dst holds and leaves that alone.
	keep := &Rule{ID: "zzz"}
	got := m.Match("/v1/orders", "POST", "", []*Rule{keep})
	if len(got) != 3 || got[0] != keep || got[1].ID != "exact" {
		t.Fatalf("append: %v", got)
	}
	// Returned pointers are the matcher's normalized copies.
	r, ok := m.Rule("exact")
	if !ok || got[1] != r || r.Burst != 10 || r.Match.Plan != "*" {
		t.Fatalf("Rule(exact) = %+v, %v", r, ok)
	}
	if _, ok := m.Rule("nope"); ok {
		t.Fatal("Rule(nope) found")
	}
}

func TestCompileCopiesAndValidates(t *testing.T) {
	rs := []Rule{rule("a", "/a", "GET", "", KeyIP)}
	m, err := Compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	rs[0].Match.Route = "/b"
	if got := matchIDs(m, "/a", "GET", ""); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("matcher changed with its input: %q", got)
	}
	if _, err := Compile([]Rule{rule("a", "/a/*/b", "GET", "", KeyIP)}); err == nil {
		t.Fatal("Compile accepted an invalid rule")
	}
}

// rules1000 is a mix of exact, param and wildcard routes over 1,000 rules,
// with several methods and plans.
func rules1000() []Rule {
	rs := make([]Rule, 0, 1000)
	methods := []string{"GET", "POST", "*", "PUT"}
	for i := 0; len(rs) < 1000; i++ {
		m := methods[i%len(methods)]
		plan := "*"
		if i%5 == 0 {
			plan = "pro"
		}
		rs = append(rs,
			rule(fmt.Sprintf("exact.%d", i), fmt.Sprintf("/v%d/svc%d/items", i%3, i), m, plan, KeyAPIKey),
			rule(fmt.Sprintf("param.%d", i), fmt.Sprintf("/api/svc%d/{id}/detail", i), m, plan, KeyUser),
			rule(fmt.Sprintf("wild.%d", i), fmt.Sprintf("/static/svc%d/*", i), m, "*", KeyIP),
		)
	}
	rs = append(rs[:997], rule("global.api", "/api/*", "*", "*", KeyGlobal),
		rule("tenant.api", "/api/{svc}/*", "GET", "*", "header:X-Tenant"),
		rule("root", "/*", "*", "*", KeyIP))
	return rs
}

func TestMatchDoesNotAllocate(t *testing.T) {
	m, err := Compile(rules1000())
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]*Rule, 0, 16)
	var n int
	allocs := testing.AllocsPerRun(100, func() {
		n = len(m.Match("/api/svc122/42/detail", "GET", "free", dst[:0]))
	})
	if allocs != 0 {
		t.Fatalf("Match allocated %v times per call", allocs)
	}
	if n != 4 { // param.122, global.api, tenant.api, root
		t.Fatalf("matched %d rules, want 4: %v", n, matchIDs(m, "/api/svc122/42/detail", "GET", "free"))
	}
}

func BenchmarkMatch1000(b *testing.B) {
	m, err := Compile(rules1000())
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct{ name, route, method, plan string }{
		{"param", "/api/svc122/42/detail", "GET", "free"},
		{"exact", "/v1/svc100/items", "GET", "pro"},
		{"wildcard", "/static/svc77/css/site.css", "POST", ""},
		{"miss", "/nope/nothing/here", "GET", ""},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			dst := make([]*Rule, 0, 16)
			b.ReportAllocs()
			for b.Loop() {
				dst = m.Match(c.route, c.method, c.plan, dst[:0])
			}
			if c.name != "miss" && len(dst) < 2 {
				b.Fatalf("%s matched %d rules", c.name, len(dst))
			}
		})
	}
}
