// Package headers writes the rate-limit fields of an HTTP response in the
// styles clients expect. It is the one writer the SDK middleware, `weir
// gateway`, the forward-auth endpoint and the Envoy rate limit service
// share, so one setting (a Style) picks the fields everywhere.
//
// It is pure: no I/O, no clock; durations are given.
package headers

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"
)

// Style is a set of header families, written as a comma-separated list of
// IETF, Draft and X: "ietf", "draft", "x", "ietf,x". The empty Style is
// Default.
type Style string

// Header families.
const (
	// IETF: RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-
	// headers, structured fields naming the policy).
	IETF = "ietf"
	// Draft: RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
	// (seconds), the older draft most clients and envoyproxy/ratelimit use.
	Draft = "draft"
	// X: X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset
	// (seconds).
	X = "x"
)

// Default is what Weir wrote before styles were configurable: the IETF
// fields and X-RateLimit-*.
const Default Style = IETF + "," + X

// ErrStyle is returned by Parse for an unknown family.
var ErrStyle = errors.New("headers: unknown header style")

// Parse checks s: a comma-separated list of ietf, draft and x (any case,
// spaces allowed, each at most once), or "" for Default. It returns the
// style in its canonical form.
func Parse(s string) (Style, error) {
	if strings.TrimSpace(s) == "" {
		return Default, nil
	}
	var have [3]bool
	for _, part := range strings.Split(s, ",") {
		p := strings.ToLower(strings.TrimSpace(part))
		var i int
		switch {
		case p == IETF:
			i = 0
		case p == Draft:
			i = 1
		case p == X:
			i = 2
		default:
			return "", fmt.Errorf("%w %q (want a comma-separated list of ietf, draft, x)", ErrStyle, part)
		}
		if have[i] {
			return "", fmt.Errorf("%w: %q named twice", ErrStyle, p)
		}
		have[i] = true
	}
	var out []string
	for i, name := range []string{IETF, Draft, X} {
		if have[i] {
			out = append(out, name)
		}
	}
	return Style(strings.Join(out, ",")), nil
}

func (s Style) has(f string) bool {
	if s == "" {
		s = Default
	}
	for rest, found := string(s), true; found; {
		var p string
		p, rest, found = strings.Cut(rest, ",")
		if p == f {
			return true
		}
	}
	return false
}

// Policy is the limit a response reports.
type Policy struct {
	Name      string        // the rule
	Limit     int64         // the bucket's capacity
	Remaining int64         // whole tokens left (negative is 0)
	Reset     time.Duration // until the bucket is full / the window ends
	Window    time.Duration // the rule's period
}

// Field is one header to write.
type Field struct{ Name, Value string }

// Fields returns the fields of style for p (none when p is nil) and, when
// denied, Retry-After in whole seconds rounded up (at least 1: a 429 or 503
// always says when to come back).
func Fields(style Style, p *Policy, denied bool, retryAfter time.Duration) []Field {
	return appendFields(nil, style, p, denied, retryAfter)
}

func appendFields(out []Field, style Style, p *Policy, denied bool, retryAfter time.Duration) []Field {
	if denied {
		out = append(out, Field{"Retry-After", strconv.FormatInt(max(ceilSeconds(retryAfter), 1), 10)})
	}
	if p == nil {
		return out
	}
	limit := strconv.FormatInt(p.Limit, 10)
	remaining := strconv.FormatInt(max(p.Remaining, 0), 10)
	reset := strconv.FormatInt(ceilSeconds(p.Reset), 10)
	if style.has(IETF) {
		name := strconv.Quote(p.Name)
		out = append(out,
			Field{"RateLimit-Policy", name + ";q=" + limit + ";w=" + strconv.FormatInt(ceilSeconds(p.Window), 10)},
			Field{"RateLimit", name + ";r=" + remaining + ";t=" + reset})
	}
	if style.has(Draft) {
		out = append(out, Field{"RateLimit-Limit", limit}, Field{"RateLimit-Remaining", remaining}, Field{"RateLimit-Reset", reset})
	}
	if style.has(X) {
		out = append(out, Field{"X-RateLimit-Limit", limit}, Field{"X-RateLimit-Remaining", remaining}, Field{"X-RateLimit-Reset", reset})
	}
	return out
}

// Set writes the fields Fields returns to h, replacing any of the same
// name, as h.Set would: the names in canonical form, the values in one
// allocation.
func Set(h http.Header, style Style, p *Policy, denied bool, retryAfter time.Duration) {
	var buf [9]Field
	fs := appendFields(buf[:0], style, p, denied, retryAfter)
	if len(fs) == 0 {
		return
	}
	vals := make([]string, len(fs))
	for i, f := range fs {
		vals[i] = f.Value
		h[canonicalName(f.Name)] = vals[i : i+1 : i+1]
	}
}

// canonicalName is textproto.CanonicalMIMEHeaderKey(name), without its
// allocation for the names Fields writes.
func canonicalName(name string) string {
	switch name {
	case "Retry-After":
		return "Retry-After"
	case "RateLimit-Policy":
		return "Ratelimit-Policy"
	case "RateLimit":
		return "Ratelimit"
	case "RateLimit-Limit":
		return "Ratelimit-Limit"
	case "RateLimit-Remaining":
		return "Ratelimit-Remaining"
	case "RateLimit-Reset":
		return "Ratelimit-Reset"
	case "X-RateLimit-Limit":
		return "X-Ratelimit-Limit"
	case "X-RateLimit-Remaining":
		return "X-Ratelimit-Remaining"
	case "X-RateLimit-Reset":
		return "X-Ratelimit-Reset"
	}
	return textproto.CanonicalMIMEHeaderKey(name)
}

// ceilSeconds rounds d up to whole seconds; negative is 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
