package rules

import "testing"

func TestAppliesToPlan(t *testing.T) {
	rs, err := ParseFile([]byte(`rules:
  - {id: reads.free, match: {route: /r, plan: "*"}, key: apikey, rate: 1, period: 1s}
  - {id: reads.pro, match: {route: /r, plan: pro}, key: apikey, rate: 9, period: 1s}
  - {id: other, match: {route: /o}, key: apikey, rate: 1, period: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id, plan string
		want     bool
	}{
		{"reads.free", "free", true}, {"reads.free", "pro", false}, // replaced by reads.pro for pro
		{"reads.pro", "pro", true}, {"reads.pro", "free", false},
		{"other", "pro", true}, {"nope", "pro", false},
	} {
		if got := m.AppliesToPlan(c.id, c.plan); got != c.want {
			t.Errorf("AppliesToPlan(%s, %s) = %v, want %v", c.id, c.plan, got, c.want)
		}
	}
}
