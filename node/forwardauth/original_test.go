package forwardauth

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/client/reqmatch"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/rulesraft/rules"
)

func TestOriginal(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		h                    http.Header
		method, path, remote string
		bad                  bool
	}{
		{"nginx", http.Header{"X-Original-Uri": {"/v1/a?x=1"}, "X-Original-Method": {"POST"}, "X-Real-Ip": {"203.0.113.1"}}, "POST", "/v1/a", "203.0.113.1", false},
		{"traefik", http.Header{"X-Forwarded-Uri": {"/v1/b"}, "X-Forwarded-Method": {"PUT"}, "X-Forwarded-For": {"10.0.0.1, 203.0.113.2"}}, "PUT", "/v1/b", "203.0.113.2", false},
		{"several X-Forwarded-For fields", http.Header{"X-Forwarded-For": {"10.0.0.1", "203.0.113.3"}}, "GET", "/", "203.0.113.3", false},
		{"nothing forwarded", http.Header{}, "GET", "/", "192.0.2.9:5555", false},
		{"X-Original wins", http.Header{"X-Original-Uri": {"/o"}, "X-Forwarded-Uri": {"/f"}}, "GET", "/o", "192.0.2.9:5555", false},
		{"not a path", http.Header{"X-Original-Uri": {"nope"}}, "", "", "", true},
		{"too long", http.Header{"X-Original-Uri": {"/" + strings.Repeat("a", maxURI)}}, "", "", "", true},
	} {
		r := &http.Request{Method: http.MethodGet, Header: tc.h, RemoteAddr: "192.0.2.9:5555"}
		o, err := Original(r)
		if tc.bad {
			if err == nil {
				t.Errorf("%s: want an error", tc.name)
			}
			continue
		}
		if err != nil || o.Method != tc.method || o.URL.Path != tc.path || o.RemoteAddr != tc.remote {
			t.Errorf("%s: %v %s %s %s", tc.name, err, o.Method, o.URL, o.RemoteAddr)
		}
	}
}

func TestDecide(t *testing.T) {
	r := func(id string, shadow bool, fail string) reqmatch.Check {
		return reqmatch.Check{Rule: &rules.Rule{ID: id, Shadow: shadow, FailMode: fail, Period: rules.Duration(time.Minute)}, Key: "k"}
	}
	checks := []reqmatch.Check{r("a", false, "open"), r("b", false, "open"), r("s", true, "open"), r("c", false, "closed")}
	for _, tc := range []struct {
		name   string
		res    []limit.Result
		status int
		policy string
		retry  time.Duration
	}{
		{"all allowed: fewest remaining", []limit.Result{{Allowed: true, Remaining: 5}, {Allowed: true, Remaining: 2}, {Allowed: false}, {Allowed: true, Remaining: 9}},
			http.StatusOK, "b", 0},
		{"denied: longest wait", []limit.Result{{Remaining: 0, RetryAfter: 3 * time.Second}, {Remaining: 0, RetryAfter: 7 * time.Second}, {Allowed: true}, {Allowed: true, Voided: true}},
			http.StatusTooManyRequests, "b", 7 * time.Second},
		{"never: one window", []limit.Result{{RetryAfter: limit.Never}, {Allowed: true}, {Allowed: true}, {Allowed: true}},
			http.StatusTooManyRequests, "a", time.Minute},
		{"undecided: open passes, closed 503", []limit.Result{{Code: limit.CodeUnavailable}, {Allowed: true, Remaining: 1}, {Allowed: true}, {Code: limit.CodeUnavailable}},
			http.StatusServiceUnavailable, "c", time.Second},
	} {
		d := decide(checks, tc.res)
		if d.status != tc.status || d.policy == nil || d.policy.Name != tc.policy || d.retryAfter != tc.retry || d.allowed != (tc.status == http.StatusOK) {
			t.Errorf("%s: %+v policy %+v", tc.name, d, d.policy)
		}
	}
}
