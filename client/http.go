package client

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/weirlimit/weir/limit/headers"
)

// maxForwardedLen caps the forwarding headers read; longer ones are
// ignored (the peer address is used).
const maxForwardedLen = 4096

// RequestFromHTTP builds a Request: route and method from the URL and
// method, API key, user and plan from the configured headers (an empty
// plan is "*"), and the client IP (see ClientIP).
func (c *Client) RequestFromHTTP(r *http.Request) Request {
	route := "/"
	if r.URL != nil && r.URL.Path != "" {
		route = r.URL.Path
	}
	return Request{
		Route:  route,
		Method: r.Method,
		Plan:   r.Header.Get(c.cfg.PlanHeader),
		APIKey: r.Header.Get(c.cfg.APIKeyHeader),
		User:   r.Header.Get(c.cfg.UserHeader),
		IP:     ClientIP(r, c.cfg.TrustedProxies),
		Header: r.Header,
	}
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

// MiddlewareOption changes how Middleware builds requests.
type MiddlewareOption func(*middleware)

type middleware struct {
	request func(*http.Request) Request
}

// WithRequestFunc replaces RequestFromHTTP (e.g. to take the API key from
// an auth layer's context).
func WithRequestFunc(f func(*http.Request) Request) MiddlewareOption {
	return func(m *middleware) { m.request = f }
}

// Middleware decides every request with Decide. It sets the rate-limit
// headers (SetHeaders) on every response to which a rule applied, answers
// 429 or 503 with Retry-After and a JSON body when denied, and otherwise
// calls next.
func (c *Client) Middleware(opts ...MiddlewareOption) func(http.Handler) http.Handler {
	m := &middleware{request: c.RequestFromHTTP}
	for _, o := range opts {
		o(m)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d := c.Decide(r.Context(), m.request(r))
			SetHeadersStyle(w.Header(), c.cfg.HeaderStyle, d)
			if d.Allowed {
				next.ServeHTTP(w, r)
				return
			}
			WriteDenied(w, d)
		})
	}
}

// SetHeaders writes the rate-limit fields of d's Policy to h in the
// default style (headers.Default): RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers), X-RateLimit-Limit/-Remaining/
// -Reset (seconds) and, when denied, Retry-After in whole seconds rounded
// up.
func SetHeaders(h http.Header, d Decision) { SetHeadersStyle(h, headers.Default, d) }

// SetHeadersStyle is SetHeaders in the given style (headers.Style).
func SetHeadersStyle(h http.Header, style headers.Style, d Decision) {
	var p *headers.Policy
	if d.Policy != nil {
		p = &headers.Policy{Name: d.Policy.Rule, Limit: d.Policy.Limit, Remaining: d.Policy.Remaining,
			Reset: d.Policy.Reset, Window: d.Policy.Window}
	}
	headers.Set(h, style, p, !d.Allowed, d.RetryAfter)
}

// WriteDenied answers a denied request: d.Status (429 or 503) with the
// JSON body {"error": ..., "retry_after_ms": N}. Headers must already be set.
func WriteDenied(w http.ResponseWriter, d Decision) {
	status, msg := d.Status, "rate limited"
	if errors.Is(d.Err, ErrNotReady) {
		msg = "rate limiter not ready: no rules yet"
	} else if status == http.StatusServiceUnavailable {
		msg = "rate limiter unavailable"
	}
	if status == 0 || status == http.StatusOK {
		status = http.StatusTooManyRequests
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error        string `json:"error"`
		RetryAfterMs int64  `json:"retry_after_ms"`
	}{msg, max(d.RetryAfter, 0).Milliseconds()})
}
