package client

import (
	"net/http"
	"net/netip"

	"github.com/weirlimit/weir/client/reqmatch"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// Request is what a decision is made from (reqmatch.Request).
type Request = reqmatch.Request

// HeaderNames name the API key, user and plan headers (reqmatch).
type HeaderNames = reqmatch.HeaderNames

// Check is one rule a request is checked against, at its limited key.
type Check = reqmatch.Check

// RequestFrom builds a Request as the middleware does (reqmatch.RequestFrom).
func RequestFrom(r *http.Request, h HeaderNames, trusted []netip.Prefix) Request {
	return reqmatch.RequestFrom(r, h, trusted)
}

// ClientIP returns the address of the caller (reqmatch.ClientIP).
func ClientIP(r *http.Request, trusted []netip.Prefix) string { return reqmatch.ClientIP(r, trusted) }

// Match appends to dst the checks the middleware makes for r under m
// (reqmatch.Match).
func Match(m *rules.Matcher, r Request, dst []Check) []Check { return reqmatch.Match(m, r, dst) }

func keyFor(r *rules.Rule, req *Request) string { return reqmatch.KeyFor(r, req) }
