// Package forwardauth serves /v1/forward-auth on a node's HTTP port: the
// endpoint nginx (auth_request), Caddy (forward_auth) and Traefik
// (ForwardAuth) ask once per request whether it may go on.
//
// The proxy sends the original request's headers and says what the
// original request was in forwarding headers: the method in
// X-Original-Method or X-Forwarded-Method, the URI in X-Original-URI or
// X-Forwarded-Uri, the client in X-Real-IP or X-Forwarded-For (its last
// hop, the address the proxy saw). The request so rebuilt is matched
// exactly as the SDK middleware matches (reqmatch.RequestFrom and
// reqmatch.Match: same rules, same keys), and its checks go to the node's
// Backend, all or nothing, like the middleware's.
//
// The answer is 200, or 429 (over a limit) or 503 (a fail-closed rule the
// cluster could not decide) with Retry-After, with the rate-limit fields
// of the configured style on every answer for the proxy to copy. nginx's
// auth_request takes only 2xx, 401 and 403 from the subrequest, so
// ?deny_status=403 answers 403 instead of 429 and 503 (deploy/nginx/
// weir.conf turns it back into a 429 with the fields).
//
// Trust: the caller is the proxy; the endpoint believes its forwarding
// headers, so it must be reachable by the proxies only (as the rest of the
// node's HTTP port). A rule that could not be decided follows its fail
// mode: open passes (the SDK's local share bucket does not exist here),
// closed denies with 503.
//
// Goroutines: none of its own; the handler runs on the HTTP server's. The
// compiled matcher is one internal/rulecache value, rebuilt when the rule
// set changes.
package forwardauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/weirlimit/weir/client/reqmatch"
	"github.com/weirlimit/weir/internal/httpjson"
	"github.com/weirlimit/weir/internal/rulecache"
	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/limit/headers"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// Path is where the endpoint is served.
const Path = "/v1/forward-auth"

// maxURI caps the original URI read from the forwarding headers.
const maxURI = 8192

// Backend is what the endpoint needs of the node.
type Backend interface {
	Check(ctx context.Context, items []limit.Item, out []limit.Result) error
	Rules() *rules.Set
}

// Config configures a Handler.
type Config struct {
	// HeaderStyle picks the rate-limit fields (empty: headers.Default).
	HeaderStyle headers.Style
	// Headers name the API key, user and plan headers, as the SDK's
	// Config does (empty fields: the SDK's defaults).
	Headers reqmatch.HeaderNames
}

// Handler serves Path.
type Handler struct {
	cfg     Config
	b       Backend
	matcher *rulecache.Cache[*rules.Matcher]
}

// New returns a Handler over b.
func New(cfg Config, b Backend) (*Handler, error) {
	if b == nil {
		return nil, errors.New("forwardauth: nil Backend")
	}
	st, err := headers.Parse(string(cfg.HeaderStyle))
	if err != nil {
		return nil, fmt.Errorf("forwardauth: %w", err)
	}
	cfg.HeaderStyle = st
	def := reqmatch.DefaultHeaderNames()
	if cfg.Headers.APIKey == "" {
		cfg.Headers.APIKey = def.APIKey
	}
	if cfg.Headers.User == "" {
		cfg.Headers.User = def.User
	}
	if cfg.Headers.Plan == "" {
		cfg.Headers.Plan = def.Plan
	}
	return &Handler{cfg: cfg, b: b, matcher: rulecache.New(compile)}, nil
}

func (h *Handler) rules() *rules.Matcher { return h.matcher.Get(h.b.Rules()) }

// compile builds the request matcher for set, once per version.
func compile(set *rules.Set) *rules.Matcher {
	var rs []rules.Rule
	if set != nil {
		rs = set.Rules
	}
	m, err := rules.Compile(rs)
	if err != nil { // the FSM holds valid sets only
		m, _ = rules.Compile(nil)
	}
	return m
}

// Original rebuilds the request the proxy is asking about from its
// forwarding headers (see the package doc). It fails on a URI that is not
// a path.
func Original(r *http.Request) (*http.Request, error) {
	method := first(r.Header, "X-Original-Method", "X-Forwarded-Method")
	if method == "" {
		method = r.Method
	}
	uri := first(r.Header, "X-Original-URI", "X-Forwarded-Uri")
	if uri == "" {
		uri = "/"
	}
	if len(uri) > maxURI {
		return nil, fmt.Errorf("original URI is %d bytes long; at most %d", len(uri), maxURI)
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, fmt.Errorf("original URI %q is not a request URI: %v", uri, err)
	}
	out := &http.Request{Method: method, URL: u, Header: r.Header, RemoteAddr: r.RemoteAddr, Host: r.Host}
	if ip := strings.TrimSpace(r.Header.Get("X-Real-IP")); ip != "" {
		out.RemoteAddr = ip
	} else if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		last := xff[len(xff)-1]
		if i := strings.LastIndexByte(last, ','); i >= 0 {
			last = last[i+1:]
		}
		if s := strings.TrimSpace(last); s != "" {
			out.RemoteAddr = s
		}
	}
	return out, nil
}

