package rules

import (
	"strings"
	"testing"
)

// durable: off parses and opts out; on and absent are durable; anything
// else is refused with the field named.
func TestDurableField(t *testing.T) {
	for _, tc := range []struct {
		value   string
		durable bool
		problem string
	}{
		{"", true, ""}, {"on", true, ""}, {"off", false, ""}, {"sometimes", false, `durable: "sometimes" is not on or off`},
	} {
		src := "rules:\n  - id: monthly\n    match: {route: /v1/x}\n    key: apikey\n    algorithm: fixed_window\n    rate: 10000\n    period: 720h\n"
		if tc.value != "" {
			src += "    durable: " + tc.value + "\n"
		}
		rs, err := ParseFile([]byte(src))
		if tc.problem != "" {
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Errorf("durable: %s: err %v, want %q", tc.value, err, tc.problem)
			}
			continue
		}
		if err != nil {
			t.Fatalf("durable: %s: %v", tc.value, err)
		}
		if got := rs[0].IsDurable(); got != tc.durable {
			t.Errorf("durable: %s: IsDurable %t, want %t", tc.value, got, tc.durable)
		}
	}
}
