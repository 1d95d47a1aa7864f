package headers

import (
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Style{
		"": Default, " ": Default, "ietf": "ietf", "X, IETF": "ietf,x", "draft": "draft", "x,draft,ietf": "ietf,draft,x",
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"ietf,ietf", "rfc", "ietf,", "x-ratelimit"} {
		if _, err := Parse(in); !errors.Is(err, ErrStyle) {
			t.Errorf("Parse(%q): want ErrStyle, got %v", in, err)
		}
	}
}

func TestFields(t *testing.T) {
	p := &Policy{Name: "orders", Limit: 10, Remaining: -3, Reset: 1500 * time.Millisecond, Window: time.Minute}
	for _, tc := range []struct {
		style  Style
		p      *Policy
		denied bool
		retry  time.Duration
		want   http.Header
	}{
		{"ietf", p, false, 0, http.Header{"Ratelimit-Policy": {`"orders";q=10;w=60`}, "Ratelimit": {`"orders";r=0;t=2`}}},
		{"draft", p, true, 200 * time.Millisecond, http.Header{"Retry-After": {"1"}, "Ratelimit-Limit": {"10"}, "Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"2"}}},
		{"x", p, true, 2100 * time.Millisecond, http.Header{"Retry-After": {"3"}, "X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"2"}}},
		{"", nil, true, 0, http.Header{"Retry-After": {"1"}}},
		{"", p, false, 0, http.Header{"Ratelimit-Policy": {`"orders";q=10;w=60`}, "Ratelimit": {`"orders";r=0;t=2`},
			"X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"2"}}},
	} {
		h := http.Header{}
		Set(h, tc.style, tc.p, tc.denied, tc.retry)
		if !reflect.DeepEqual(h, tc.want) {
			t.Errorf("style %q denied %v: got %v, want %v", tc.style, tc.denied, h, tc.want)
		}
	}
}

// Set writes what h.Set of every field of Fields writes, over headers
// already there, in every style, allowed and denied.
func TestSetAsHeaderSet(t *testing.T) {
	p := &Policy{Name: "orders.write", Limit: 20, Remaining: 3, Reset: 1500 * time.Millisecond, Window: time.Minute}
	for _, style := range []Style{"", IETF, Draft, X, "ietf,draft,x"} {
		for _, denied := range []bool{false, true} {
			for _, pol := range []*Policy{p, nil} {
				want := http.Header{"Ratelimit": {"stale"}, "X-Other": {"kept"}}
				for _, f := range Fields(style, pol, denied, 2*time.Second) {
					want.Set(f.Name, f.Value)
				}
				got := http.Header{"Ratelimit": {"stale"}, "X-Other": {"kept"}}
				Set(got, style, pol, denied, 2*time.Second)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("style %q denied %v policy %v:\n got %v\nwant %v", style, denied, pol != nil, got, want)
				}
				got.Add("Retry-After", "9") // a value slice of its own
				if len(got["Ratelimit"]) > 1 {
					t.Errorf("appending to one field changed another: %v", got)
				}
			}
		}
	}
}
