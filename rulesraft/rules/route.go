package rules

import (
	"fmt"
	"path"
	"strings"
)

// pattern is a parsed route pattern: static and {param} segments, and
// whether it ends in "*".
type pattern struct {
	segs     []patSeg
	wildcard bool
}

type patSeg struct {
	static string // the literal segment; empty for a param
	param  bool
}

// canonical returns the pattern with parameter names erased ("/v1/{}/x/*"),
// so "/v1/{id}" and "/v1/{name}" count as the same route for plan
// replacement.
func (p pattern) canonical() string {
	var b strings.Builder
	for _, s := range p.segs {
		b.WriteByte('/')
		if s.param {
			b.WriteString("{}")
		} else {
			b.WriteString(s.static)
		}
	}
	if p.wildcard {
		b.WriteString("/*")
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

// parseRoute parses a route pattern. A trailing slash is ignored
// ("/v1/orders/" is "/v1/orders"), because requests are matched with empty
// segments skipped.
func parseRoute(s string) (pattern, error) {
	var p pattern
	if s == "" {
		return p, fmt.Errorf("must not be empty")
	}
	if s[0] != '/' {
		return p, fmt.Errorf("%q must start with \"/\"", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == 0x7f || c == '?' || c == '#' {
			return p, fmt.Errorf("%q may not hold spaces, control characters, '?' or '#' (a route is a path only)", s)
		}
	}
	rest := strings.TrimSuffix(s[1:], "/")
	if rest == "" {
		return p, nil // "/" : the root only
	}
	params := map[string]bool{}
	for n := 0; rest != ""; n++ {
		seg := rest
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			seg, rest = rest[:i], rest[i+1:]
			if rest == "" { // "a//": trailing slash already trimmed, so this is "//"
				return p, fmt.Errorf("%q has an empty segment", s)
			}
		} else {
			rest = ""
		}
		switch {
		case seg == "":
			return p, fmt.Errorf("%q has an empty segment", s)
		case seg == "*":
			if rest != "" {
				return p, fmt.Errorf("%q: \"*\" may only be the last segment", s)
			}
			p.wildcard = true
		case strings.Contains(seg, "*"):
			return p, fmt.Errorf("%q: \"*\" must be a whole segment (as in /v1/*)", s)
		case seg[0] == '{':
			name := seg[1:]
			if !strings.HasSuffix(name, "}") {
				return p, fmt.Errorf("%q: segment %q must be a whole {param}", s, seg)
			}
			name = name[:len(name)-1]
			if !validParamName(name) {
				return p, fmt.Errorf("%q: parameter name %q must be letters, digits or _ and not start with a digit", s, name)
			}
			if params[name] {
				return p, fmt.Errorf("%q: parameter {%s} appears twice", s, name)
			}
			params[name] = true
			p.segs = append(p.segs, patSeg{param: true})
		case strings.ContainsAny(seg, "{}"):
			return p, fmt.Errorf("%q: segment %q must be a whole {param}", s, seg)
		case seg == "." || seg == "..":
			return p, fmt.Errorf("%q may not hold \".\" or \"..\" segments", s)
		default:
			p.segs = append(p.segs, patSeg{static: seg})
		}
	}
	return p, nil
}

func validParamName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// cleanRequestRoute drops a query string and resolves "." and ".."
// segments. It allocates only when the route holds a dot segment that
// path.Clean has to rewrite.
func cleanRequestRoute(route string) string {
	if i := strings.IndexAny(route, "?#"); i >= 0 {
		route = route[:i]
	}
	if strings.Contains(route, "/.") {
		route = path.Clean(route)
	}
	return route
}

// nextSegment returns the next non-empty segment of route and what follows
// it; ok is false when no segment is left. Empty segments ("//", a
// trailing "/") are skipped, so "/v1//orders/" walks like "/v1/orders".
func nextSegment(route string) (seg, rest string, ok bool) {
	for len(route) > 0 && route[0] == '/' {
		route = route[1:]
	}
	if route == "" {
		return "", "", false
	}
	if i := strings.IndexByte(route, '/'); i >= 0 {
		return route[:i], route[i:], true
	}
	return route, "", true
}
