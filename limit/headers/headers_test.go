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
