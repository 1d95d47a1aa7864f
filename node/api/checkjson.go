package api

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/weirlimit/weir/limit"
)

// The check path's JSON without reflection. POST /v1/limits/check is the
// one request a gateway without gRPC sends per request it guards, so its
// usual body, one flat object such as {"key":"apikey:ak_1","rule":"r",
// "cost":1}, is read by parseCheckFast and its answer written by
// appendResultJSON. Both only take what they can do exactly as the
// reflective path (decodeJSON and encoding/json) would: anything else
// (escapes, names in another case, a name given twice, floats, null,
// items, trailing data, bytes that are not UTF-8) makes parseCheckFast say
// no, and the request takes the strict reflective path, which accepts or
// refuses it as before. TestCheckFastMatchesReflective holds the two paths
// to the same answers.

// parseCheckFast reads b as one flat check object; ok false: b is not of
// the simple shape, read it with decodeJSON.
func parseCheckFast(b []byte) (c checkItemJSON, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return c, false
	}
	i = skipWS(b, i+1)
	var seen [4]bool
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			name, next, ok := fastString(b, i)
			if !ok {
				return c, false
			}
			i = skipWS(b, next)
			if i >= len(b) || b[i] != ':' {
				return c, false
			}
			i = skipWS(b, i+1)
			var field int
			switch name {
			case "key":
				field = 0
			case "rule":
				field = 1
			case "cost":
				field = 2
			case "min_rule_version":
				field = 3
			default:
				return c, false // unknown, or a case encoding/json folds: the strict path says which
			}
			if seen[field] {
				return c, false
			}
			seen[field] = true
			switch field {
			case 0, 1:
				v, next, ok := fastString(b, i)
				if !ok {
					return c, false
				}
				if field == 0 {
					c.Key = v
				} else {
					c.Rule = v
				}
				i = next
			case 2:
				n, next, ok := fastInt(b, i)
				if !ok {
					return c, false
				}
				c.Cost = &n
				i = next
			case 3:
				n, next, ok := fastInt(b, i)
				if !ok || n < 0 {
					return c, false
				}
				c.MinRuleVersion = uint64(n)
				i = next
			}
			i = skipWS(b, i)
			if i >= len(b) {
				return c, false
			}
			if b[i] == '}' {
				i++
				break
			}
			if b[i] != ',' {
				return c, false
			}
			i = skipWS(b, i+1)
		}
	}
	if skipWS(b, i) != len(b) {
		return c, false
	}
	return c, true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// fastString reads a JSON string at b[i] that has no escapes, no control
// characters and is valid UTF-8: its value and the offset after it.
func fastString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", i, false
	}
	ascii := true
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			if !ascii && !utf8.Valid(s) {
				return "", i, false
			}
			return string(s), j + 1, true
		case c == '\\' || c < 0x20:
			return "", i, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", i, false
}

// fastInt reads a JSON integer (no fraction, no exponent) that fits an
// int64 at b[i].
func fastInt(b []byte, i int) (int64, int, bool) {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	start := j
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == start || (b[start] == '0' && j-start > 1) {
		return 0, i, false
	}
	if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		return 0, i, false
	}
	n, err := strconv.ParseInt(string(b[i:j]), 10, 64)
	if err != nil {
		return 0, i, false
	}
	return n, j, true
}

// appendResultJSON appends the JSON of r (as resultJSON and encoding/json
// write it) and a newline to buf; ok false: r carries an error text, which
// needs escaping, so write it with httpjson.Write.
func appendResultJSON(buf []byte, r *limit.Result) ([]byte, bool) {
	if r.Err != "" || r.Code != limit.CodeNone {
		return buf, false
	}
	buf = append(buf, `{"allowed":`...)
	buf = strconv.AppendBool(buf, r.Allowed)
	buf = append(buf, `,"remaining":`...)
	buf = strconv.AppendInt(buf, r.Remaining, 10)
	buf = append(buf, `,"limit":`...)
	buf = strconv.AppendInt(buf, r.Limit, 10)
	buf = append(buf, `,"reset_ms":`...)
	buf = strconv.AppendInt(buf, limit.Millis(r.Reset), 10)
	buf = append(buf, `,"retry_after_ms":`...)
	buf = strconv.AppendInt(buf, limit.Millis(r.RetryAfter), 10)
	if w := limit.Millis(r.Window); w != 0 {
		buf = append(buf, `,"window_ms":`...)
		buf = strconv.AppendInt(buf, w, 10)
	}
	if r.Shadow {
		buf = append(buf, `,"shadow":true`...)
	}
	if r.RuleVersion != 0 {
		buf = append(buf, `,"rule_version":`...)
		buf = strconv.AppendUint(buf, r.RuleVersion, 10)
	}
	if r.Shed {
		return buf, false
	}
	if !r.Permit.Zero() {
		buf = append(buf, `,"permit":"`...)
		buf = append(buf, limit.FormatPermit(r.Permit)...)
		buf = append(buf, `","permit_expires_ms":`...)
		buf = strconv.AppendInt(buf, limit.Millis(r.PermitExpires), 10)
	}
	return append(buf, "}\n"...), true
}

// contentTypeJSON is the Content-Type of a JSON answer, set without
// canonicalizing the name again per request (net/http does not modify it).
var contentTypeJSON = []string{"application/json"}

// bodyBuf is a reusable buffer for a check's body and answer.
type bodyBuf struct{ b []byte }

var bodyPool = sync.Pool{New: func() any { return &bodyBuf{b: make([]byte, 0, 512)} }}

// readBodyInto reads r's capped body into bp (as readBody does, with its
// errors) and returns it; it is valid until bp is reused.
func (s *Server) readBodyInto(w http.ResponseWriter, r *http.Request, bp *bodyBuf) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	b := bp.b[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			bp.b = b
			if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
				return nil, limit.Errorf(limit.ErrTooLarge, "request body is over the limit of %d bytes", mbe.Limit)
			}
			return nil, limit.Errorf(limit.ErrInvalid, "reading the request body: %v", err)
		}
	}
	if cap(b) > 64<<10 {
		bp.b = make([]byte, 0, 512) // do not keep a large body's buffer in the pool
	} else {
		bp.b = b
	}
	return b, nil
}
