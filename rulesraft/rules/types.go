package rules

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Key types a rule can limit by.
const (
	KeyAPIKey = "apikey"
	KeyUser   = "user"
	KeyIP     = "ip"
	KeyGlobal = "global"
	// KeyDescriptor limits by the values of an Envoy rate limit
	// descriptor: the only key type of a rule with a Match.Domain.
	KeyDescriptor = "descriptor"
	// KeyHeaderPrefix starts a header key type: "header:X-Tenant".
	KeyHeaderPrefix = "header:"
)

// Algorithm names as written in rules files.
const (
	AlgTokenBucket   = "token_bucket"
	AlgLeakyBucket   = "leaky_bucket"
	AlgFixedWindow   = "fixed_window"
	AlgSlidingWindow = "sliding_window"
	AlgSlidingLog    = "sliding_log"
	// AlgConcurrency limits requests in flight (Rule.Concurrency permits
	// held at once, each for at most Rule.PermitTTL).
	AlgConcurrency = "concurrency"
)

// AlgGCRA is an alias: GCRA is the leaky bucket as a meter (one
// theoretical arrival time per key), which is how leaky_bucket works.
// Validate accepts it and Normalize writes leaky_bucket, so the alias never
// reaches the Raft log.
const AlgGCRA = "gcra"

// canonicalAlgorithm resolves an alias to the algorithm it names.
func canonicalAlgorithm(alg string) string {
	if alg == AlgGCRA {
		return AlgLeakyBucket
	}
	return alg
}

// Rule scopes across regions.
const (
	ScopeRegion = "region"
	ScopeGlobal = "global"
)

// Fail modes.
const (
	FailOpen   = "open"
	FailClosed = "closed"
)

// DefaultTimeout is how long a gateway waits for the owner when a rule sets none.
const DefaultTimeout = 5 * time.Millisecond