func first(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}

// ServeHTTP answers one forward-auth request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	deny := http.StatusTooManyRequests
	switch s := r.URL.Query().Get("deny_status"); s {
	case "", "429":
	case "403":
		deny = http.StatusForbidden
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("deny_status %q: want 429 (the default) or 403 (for nginx auth_request)", s))
		return
	}
	orig, err := Original(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	req := reqmatch.RequestFrom(orig, h.cfg.Headers, nil)
	var buf [8]reqmatch.Check
	checks := reqmatch.Match(h.rules(), req, buf[:0])
	if len(checks) == 0 {
		w.WriteHeader(http.StatusOK)
		return
	}
	for _, c := range checks {
		if c.Rule.HoldsPermits() { // nothing would give the permit back
			httpjson.WriteError(w, http.StatusInternalServerError, "concurrency_rule", rules.NoReleaseOn("forward-auth", c.Rule.ID))
			return
		}
	}
	cost, err := reqmatch.Cost(checks, &req) // a rule's cost, or its cost_header
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	items := make([]limit.Item, len(checks))
	for i, c := range checks {
		items[i] = limit.Item{Key: c.Key, Rule: c.Rule.ID, Cost: cost, Group: 1}
		if len(c.Rule.Reserve) > 0 {
			items[i].Priority = c.Rule.Class(req.Header.Get)
		}
	}
	res := make([]limit.Result, len(items))
	if err := limit.DecideValid(items, res, func(items []limit.Item, out []limit.Result) error {
		return h.b.Check(tracing.FromHeader(r.Context(), r.Header), items, out)
	}); err != nil {
		for i := range res { // the cluster did not answer: every rule's fail mode
			res[i] = limit.Result{Code: limit.CodeUnavailable, Err: err.Error()}
		}
	}
	d := decide(checks, res)
	headers.Set(w.Header(), h.cfg.HeaderStyle, d.policy, !d.allowed, d.retryAfter)
	switch {
	case d.allowed:
		w.WriteHeader(http.StatusOK)
	case deny == http.StatusForbidden:
		w.WriteHeader(http.StatusForbidden)
	default:
		w.WriteHeader(d.status)
	}
}

// decision is a request's outcome.
type decision struct {
	allowed    bool
	status     int // 429 or 503 when denied
	retryAfter time.Duration
	policy     *headers.Policy
}

// decide combines the rules' results as the SDK does: denied when a
// non-shadow rule is; a rule the cluster could not decide follows its fail
// mode. The policy is the denying limit with the longest wait, else the
// one with the fewest remaining.
func decide(checks []reqmatch.Check, res []limit.Result) decision {
	d := decision{allowed: true, status: http.StatusOK}
	limited, closed, shed := false, false, false
	var pol *headers.Policy
	var polWait time.Duration
	polDenied := false
	for i, c := range checks {
		x := &res[i]
		if c.Rule.Shadow {
			continue
		}
		denied := false
		wait := x.RetryAfter
		switch {
		case x.Code != limit.CodeNone:
			if c.Rule.FailMode == rules.FailClosed {
				denied, closed = true, true
				wait = time.Second
			}
		case !x.Allowed && x.Shed:
			denied, shed = true, true
		case !x.Allowed && !x.Voided:
			denied, limited = true, true
		}
		if wait < 0 || (denied && wait == 0) {
			wait = max(c.Rule.Period.D(), time.Second)
		}
		p := &headers.Policy{Name: c.Rule.ID, Limit: x.Limit, Remaining: x.Remaining, Reset: x.Reset, Window: x.Window}
		if p.Window == 0 {
			p.Window = c.Rule.Period.D()
		}
		switch {
		case pol == nil,
			denied && (!polDenied || wait > polWait),
			!denied && !polDenied && p.Remaining < pol.Remaining:
			pol, polWait, polDenied = p, wait, denied
		}
		if denied {
			d.allowed = false
			d.retryAfter = max(d.retryAfter, wait)
		}
	}
	d.policy = pol
	if !d.allowed {
		d.status = http.StatusTooManyRequests
		if (closed || shed) && !limited {
			d.status = http.StatusServiceUnavailable
		}
	}
	return d
}

func writeError(w http.ResponseWriter, status int, msg string) {
	httpjson.WriteError(w, status, "invalid_argument", msg)
}
