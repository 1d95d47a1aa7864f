package limit

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/weirlimit/weir/bucket"
)

// MaxKeyLen is the longest limited key, in bytes.
const MaxKeyLen = 256

// Never is the RetryAfter of an item that can never pass: its cost is above
// the burst, or an override blocks the key with no end.
const Never = bucket.Never

// Item is one check: take Cost tokens of Key under Rule. (Fields are
// ordered to pack it into 64 bytes.)
type Item struct {
	// Key is the limited key, e.g. "apikey:ak_42": 1 to MaxKeyLen bytes of
	// valid UTF-8, compared byte for byte.
	Key string
	// Rule is the rule id.
	Rule string
	// Cost is the tokens to take; 0 peeks. Never negative.
	Cost int64
	// RuleVersion is the rule set version the caller matched against (0:
	// any); an owner that is behind waits briefly for it.
	RuleVersion uint64
	// Group makes items all-or-nothing: items of one call that share a
	// non-zero Group pass only if every non-shadow item of the group is
	// allowed (an item that could not be decided is not). When one is
	// denied, each other non-shadow item of the group that would have
	// passed is answered Allowed=false, Voided=true, and its tokens are
	// given back. Shadow and refund items are never voided and never void
	// their group.
	Group uint32
	// Hops is set by nodes only: how many times a node passed this item on
	// after the first forward.
	Hops uint32
	// Refund gives Cost tokens back instead of taking them (never more
	// than the bucket holds); it ignores Group.
	Refund bool
	// Override, when set, replaces the rule's rate, period and burst for
	// this check (the rule's algorithm stays): an Envoy rate limit service
	// descriptor's limit override. Only nodes set it; the Limiter API
	// drops it from callers.
	Override *Override
	// LeaseGateway is set by a gateway SDK on an item of a rule with
	// lease: auto when it can hold an automatic lease of the key now: a
	// non-zero hash of its gateway id. Only such items are granted one
	// (Result.LeaseGranted).
	LeaseGateway uint64
	// Release, when set, gives back this permit of a concurrency rule
	// instead of checking (Cost and Group are ignored): the Result's
	// Allowed says whether it was held. Only the release operation
	// (Limiter.Release, POST /v1/limits/release) sets it.
	Release *bucket.PermitID
	// Priority is the request's class under a rule with a reserve (its
	// priority_header's value; "": the rule's priority_default).
	Priority string
	// Trace is the W3C trace context (a traceparent value) of a sampled
	// item, set by a traced SDK or node; empty when not sampled. A batch
	// carries items of many requests, so each sampled item carries its own.
	Trace string
}

// Override is a per-check limit (Item.Override): Rate tokens per Period,
// Burst at most (0: Rate).
type Override struct {
	Rate   int64
	Period time.Duration
	Burst  int64
}

// Result is the answer for one Item. (Fields are ordered to pack it
// tightly: batches of results are allocated on the check path.)
type Result struct {
	// Remaining is the whole tokens left (before the call, if denied).
	Remaining int64
	// Limit is the bucket's capacity under the rule (and any override).
	Limit int64
	// Reset is the time until the bucket is full again / the window ends.
	Reset time.Duration
	// RetryAfter is the wait until the same cost would pass: 0 when
	// allowed, Never when it never can.
	RetryAfter time.Duration
	// Window is the rule's period.
	Window time.Duration
	// Err says why the item could not be decided (Code is set).
	Err string
	// Allowed is true when the tokens were taken (or a peek found them).
	Allowed bool
	// Shadow is true for a shadow rule: Allowed reports what would have
	// happened, and callers must not block on it.
	Shadow bool
	// Voided is true when the item would have passed on its own but
	// another item of its Group was denied: Allowed is false, RetryAfter
	// 0, and it took nothing (see Item.Group).
	Voided bool
	// Code is set when the item could not be decided; Allowed is then
	// false.
	Code ErrorCode
	// RuleVersion is the rules version (Raft index) of the rule set that
	// decided the item (0: none did, e.g. an unknown rule).
	RuleVersion uint64
	// LeaseGranted is an automatic lease: tokens the owner took beyond
	// Cost for the gateway named by Item.LeaseGateway to spend locally
	// (and give back unspent). 0: none.
	LeaseGranted int64
	// Permit is the permit an allowed check of a concurrency rule took
	// (zero otherwise); it is held until released or for PermitExpires.
	Permit        bucket.PermitID
	PermitExpires time.Duration
	// Shed: denied to keep the rule's reserve for other classes (answer
	// 503 "shed", not 429); the tokens were there for a higher class.
	Shed bool
}