// Rule is one limit as admins write it in rules.yaml. The zero values of
// Algorithm, FailMode and Timeout mean token_bucket, open and 5ms.
type Rule struct {
	ID        string   `json:"id" yaml:"id"`
	Match     Match    `json:"match" yaml:"match"`
	Key       string   `json:"key" yaml:"key"`
	Algorithm string   `json:"algorithm,omitempty" yaml:"algorithm,omitempty"`
	Rate      int64    `json:"rate" yaml:"rate"`
	Period    Duration `json:"period" yaml:"period"`
	Calendar  string   `json:"calendar,omitempty" yaml:"calendar,omitempty"` // day | week | month | year of Timezone: see calendar.go
	Timezone  string   `json:"timezone,omitempty" yaml:"timezone,omitempty"` // IANA name of a calendar rule's zone ("": UTC)
	Burst     int64    `json:"burst,omitempty" yaml:"burst,omitempty"`
	FailMode  string   `json:"fail_mode,omitempty" yaml:"fail_mode,omitempty"`
	Timeout   Duration `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	Shadow    bool     `json:"shadow,omitempty" yaml:"shadow,omitempty"`
	// Lease says whether gateways may spend this rule's tokens locally
	// for a hot key: LeaseAuto (the zero value; written "auto" or left
	// out: the owner leases keys it sees hot from several gateways on its
	// own), LeaseOff ("off", or 0 as before: every check asks the owner)
	// or a fixed count N ≥ 1 (a gateway takes N tokens per ask).
	Lease Lease `json:"lease,omitempty" yaml:"lease,omitempty"`
	// MaxKeys caps the live keys (counters) of this rule on each node: a
	// check for a new key beyond it is not tracked and is answered by the
	// rule's fail mode (see docs/design.md, key floods). 0 means the
	// node's default.
	MaxKeys int64 `json:"max_keys,omitempty" yaml:"max_keys,omitempty"`
	// Cost is the tokens a request matching this rule takes (0 means 1),
	// e.g. 50 for a bulk export. CostHeader names a request header whose
	// value, a whole number from 1 to MaxCost, is the cost instead when a
	// request carries it; a gateway must only trust it from its own auth
	// layer. See RequestCost.
	Cost       int64  `json:"cost,omitempty" yaml:"cost,omitempty"`
	CostHeader string `json:"cost_header,omitempty" yaml:"cost_header,omitempty"`
	// Scope is region (the default: the limit holds in each region) or
	// global (one limit shared by every region, docs/design.md, regions).
	Scope string `json:"scope,omitempty" yaml:"scope,omitempty"`
	// Events says which of the rule's decisions become limit events (the
	// zero value: the default, DefaultEventSample of denials).
	Events Events `json:"events,omitzero" yaml:"events,omitempty"`
	// Replaces names rules (of the same domain) that do not apply to a
	// rate limit service request this rule applies to, as
	// envoyproxy/ratelimit's "replaces". Only for rules with a domain.
	Replaces []string `json:"replaces,omitempty" yaml:"replaces,omitempty"`
	// Unlimited marks a descriptor rule that matches and limits nothing:
	// it takes precedence over less specific descriptor rules, as
	// envoyproxy/ratelimit's "unlimited: true". Rate and period are 0.
	Unlimited bool `json:"unlimited,omitempty" yaml:"unlimited,omitempty"`
	// Durable is "off" for a rule whose counters are never written to a
	// data dir (durable.go); "" or "on" (the default): those whose idle
	// deadline is an hour or more away are.
	Durable string `json:"durable,omitempty" yaml:"durable,omitempty"`
	// Concurrency (written "limit") is, for algorithm: concurrency, the
	// requests of one key in flight at once: an allowed check holds a
	// permit until it is released or PermitTTL (0: DefaultPermitTTL)
	// passes. Such a rule takes no rate, period, burst, lease or cost
	// (ConcurrencyRefuses).
	Concurrency int64    `json:"limit,omitempty" yaml:"limit,omitempty"`
	PermitTTL   Duration `json:"permit_ttl,omitempty" yaml:"permit_ttl,omitempty"`
	// PriorityHeader names the request header that gives a request's
	// class, PriorityDefault the class of a request without it (empty:
	// DefaultPriorityClass), and Reserve the share of the rule's capacity
	// kept for each named class (reserve.go): a request of another class
	// is shed once taking it would leave less than those reserves.
	PriorityHeader  string   `json:"priority_header,omitempty" yaml:"priority_header,omitempty"`
	PriorityDefault string   `json:"priority_default,omitempty" yaml:"priority_default,omitempty"`
	Reserve         Reserves `json:"reserve,omitempty" yaml:"reserve,omitempty"`
}

// Lease is a rule's lease setting: LeaseAuto, LeaseOff, or a fixed count
// of tokens (≥ 1) a gateway takes per ask and spends locally.
type Lease int64

// Lease settings other than a fixed count.
const (
	// LeaseAuto (the default) lets the owner lease a key on its own while
	// it sees it hot from several gateways (docs/design.md, leases).
	LeaseAuto Lease = 0
	// LeaseOff is exact: every check asks the owner.
	LeaseOff Lease = -1
)

// Fixed is the fixed lease count, or 0 for auto and off.
func (l Lease) Fixed() int64 { return max(0, int64(l)) }

// String is the rules-file form: "auto", "off" or the count.
func (l Lease) String() string {
	switch {
	case l == LeaseAuto:
		return "auto"
	case l == LeaseOff:
		return "off"
	case l > 0:
		return strconv.FormatInt(int64(l), 10)
	}
	return fmt.Sprintf("invalid(%d)", int64(l))
}

// errLeaseValue is the problem with a lease that is not auto, off or a
// count.
const errLeaseValue = "want auto, off or a count ≥ 1"

// ParseLease reads a lease as written in a rules file or a flag: "auto"
// (or empty), "off", or a whole number; 0 is read as off, its meaning
// before auto leases existed.
func ParseLease(s string) (Lease, error) {
	switch s {
	case "", "auto":
		return LeaseAuto, nil
	case "off":
		return LeaseOff, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil || n < 0:
		return 0, fmt.Errorf("%q: %s", s, errLeaseValue)
	case n == 0:
		return LeaseOff, nil
	}
	return Lease(n), nil
}

// MarshalJSON writes a count as a number and auto or off as a string.
func (l Lease) MarshalJSON() ([]byte, error) {
	if l > 0 {
		return strconv.AppendInt(nil, int64(l), 10), nil
	}
	return json.Marshal(l.String())
}

// UnmarshalJSON reads "auto", "off" or a whole number (0: off).
func (l *Lease) UnmarshalJSON(b []byte) error {
	var s string
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if s == "" {
			return fmt.Errorf("lease: \"\": %s", errLeaseValue)
		}
	} else {
		s = string(b)
		if s == "null" {
			return nil
		}
	}
	v, err := ParseLease(s)
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	*l = v
	return nil
}

// MarshalYAML writes a count as a number and auto or off as a string.
func (l Lease) MarshalYAML() (any, error) {
	if l > 0 {
		return int64(l), nil
	}
	return l.String(), nil
}

// UnmarshalYAML reads "auto", "off" or a whole number (0: off).
func (l *Lease) UnmarshalYAML(unmarshal func(any) error) error {
	var s string
	if err := unmarshal(&s); err != nil {
		return fmt.Errorf("lease: %s", errLeaseValue)
	}
	if s == "" {
		return fmt.Errorf("lease: \"\": %s", errLeaseValue)
	}
	v, err := ParseLease(s)
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	*l = v
	return nil
}

// DefaultEventSample is the fraction of a rule's denials a node keeps as
// limit events when the rule sets no events.sample.
const DefaultEventSample = 0.01

// Events is a rule's limit-event option. Fail-mode decisions (the owner
// could not decide) always become events.
type Events struct {
	// Sample is the fraction (0 to 1) of denials kept; 0 means
	// DefaultEventSample.
	Sample float64 `json:"sample,omitempty" yaml:"sample,omitempty"`
	// Redact makes events carry a hash of the key instead of the key.
	Redact bool `json:"redact,omitempty" yaml:"redact,omitempty"`
}

// SampleRate is the fraction of denials kept (Sample, or the default).
func (e Events) SampleRate() float64 {
	if e.Sample == 0 {
		return DefaultEventSample
	}
	return e.Sample
}

// Global reports whether the rule's limit is one quota shared by every
// region (scope: global) rather than a limit per region.
func (r *Rule) Global() bool { return r.Scope == ScopeGlobal }

// Match selects the requests a rule applies to. Route is exact, may hold
// {param} segments, and may end in "*". Method and Plan default to "*".
//
// A rule with a Domain matches Envoy rate limit service requests instead
// (see DescriptorMatcher): the request's domain, and a descriptor whose
// entries match Descriptor level by level. Route, Method and Plan are
// then empty.
type Match struct {
	Route      string  `json:"route" yaml:"route"`
	Method     string  `json:"method,omitempty" yaml:"method,omitempty"`
	Plan       string  `json:"plan,omitempty" yaml:"plan,omitempty"`
	Domain     string  `json:"domain,omitempty" yaml:"domain,omitempty"`
	Descriptor []Entry `json:"descriptor,omitempty" yaml:"descriptor,omitempty"`
}

// Entry is one level of a descriptor pattern. Key matches the entry's key
// exactly. Value "" or "*" matches any value, "prefix*" any value that
// starts with prefix, and anything else that value exactly. Each distinct
// request value has its own counter whatever the pattern.
type Entry struct {
	Key   string `json:"key" yaml:"key"`
	Value string `json:"value,omitempty" yaml:"value,omitempty"`
}

// Override changes one rule's limit for one limited key (e.g. a partner's
// raised limit) until ExpiresAt. Block denies every request for the key.
// ExpiresAt zero means it never expires.
type Override struct {
	Key       string    `json:"key" yaml:"key"`
	Rule      string    `json:"rule" yaml:"rule"`
	Rate      int64     `json:"rate,omitempty" yaml:"rate,omitempty"`
	Burst     int64     `json:"burst,omitempty" yaml:"burst,omitempty"`
	Block     bool      `json:"block,omitempty" yaml:"block,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitempty" yaml:"expires_at,omitempty"`
}

// File is the shape of a rules.yaml file.
type File struct {
	Rules []Rule `json:"rules" yaml:"rules"`
}

// Duration is a time.Duration written as a Go duration string ("1s", "5m")
// in YAML and JSON.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats the duration like time.Duration, without zero trailing
// units: "1m" rather than "1m0s", "1h30m" rather than "1h30m0s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// MarshalJSON writes the duration as a string such as "1m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string such as "1s" or "24h".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"1s\": %w", err)
	}
	return d.parse(s)
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML reads a duration string.
func (d *Duration) UnmarshalYAML(unmarshal func(any) error) error {
	var s string
	if err := unmarshal(&s); err != nil {
		return fmt.Errorf("duration must be a string such as \"1s\": %w", err)
	}
	return d.parse(s)
}

func (d *Duration) parse(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q (use a Go duration such as 1s, 30s, 5m, 1h, 24h)", s)
	}
	*d = Duration(v)
	return nil
}

// Equal reports whether r and o are the same rule, field by field.
func (r Rule) Equal(o Rule) bool {
	return r.ID == o.ID && r.Match.Route == o.Match.Route && r.Match.Method == o.Match.Method &&
		r.Match.Plan == o.Match.Plan && r.Match.Domain == o.Match.Domain &&
		slices.Equal(r.Match.Descriptor, o.Match.Descriptor) && r.Key == o.Key &&
		r.Algorithm == o.Algorithm && r.Rate == o.Rate && r.Period == o.Period && r.Burst == o.Burst &&
		r.Calendar == o.Calendar && r.Timezone == o.Timezone &&
		r.FailMode == o.FailMode && r.Timeout == o.Timeout && r.Shadow == o.Shadow && r.Lease == o.Lease &&
		r.MaxKeys == o.MaxKeys && slices.Equal(r.Replaces, o.Replaces) && r.Unlimited == o.Unlimited &&
		r.Cost == o.Cost && r.CostHeader == o.CostHeader && r.Scope == o.Scope && r.Events == o.Events &&
		r.Durable == o.Durable &&
		r.Concurrency == o.Concurrency && r.PermitTTL == o.PermitTTL &&
		r.PriorityHeader == o.PriorityHeader && r.PriorityDefault == o.PriorityDefault && maps.Equal(r.Reserve, o.Reserve)
}
