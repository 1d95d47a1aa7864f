// Package reqmatch is how a request is matched to rules and keys, shared
// by the SDK middleware (package client) and the nodes' forward-auth
// endpoint, so both limit the same request the same way: the Request read
// from an HTTP request (headers, client IP through trusted proxies), the
// rules that apply to it and the limited key each rule's key type picks.
//
// It is pure: no I/O, no clock, no state.
package reqmatch

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// MaxKeyLen is the longest limited key sent to the cluster (the nodes'
// limit, limit.MaxKeyLen); a longer one has its value replaced by a hash.
const MaxKeyLen = limit.MaxKeyLen

// maxForwardedLen caps the forwarding headers read; longer ones are
// ignored (the peer address is used).
const maxForwardedLen = 4096

// Request is what a decision is made from.
type Request struct {
	Route, Method, Plan string
	APIKey, User, IP    string
	Header              http.Header // read for header:<Name> rules
}

// DefaultHeaderNames are the SDK's default headers (client.DefaultConfig).
func DefaultHeaderNames() HeaderNames {
	return HeaderNames{APIKey: "X-API-Key", User: "X-User-ID", Plan: "X-Plan"}
}

// HeaderNames are the request headers a Request's API key, user and plan
// are read from (Config.APIKeyHeader, UserHeader, PlanHeader).
type HeaderNames struct{ APIKey, User, Plan string }

// RequestFrom builds a Request as the middleware does (RequestFromHTTP):
// route and method from the URL and method, API key, user and plan from
// the named headers, and the client IP (ClientIP with trusted).
func RequestFrom(r *http.Request, h HeaderNames, trusted []netip.Prefix) Request {
	route := "/"
	if r.URL != nil && r.URL.Path != "" {
		route = r.URL.Path
	}
	return Request{
		Route:  route,
		Method: r.Method,
		Plan:   r.Header.Get(h.Plan),
		APIKey: r.Header.Get(h.APIKey),
		User:   r.Header.Get(h.User),
		IP:     ClientIP(r, trusted),
		Header: r.Header,
	}
}

// Check is one rule a request is checked against, at its limited key.
type Check struct {
	Rule *rules.Rule
	Key  string
}

// Cost is the tokens r takes under the checks Match returned
// (rules.RequestCost: the largest of the rules' costs, a rule's
// cost_header read from r's headers); rules.ErrBadCost for a header
// value that is not a valid cost.
func Cost(checks []Check, r *Request) (int64, error) {
	var buf [8]*rules.Rule
	rs := buf[:0]
	for _, c := range checks {
		rs = append(rs, c.Rule)
	}
	return rules.RequestCost(rs, func(name string) string {
		if r.Header == nil {
			return ""
		}
		return r.Header.Get(name)
	})
}

// Match appends to dst the checks the middleware makes for r under m:
// every rule that applies (rules.Matcher.Match; an empty plan is "*"),
// each at the key its key type picks from r. It is Decide's matching,
// for edges that decide elsewhere (the nodes' forward-auth endpoint).
func Match(m *rules.Matcher, r Request, dst []Check) []Check {
	if r.Plan == "" {
		r.Plan = rules.AnyPlan
	}
	var buf [8]*rules.Rule
	for _, rule := range m.Match(r.Route, r.Method, r.Plan, buf[:0]) {
		dst = append(dst, Check{Rule: rule, Key: KeyFor(rule, &r)})
	}
	return dst
}

// ClientIP returns the address of the caller. The peer address
// (RemoteAddr) is the answer unless it is a trusted proxy; then the
// X-Forwarded-For (else Forwarded) chain is walked from the right, skipping
// trusted hops, and the first untrusted hop is the caller (the leftmost one
// if all are trusted). A malformed, obfuscated or oversized chain is not
// believed: the peer address is used. It returns "" when RemoteAddr is not
// an address either.
func ClientIP(r *http.Request, trusted []netip.Prefix) string {
	peer, ok := parseHostIP(r.RemoteAddr)
	if !ok {
		return ""
	}
	if !isTrusted(peer, trusted) {
		return peer.String()
	}
	hops, ok := forwardedHops(r.Header)
	if !ok || len(hops) == 0 {
		return peer.String()
	}
	for i := len(hops) - 1; i >= 0; i-- {
		if !isTrusted(hops[i], trusted) {
			return hops[i].String()
		}
	}
	return hops[0].String()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHostIP reads "ip", "ip:port", "[v6]" or "[v6]:port".
func parseHostIP(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// forwardedHops lists the hops of X-Forwarded-For, else Forwarded "for=",
// left to right. ok is false when a hop is not an IP address or the
// headers are too long.
func forwardedHops(h http.Header) (hops []netip.Addr, ok bool) {
	xff := h.Values("X-Forwarded-For")
	if len(xff) > 0 {
		if totalLen(xff) > maxForwardedLen {
			return nil, false
		}
		for _, v := range xff {
			for _, part := range strings.Split(v, ",") {
				a, ok := parseHostIP(part)
				if !ok {
					return nil, false
				}
				hops = append(hops, a)
			}
		}
		return hops, true
	}
	fwd := h.Values("Forwarded")
	if totalLen(fwd) > maxForwardedLen {
		return nil, false
	}
	for _, v := range fwd {
		for _, elem := range strings.Split(v, ",") {
			for _, pair := range strings.Split(elem, ";") {
				k, val, found := strings.Cut(strings.TrimSpace(pair), "=")
				if !found || !strings.EqualFold(k, "for") {
					continue
				}
				a, ok := parseHostIP(strings.Trim(val, `"`))
				if !ok {
					return nil, false
				}
				hops = append(hops, a)
			}
		}
	}
	return hops, true
}

func totalLen(vs []string) int {
	n := 0
	for _, v := range vs {
		n += len(v)
	}
	return n
}

// KeyFor builds the limited key for a rule's key type. A request without the
// value is limited by its IP ("ip:unknown" without one either); a header
// key without the header uses "-".
func KeyFor(r *rules.Rule, req *Request) string {
	switch r.Key {
	case rules.KeyGlobal:
		return "global:global"
	case rules.KeyAPIKey:
		if req.APIKey != "" {
			return LimitKey("apikey:", req.APIKey)
		}
	case rules.KeyUser:
		if req.User != "" {
			return LimitKey("user:", req.User)
		}
	case rules.KeyIP:
	default:
		if name, ok := strings.CutPrefix(r.Key, rules.KeyHeaderPrefix); ok {
			v := ""
			if req.Header != nil {
				v = req.Header.Get(name)
			}
			if v == "" {
				v = "-"
			}
			return LimitKey(rules.KeyHeaderPrefix+name+":", v)
		}
	}
	if req.IP == "" {
		return "ip:unknown"
	}
	return LimitKey("ip:", req.IP)
}

// LimitKey joins prefix and value, replacing a value that would make the
// key longer than MaxKeyLen, or that is not UTF-8 (a proto string must
// be), by "~" and its xxhash64 in hex.
func LimitKey(prefix, v string) string {
	if len(prefix)+len(v) <= MaxKeyLen && utf8.ValidString(v) {
		return prefix + v
	}
	return prefix + "~" + strconv.FormatUint(xxhash.Sum64String(v), 16)
}
