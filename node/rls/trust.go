package rls

import (
	"fmt"
	"strings"
)

// Trust is what the service believes of a request beyond its descriptors
// and hits. Envoy passes on whatever its route configuration builds, so
// both are off unless the operator controls every Envoy that can reach
// the node (--rls-trust).
type Trust struct {
	// NegativeHits: a descriptor's is_negative_hits gives its hits back
	// (a refund). Off: such a descriptor only peeks (cost 0).
	NegativeHits bool
	// Overrides: a descriptor's limit replaces the matched rules' rate,
	// period and burst. Off: the rule's own limit applies.
	Overrides bool
}

// Trust words, as --rls-trust takes them.
const (
	TrustNegativeHits = "negative-hits"
	TrustOverrides    = "overrides"
)

// ParseTrust reads a comma-separated list of TrustNegativeHits and
// TrustOverrides ("" trusts neither).
func ParseTrust(s string) (Trust, error) {
	var t Trust
	for _, w := range strings.Split(s, ",") {
		switch strings.TrimSpace(w) {
		case "":
		case TrustNegativeHits:
			t.NegativeHits = true
		case TrustOverrides:
			t.Overrides = true
		default:
			return Trust{}, fmt.Errorf("rls: trust %q: want a comma-separated list of %s and %s", strings.TrimSpace(w), TrustNegativeHits, TrustOverrides)
		}
	}
	return t, nil
}

// String is the list ParseTrust reads back.
func (t Trust) String() string {
	var ws []string
	if t.NegativeHits {
		ws = append(ws, TrustNegativeHits)
	}
	if t.Overrides {
		ws = append(ws, TrustOverrides)
	}
	return strings.Join(ws, ",")
}

// distrust returns r with what t does not trust taken out: an untrusted
// negative descriptor peeks (cost 0) instead of giving hits back, an
// untrusted override is dropped. It counts what it took out; r itself is
// not changed (a copy is made when something is).
func distrust(r *Request, t Trust) (out *Request, negative, overrides int) {
	out = r
	for i := range r.Descriptors {
		d := &r.Descriptors[i]
		neg := d.Negative && !t.NegativeHits
		over := d.Override != nil && !t.Overrides
		if !neg && !over {
			continue
		}
		if out == r {
			cp := *r
			cp.Descriptors = append([]Descriptor(nil), r.Descriptors...)
			out = &cp
		}
		nd := &out.Descriptors[i]
		if neg {
			nd.Negative, nd.Hits, nd.HasHits = false, 0, true
			negative++
		}
		if over {
			nd.Override = nil
			overrides++
		}
	}
	return out, negative, overrides
}
