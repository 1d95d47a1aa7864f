package client

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// TestMiddlewareBadInputPeers sends odd requests through the middleware
// from trusted and untrusted peers: each is decided under the expected
// key, and none makes an RPC fail (one bad key must not fail a coalesced
// batch or count against the breaker).
func TestMiddlewareBadInputPeers(t *testing.T) {
	_, cl := startWith(t, func(cfg *Config) {
		cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}
	})
	var got Request
	h := cl.Middleware(WithRequestFunc(func(r *http.Request) Request {
		got = cl.RequestFromHTTP(r)
		return got
	}))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	rule, _ := cl.rules.Load().m.Rule("exact")
	s0 := cl.Stats()
	for _, tc := range []struct {
		name, remote string
		hdr          [][2]string
		wantIP       string // "" when the key is the API key
		wantKey      string // a prefix of the limited key
	}{
		{"untrusted peer, spoofed XFF", "203.0.113.1:1", [][2]string{{"X-Forwarded-For", "1.1.1.1"}}, "203.0.113.1", "ip:203.0.113.1"},
		{"untrusted peer, spoofed Forwarded", "203.0.113.2:1", [][2]string{{"Forwarded", "for=1.1.1.2"}}, "203.0.113.2", "ip:203.0.113.2"},
		{"untrusted peer, garbage XFF", "203.0.113.3:1", [][2]string{{"X-Forwarded-For", "\x01\xff,,"}}, "203.0.113.3", "ip:203.0.113.3"},
		{"trusted peer, good XFF", "127.0.0.2:1", [][2]string{{"X-Forwarded-For", "198.51.100.1"}}, "198.51.100.1", "ip:198.51.100.1"},
		{"trusted peer, two XFF lines", "127.0.0.3:1", [][2]string{{"X-Forwarded-For", "198.51.100.2"}, {"X-Forwarded-For", "198.51.100.3, 10.1.1.1"}}, "198.51.100.3", "ip:198.51.100.3"},
		{"trusted peer, malformed XFF", "127.0.0.4:1", [][2]string{{"X-Forwarded-For", "not-an-ip, ,,"}}, "127.0.0.4", "ip:127.0.0.4"},
		{"trusted peer, empty XFF", "127.0.0.5:1", [][2]string{{"X-Forwarded-For", ""}}, "127.0.0.5", "ip:127.0.0.5"},
		{"trusted peer, oversized XFF", "127.0.0.6:1", [][2]string{{"X-Forwarded-For", strings.Repeat("198.51.100.9,", 1000)}}, "127.0.0.6", "ip:127.0.0.6"},
		{"trusted peer, obfuscated Forwarded", "127.0.0.7:1", [][2]string{{"Forwarded", `for="_hidden";proto=http, for=`}}, "127.0.0.7", "ip:127.0.0.7"},
		{"trusted peer, Forwarded v6 with port", "127.0.0.8:1", [][2]string{{"Forwarded", `for="[2001:db8::8]:4711"`}}, "2001:db8::8", "ip:2001:db8::8"},
		{"trusted peer, Forwarded v6 with zone", "127.0.0.9:1", [][2]string{{"Forwarded", `for="[fe80::9%eth0]"`}}, "fe80::9", "ip:fe80::9"},
		{"peer not an address", "pipe", [][2]string{{"X-Forwarded-For", "198.51.100.10"}}, "", "ip:unknown"},
		{"API key of 1 MB", "203.0.113.11:1", [][2]string{{"X-API-Key", strings.Repeat("k", 1<<20)}}, "203.0.113.11", "apikey:~"},
		{"API key not UTF-8", "203.0.113.12:1", [][2]string{{"X-API-Key", "ak_\xff\xfe"}}, "203.0.113.12", "apikey:~"},
		{"plan of 5 KB", "203.0.113.13:1", [][2]string{{"X-Plan", strings.Repeat("p", 5000)}}, "203.0.113.13", "ip:203.0.113.13"},
	} {
		r := httptest.NewRequest("GET", "/exact", nil)
		r.RemoteAddr = tc.remote
		for _, kv := range tc.hdr {
			r.Header.Add(kv[0], kv[1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if got.IP != tc.wantIP {
			t.Errorf("%s: client IP %q, want %q", tc.name, got.IP, tc.wantIP)
		}
		key := keyFor(rule, &got)
		if !strings.HasPrefix(key, tc.wantKey) || len(key) > MaxKeyLen {
			t.Errorf("%s: limited key %.60q, want prefix %q", tc.name, key, tc.wantKey)
		}
		// Each case has its own key: the first of 3 leaves 2.
		if rec.Code != http.StatusOK || rec.Header().Get("X-RateLimit-Limit") != "3" || rec.Header().Get("X-RateLimit-Remaining") != "2" {
			t.Errorf("%s: %d %v", tc.name, rec.Code, rec.Header())
		}
	}
	if s := cl.Stats(); s.RPCErrors != s0.RPCErrors || s.Fallbacks != s0.Fallbacks {
		t.Errorf("bad input made %d RPCs fail and %d decisions fall back", s.RPCErrors-s0.RPCErrors, s.Fallbacks-s0.Fallbacks)
	}

	// A header block over the server's limit never reaches the middleware:
	// net/http answers 431 itself.
	reached := false
	srv := httptest.NewServer(cl.Middleware()(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true })))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/exact", nil)
	req.Header.Set("X-API-Key", strings.Repeat("k", 2<<20))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || reached {
		t.Errorf("2 MB header: status %d, handler reached %v; want 431 from net/http", resp.StatusCode, reached)
	}
}