// ErrorCode says why an item could not be decided.
type ErrorCode uint8

// Error codes of a Result.
const (
	// CodeNone: the item was decided.
	CodeNone ErrorCode = iota
	// CodeUnknownRule: no rule has the item's id (in the owner's rule set).
	CodeUnknownRule
	// CodeInvalid: the item's shape is wrong (see ValidateItem).
	CodeInvalid
	// CodeUnavailable: the owner could not be reached or has no answer
	// yet; the caller applies the rule's fail mode.
	CodeUnavailable
	// CodeKeyCap: the item's rule holds its max_keys live keys on the
	// owner and the key is new; like CodeUnavailable, the caller applies
	// the rule's fail mode.
	CodeKeyCap
)

// String names the code as the HTTP API reports it.
func (c ErrorCode) String() string {
	switch c {
	case CodeNone:
		return ""
	case CodeUnknownRule:
		return "unknown_rule"
	case CodeInvalid:
		return "invalid_argument"
	case CodeUnavailable:
		return "unavailable"
	case CodeKeyCap:
		return "key_cap"
	}
	return "internal"
}

// Millis is d in whole milliseconds, rounded up, as the wire formats carry
// durations: Never is -1 and a negative d is 0.
func Millis(d time.Duration) int64 {
	if d == Never {
		return -1
	}
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// FromMillis reads milliseconds as Millis writes them: -1 (any negative
// value) is Never.
func FromMillis(ms int64) time.Duration {
	if ms < 0 {
		return Never
	}
	return time.Duration(ms) * time.Millisecond
}

// AutoLeaseSize is the most tokens an owner grants one gateway at a time
// as an automatic lease (rules with lease: auto) of a hot key whose
// bucket holds capacity tokens, with gateways (counted at least 2)
// asking for it: a quarter of the capacity shared among them, at least 1.
// So about a quarter of the bucket is leased out at once, and each
// gateway holds at most max(1, capacity/8) (docs/design.md, leases).
func AutoLeaseSize(capacity int64, gateways int) int64 {
	return max(1, capacity/(4*int64(max(2, gateways))))
}

// FormatPermit writes a permit id as the HTTP API and headers carry it:
// 32 lowercase hex digits.
func FormatPermit(id bucket.PermitID) string {
	return fmt.Sprintf("%016x%016x", id.Hi, id.Lo)
}

// ParsePermit reads a permit id written by FormatPermit.
func ParsePermit(s string) (bucket.PermitID, error) {
	if len(s) != 32 {
		return bucket.PermitID{}, Errorf(ErrInvalid, "permit %q: want 32 hex digits", s)
	}
	hi, err1 := strconv.ParseUint(s[:16], 16, 64)
	lo, err2 := strconv.ParseUint(s[16:], 16, 64)
	if err1 != nil || err2 != nil || (hi == 0 && lo == 0) {
		return bucket.PermitID{}, Errorf(ErrInvalid, "permit %q: want 32 hex digits, not all zero", s)
	}
	return bucket.PermitID{Hi: hi, Lo: lo}, nil
}

// PermitBytes and PermitFromBytes are the gRPC form of a permit id: 16
// bytes, big-endian (nil for the zero id).
func PermitBytes(id bucket.PermitID) []byte {
	if id.Zero() {
		return nil
	}
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(make([]byte, 0, 16), id.Hi), id.Lo)
}

// PermitFromBytes reads PermitBytes; a length other than 16, or the zero
// id, is an error.
func PermitFromBytes(b []byte) (bucket.PermitID, error) {
	if len(b) != 16 {
		return bucket.PermitID{}, Errorf(ErrInvalid, "permit: want 16 bytes, got %d", len(b))
	}
	id := bucket.PermitID{Hi: binary.BigEndian.Uint64(b[:8]), Lo: binary.BigEndian.Uint64(b[8:])}
	if id.Zero() {
		return id, Errorf(ErrInvalid, "permit: the zero id")
	}
	return id, nil
}
