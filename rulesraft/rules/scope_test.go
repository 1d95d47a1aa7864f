package rules

import "testing"

func TestParseScope(t *testing.T) {
	rs, err := ParseFile([]byte("rules:\n  - {id: a, match: {route: /a}, key: apikey, rate: 5, period: 1s, scope: global}\n  - {id: b, match: {route: /b}, key: apikey, rate: 5, period: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0].Global() || rs[1].Global() {
		t.Fatalf("Global() = %v, %v; want true, false (scope defaults to region)", rs[0].Global(), rs[1].Global())
	}
	ps := parseProblems(t, "rules:\n  - {id: a, match: {route: /a}, key: ip, rate: 5, period: 1s, scope: planet}\n")
	if len(ps) != 1 || ps[0].Field != "rules[0].scope" {
		t.Fatalf("problems %+v, want one on rules[0].scope", ps)
	}
}
