package client

import (
	"encoding/json"
	"errors"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/limit/headers"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// RequestFromHTTP builds a Request: route and method from the URL and
// method, API key, user and plan from the configured headers (an empty
// plan is "*"), and the client IP (see ClientIP).
func (c *Client) RequestFromHTTP(r *http.Request) Request {
	return RequestFrom(r, HeaderNames{APIKey: c.cfg.APIKeyHeader, User: c.cfg.UserHeader, Plan: c.cfg.PlanHeader}, c.cfg.TrustedProxies)
}

// MiddlewareOption changes how Middleware builds requests.
type MiddlewareOption func(*middleware)

type middleware struct {
	request func(*http.Request) Request
	custom  bool // request is a WithRequestFunc's
}

// WithRequestFunc replaces RequestFromHTTP (e.g. to take the API key from
// an auth layer's context).
func WithRequestFunc(f func(*http.Request) Request) MiddlewareOption {
	return func(m *middleware) { m.request, m.custom = f, true }
}

// Middleware decides every request with Decide. Permits of concurrency
// rules are released when next returns (the answer ended) or the client
// goes away, whichever is first. It sets the rate-limit
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
			if !m.custom && c.noRuleFor(r) { // what Decide would allow, without building the Request
				next.ServeHTTP(w, r)
				return
			}
			ctx := r.Context()
			if c.tracer != nil && !trace.SpanContextFromContext(ctx).IsValid() {
				ctx = tracing.FromHeader(ctx, r.Header)
			}
			d := c.Decide(ctx, m.request(r))
			if d.HoldsPermits() { // concurrency rules: give the permits back when the request ends
				defer c.releaseAfter(r, d)()
			}
			SetHeadersStyle(w.Header(), c.cfg.HeaderStyle, d)
			if d.Allowed {
				next.ServeHTTP(w, r)
				return
			}
			WriteDenied(w, d)
		})
	}
}

// noRuleFor reports whether the client holds a rule set and no rule of it
// matches r's route, method and plan as RequestFromHTTP reads them: Decide
// would then allow r with no limits and set no header. It reads one
// header and no client address, so a request to a route no rule covers
// costs the middleware a route walk.
func (c *Client) noRuleFor(r *http.Request) bool {
	rs := c.rules.Load()
	if rs == nil {
		return false
	}
	route := "/"
	if r.URL != nil && r.URL.Path != "" {
		route = r.URL.Path
	}
	plan := r.Header.Get(c.cfg.PlanHeader)
	if plan == "" {
		plan = rules.AnyPlan
	}
	var buf [8]*rules.Rule
	return len(rs.m.Match(route, r.Method, plan, buf[:0])) == 0
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
	headers.Set(h, style, p, !d.Allowed && d.Status != http.StatusBadRequest, d.RetryAfter)
}

// WriteDenied answers a denied request: d.Status (429 or 503) with the
// JSON body {"error": ..., "retry_after_ms": N}, and "reason": "shed" for
// a request shed to keep a reserve (503). Headers must already be set.
func WriteDenied(w http.ResponseWriter, d Decision) {
	status, msg, reason := d.Status, "rate limited", ""
	if errors.Is(d.Err, ErrShed) {
		msg, reason = "shed: capacity kept for higher-priority requests; retry later", "shed"
	} else if errors.Is(d.Err, ErrNotReady) {
		msg = "rate limiter not ready: no rules yet"
	} else if errors.Is(d.Err, ErrInvalidCheck) {
		msg = d.Err.Error()
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
		Reason       string `json:"reason,omitempty"`
		RetryAfterMs int64  `json:"retry_after_ms"`
	}{msg, reason, max(d.RetryAfter, 0).Milliseconds()})
}
