package rulesraft

import (
	"errors"
	"strings"
	"testing"

	"github.com/weirlimit/weir/limit"
)

// A write that uses a feature some member does not advertise is refused,
// naming the member and the feature; one every member supports passes.
func TestMissingFeature(t *testing.T) {
	first := map[string]string{"concurrency": "api.inflight", "calendar": "plan.month"}
	all := []string{"calendar", "concurrency"}
	for _, c := range []struct {
		name    string
		used    []string
		members map[string][]string
		want    string // "" passes
	}{
		{"no features used", nil, map[string][]string{"a": nil}, ""},
		{"all support it", []string{"concurrency"}, map[string][]string{"a": all, "b": all}, ""},
		{"older member", []string{"concurrency"}, map[string][]string{"a": all, "b": {"calendar"}},
			`rule "api.inflight" uses "concurrency", which member b does not support`},
		{"member advertising nothing", []string{"calendar", "concurrency"}, map[string][]string{"a": all, "c": nil},
			`rule "plan.month" uses "calendar", which member c does not support`},
	} {
		err := missingFeature(c.used, first, c.members)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		case c.want != "" && (!errors.Is(err, ErrUnsupported) || !errors.Is(err, limit.ErrConflict)):
			t.Errorf("%s: %v is not ErrUnsupported (a conflict)", c.name, err)
		}
	}
}
