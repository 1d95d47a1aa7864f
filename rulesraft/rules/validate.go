package rules

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weirlimit/weir/bucket"
)

// Limits on what a rule may say.
const (
	// MaxIDLen is the longest rule id.
	MaxIDLen = 128
	// MaxTimeout is the longest a gateway may be told to wait for an owner.
	MaxTimeout = 10 * time.Second
	// MaxLogLimit caps the rate of a sliding_log rule: the log keeps one
	// timestamp per admitted request in the window.
	MaxLogLimit = bucket.DefaultMaxLog
	// ReservedID may not name a rule: /v1/rules/history is the history.
	ReservedID = "history"
	// MaxOverrideKeyLen is the longest limited key an override may name.
	MaxOverrideKeyLen = 256
	// MaxRules is the most rules one rule set holds. Every node keeps the
	// current set compiled in memory and a write costs time in proportion
	// to it (see docs/design.md, "Large rule sets").
	MaxRules = 10_000
	// MaxOverrides is the most overrides one rule set holds.
	MaxOverrides = 100_000
	// MaxDomainLen is the longest rate limit service domain a rule names.
	MaxDomainLen = 128
	// MaxDescriptorEntries is the most entries a descriptor pattern holds.
	MaxDescriptorEntries = 16
	// MaxEntryLen is the longest descriptor key or value pattern.
	MaxEntryLen = 256
	// MaxConcurrency caps a concurrency rule's limit: the owner keeps one
	// permit (24 bytes) per request in flight.
	MaxConcurrency = bucket.DefaultMaxLog
	// MaxPermitTTL is the longest permit_ttl: the longest a request may
	// hold a permit.
	MaxPermitTTL = time.Hour
	// DefaultPermitTTL is a concurrency rule's permit_ttl when it gives
	// none.
	DefaultPermitTTL = 30 * time.Second
)

// ConcurrencyRefuses are the fields a rule with algorithm: concurrency
// must not set: it counts requests in flight, not tokens per period, and
// its permits are released by the caller (never leased, refunded or
// shadowed), on one owner.
var ConcurrencyRefuses = []string{"rate", "period", "burst", "lease", "cost", "cost_header", "shadow", "scope: global", "match.domain", "reserve", "calendar", "timezone", "priority_header", "priority_default", "durable"}

// Default values Normalize fills in.
const (
	DefaultAlgorithm = AlgTokenBucket
	DefaultFailMode  = FailOpen
	AnyMethod        = "*"
	AnyPlan          = "*"
)

// Normalize returns r with every default written out: algorithm
// token_bucket, method "*", plan "*", fail_mode open, timeout 5ms, burst
// equal to rate when 0, and a header key's name in canonical form
// ("header:x-tenant" becomes "header:X-Tenant"). It does not validate.
//
// A rule with a domain keeps its route, method and plan empty, and its
// key is "descriptor"; an unlimited one keeps burst 0.
func Normalize(r Rule) Rule {
	if r.Algorithm == "" {
		r.Algorithm = DefaultAlgorithm
	}
	r.Algorithm = canonicalAlgorithm(r.Algorithm)
	if r.Match.Domain != "" {
		if r.Key == "" {
			r.Key = KeyDescriptor
		}
	} else {
		if r.Match.Method == "" {
			r.Match.Method = AnyMethod
		}
		if r.Match.Plan == "" {
			r.Match.Plan = AnyPlan
		}
	}
	if r.FailMode == "" {
		r.FailMode = DefaultFailMode
	}
	if r.Timeout == 0 {
		r.Timeout = Duration(DefaultTimeout)
	}
	if r.Burst == 0 {
		r.Burst = r.Rate
	}
	if r.Calendar != "" && r.Timezone == "" {
		r.Timezone = DefaultTimezone
	}
	if r.Algorithm == AlgConcurrency {
		if r.PermitTTL == 0 {
			r.PermitTTL = Duration(DefaultPermitTTL)
		}
		r.Lease = LeaseOff // never leased
	}
	if len(r.Reserve) > 0 {
		r.Lease = LeaseOff // the owner alone knows how much is left above the reserves
	}
	if name, ok := strings.CutPrefix(r.Key, KeyHeaderPrefix); ok && isToken(name) {
		r.Key = KeyHeaderPrefix + canonicalHeader(name)
	}
	return r
}

// Limit returns the rule's limit for the bucket package. It assumes a valid
// rule: an unknown algorithm yields the default one, and a burst of 0
// becomes the rate. A calendar rule's limit carries its unit, its loaded
// zone (UTC if the zone cannot be loaded here) and the unit's nominal
// length as Period.
func (r Rule) Limit() bucket.Limit {
	alg := r.Algorithm
	if alg == "" {
		alg = DefaultAlgorithm
	}
	a, err := bucket.ParseAlgorithm(canonicalAlgorithm(alg))
	if err != nil {
		a, _ = bucket.ParseAlgorithm(DefaultAlgorithm)
	}
	if a == bucket.Concurrency {
		ttl := r.PermitTTL.D()
		if ttl == 0 {
			ttl = DefaultPermitTTL
		}
		return bucket.Limit{Algorithm: a, Rate: r.Concurrency, Period: ttl}
	}
	burst := r.Burst
	if burst == 0 {
		burst = r.Rate
	}
	lim := bucket.Limit{Algorithm: a, Rate: r.Rate, Period: r.Period.D(), Burst: burst}
	if c, err := bucket.ParseUnit(r.Calendar); err == nil && c != bucket.NoUnit {
		zone, _ := LoadZone(r.Timezone)
		lim.Calendar, lim.Period = &bucket.Calendar{Unit: c, Zone: zone}, c.Nominal()
	}
	return lim
}

// Validate checks one rule, as written or normalized (empty fields mean
// their defaults). The error is a *ValidationError whose Fields are the
// rule's own ("rate", "match.route").
//
// A burst of 0 is read as "absent" (burst = rate): YAML cannot tell an
// explicit "burst: 0" from a missing one once decoded, so only a negative
// burst is an error.
func (r Rule) Validate() error {
	var ps problems
	r.check(&ps)
	return errOf(ps.list)
}

// Validate checks a whole rule set: every rule, and that ids are unique.
// Fields are prefixed with the rule's index ("rules[1].rate"). Every
// problem is listed, not only the first.
func Validate(rs []Rule) error {
	var ps problems
	if len(rs) > MaxRules {
		ps.add("rules", "%d rules; a rule set holds at most %d", len(rs), MaxRules)
	}
	seen := make(map[string]int, len(rs))
	for i, r := range rs {
		ps.prefix = indexPrefix(i)
		r.check(&ps)
		if r.ID == "" {
			continue
		}
		if j, dup := seen[r.ID]; dup {
			ps.add("id", "duplicate id %q (first used by rules[%d])", r.ID, j)
			continue
		}
		seen[r.ID] = i
	}
	return errOf(ps.list)
}

func indexPrefix(i int) string {
	return "rules[" + strconv.Itoa(i) + "]."
}

// check appends r's problems to ps.
func (r Rule) check(ps *problems) {
	start := len(ps.list)
	checkID(ps, "id", r.ID)
	r.checkMatch(ps)
	if r.Unlimited {
		if r.Rate != 0 || r.Period != 0 || r.Burst != 0 || r.Lease > 0 {
			ps.add("unlimited", "an unlimited rule has no rate, period, burst or lease")
		}
		return
	}
	r.checkKey(ps)
	alg := r.checkAlgorithm(ps)
	if f := r.FailMode; f != "" && f != FailOpen && f != FailClosed {
		ps.add("fail_mode", "%q: must be %q or %q", f, FailOpen, FailClosed)
	}
	if r.Timeout < 0 {
		ps.add("timeout", "must be >= 0")
	} else if r.Timeout.D() > MaxTimeout {
		ps.add("timeout", "%s is over the maximum of %s", r.Timeout, Duration(MaxTimeout))
	}
	r.checkLeaseCost(ps, alg)
	if r.Scope != "" && r.Scope != ScopeRegion && r.Scope != ScopeGlobal {
		ps.add("scope", "%q is not a scope (want region or global)", r.Scope)
	}
	if r.Durable != "" && r.Durable != DurableOn && r.Durable != DurableOff {
		ps.add("durable", "%q is not on or off", r.Durable)
	}
	if alg != AlgConcurrency {
		r.checkReserve(ps, alg)
	}
	if s := r.Events.Sample; !(s >= 0 && s <= 1) { // NaN fails too
		ps.add("events.sample", "%v is not a fraction from 0 to 1 (0.01 keeps 1%% of denials; 0 means that default)", s)
	}

	// Safety net: anything the bucket package refuses but we did not catch.
	if len(ps.list) == start {
		maxLog := int64(MaxLogLimit)
		if alg == AlgConcurrency {
			maxLog = MaxConcurrency
		}
		if err := r.Limit().Validate(maxLog); err != nil {
			ps.add("", "limit rejected: %v", err)
		}
	}
}

// checkMatch checks what the rule matches: a descriptor, or a route,
// method and plan.
func (r Rule) checkMatch(ps *problems) {
	if r.Match.Domain != "" {
		r.checkDescriptor(ps)
	} else {
		if _, err := parseRoute(r.Match.Route); err != nil {
			ps.add("match.route", "%v", err)
		}
		if len(r.Match.Descriptor) > 0 {
			ps.add("match.descriptor", "needs match.domain (a descriptor rule matches rate limit service requests of one domain)")
		}
		if len(r.Replaces) > 0 {
			ps.add("replaces", "only a rule with match.domain may replace others")
		}
		if r.Unlimited {
			ps.add("unlimited", "only a rule with match.domain may be unlimited")
		}
	}
	if m := r.Match.Method; m != "" && m != AnyMethod && !isUpperToken(m) {
		ps.add("match.method", "%q: must be \"*\" or an uppercase HTTP method such as GET", m)
	}
	if p := r.Match.Plan; p != "" && p != AnyPlan && (!isToken(p) || len(p) > MaxIDLen) {
		ps.add("match.plan", "%q: must be \"*\" or a plan name (letters, digits, and !#$%%&'*+-.^_`|~; at most %d)", p, MaxIDLen)
	}
}

// checkKey checks what the rule counts by.
func (r Rule) checkKey(ps *problems) {
	switch k := r.Key; {
	case k == KeyDescriptor && r.Match.Domain != "", k == "" && r.Match.Domain != "":
	case k == KeyDescriptor:
		ps.add("key", "%q is the key of rules with match.domain only", k)
	case r.Match.Domain != "":
		ps.add("key", "%q: a rule with match.domain is keyed by its descriptor (key: descriptor, or leave it out)", k)
	case k == "":
		ps.add("key", "must not be empty (apikey | user | ip | global | header:<Name>)")
	case k == KeyAPIKey, k == KeyUser, k == KeyIP, k == KeyGlobal:
	case strings.HasPrefix(k, KeyHeaderPrefix):
		if name := k[len(KeyHeaderPrefix):]; !isToken(name) {
			ps.add("key", "%q: header name must be a valid HTTP header name such as X-Tenant", k)
		}
	default:
		ps.add("key", "unknown key type %q (want apikey | user | ip | global | header:<Name>)", k)
	}
}

// checkAlgorithm checks the algorithm and the fields it takes, and returns
// its canonical name.
func (r Rule) checkAlgorithm(ps *problems) string {
	alg := r.Algorithm
	if alg == "" {
		alg = DefaultAlgorithm
	}
	alg = canonicalAlgorithm(alg)
	if _, err := bucket.ParseAlgorithm(alg); err != nil {
		ps.add("algorithm", "unknown algorithm %q (want %s | %s (alias %s) | %s | %s | %s | %s)", r.Algorithm,
			AlgTokenBucket, AlgLeakyBucket, AlgGCRA, AlgFixedWindow, AlgSlidingWindow, AlgSlidingLog, AlgConcurrency)
	}
	if alg == AlgConcurrency {
		r.checkConcurrency(ps)
	} else {
		r.checkRate(ps, alg)
	}
	return alg
}

// checkLeaseCost checks the lease, max_keys, cost and cost_header against
// the algorithm alg and the burst.
func (r Rule) checkLeaseCost(ps *problems, alg string) {
	burst := r.Burst
	if burst == 0 {
		burst = r.Rate
	}
	windowed := alg == AlgFixedWindow || alg == AlgSlidingWindow || alg == AlgSlidingLog
	switch {
	case alg == AlgConcurrency: // lease, cost and reserve are refused (checkConcurrency)
	case r.Lease < LeaseOff:
		ps.add("lease", "%s, got %d", errLeaseValue, int64(r.Lease))
	case r.Lease > 0 && r.Calendar != "":
		ps.add("lease", "%d: %s", r.Lease.Fixed(), errLongLease)
	case r.Lease > 0 && burst > 0 && r.Lease.Fixed() > burst:
		ps.add("lease", "%d is over the burst (%d): a gateway may not hold more than the bucket", r.Lease.Fixed(), burst)
	case r.Lease > 0 && windowed && r.Rate > 0 && r.Lease.Fixed() > r.Rate:
		ps.add("lease", "%d is over the rate (%d), all a %s window holds", r.Lease.Fixed(), r.Rate, alg)
	}

	if r.MaxKeys < 0 {
		ps.add("max_keys", "must be >= 0 (0 means the node's default)")
	}
	switch {
	case alg == AlgConcurrency:
	case r.Cost < 0:
		ps.add("cost", "must be >= 0 (0 or absent means 1)")
	case r.Cost > MaxCost:
		ps.add("cost", "%d is over the maximum of %d", r.Cost, MaxCost)
	case r.Cost > 0 && burst > 0 && r.Cost > burst && (alg == AlgTokenBucket || alg == AlgLeakyBucket):
		ps.add("cost", "%d is over the burst (%d): no request could ever pass", r.Cost, burst)
	}
	if h := r.CostHeader; h != "" && !isToken(h) {
		ps.add("cost_header", "%q is not an HTTP header name", h)
	}
}

func checkID(ps *problems, field, id string) {
	switch {
	case id == "":
		ps.add(field, "must not be empty")
	case len(id) > MaxIDLen:
		ps.add(field, "is %d characters long; at most %d", len(id), MaxIDLen)
	case !validID(id):
		ps.add(field, "%q: may hold only letters, digits and . _ : -", id)
	case id == ReservedID:
		ps.add(field, "%q is reserved: GET /v1/rules/%s is the rules history", id, id)
	}
}

func validID(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// isToken reports whether s is an RFC 9110 token (HTTP method, header name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

func isUpperToken(s string) bool {
	return isToken(s) && strings.ToUpper(s) == s
}

func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// canonicalHeader is the canonical MIME form of a token header name:
// upper case after the start and each '-', lower case elsewhere.
func canonicalHeader(s string) string {
	b := []byte(s)
	upper := true
	for i, c := range b {
		if upper && 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			b[i] = c - 'A' + 'a'
		}
		upper = c == '-'
	}
	return string(b)
}

// checkDescriptor checks the match of a rule with a domain.
func (r Rule) checkDescriptor(ps *problems) {
	m := r.Match
	switch {
	case len(m.Domain) > MaxDomainLen:
		ps.add("match.domain", "is %d bytes long; at most %d", len(m.Domain), MaxDomainLen)
	case !utf8.ValidString(m.Domain):
		ps.add("match.domain", "is not valid UTF-8")
	}
	if m.Route != "" || (m.Method != "" && m.Method != AnyMethod) || (m.Plan != "" && m.Plan != AnyPlan) {
		ps.add("match", "a rule with match.domain matches descriptors, not route, method or plan")
	}
	switch n := len(m.Descriptor); {
	case n == 0:
		ps.add("match.descriptor", "must hold at least one entry ({key: ..., value: ...})")
	case n > MaxDescriptorEntries:
		ps.add("match.descriptor", "holds %d entries; at most %d", n, MaxDescriptorEntries)
	}
	for i, e := range m.Descriptor {
		f := "match.descriptor[" + strconv.Itoa(i) + "]"
		switch {
		case e.Key == "":
			ps.add(f+".key", "must not be empty")
		case len(e.Key) > MaxEntryLen || len(e.Value) > MaxEntryLen:
			ps.add(f, "key and value may be at most %d bytes long", MaxEntryLen)
		case !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value):
			ps.add(f, "key and value must be valid UTF-8")
		case strings.Contains(strings.TrimSuffix(e.Value, "*"), "*"):
			ps.add(f+".value", "%q: \"*\" may only end a value (a prefix wildcard)", e.Value)
		}
	}
	seen := map[string]bool{}
	for i, id := range r.Replaces {
		f := "replaces[" + strconv.Itoa(i) + "]"
		switch {
		case id == r.ID:
			ps.add(f, "a rule cannot replace itself")
		case seen[id]:
			ps.add(f, "%q is named twice", id)
		default:
			checkID(ps, f, id)
		}
		seen[id] = true
	}
}

// checkRate checks the fields of a rule that counts tokens per period or
// window (every algorithm but concurrency).
func (r Rule) checkRate(ps *problems, alg string) {
	if r.Concurrency != 0 {
		ps.add("limit", "only a rule with algorithm: concurrency takes limit (requests in flight); use rate and period")
	}
	if r.PermitTTL != 0 {
		ps.add("permit_ttl", "only a rule with algorithm: concurrency takes permit_ttl")
	}

	if r.Rate <= 0 {
		ps.add("rate", "must be > 0")
	} else if alg == AlgSlidingLog && r.Rate > MaxLogLimit {
		ps.add("rate", "%d is over %d, the most a sliding_log keeps (use sliding_window for larger limits)", r.Rate, MaxLogLimit)
	}
	r.checkCalendar(ps, alg)
	if r.Period <= 0 && r.Calendar == "" {
		ps.add("period", "must be > 0 (a Go duration such as 1s, 1m, 1h; or calendar: day | week | month | year)")
	}
	if r.Burst < 0 {
		ps.add("burst", "must be >= 0 (0 or absent means equal to rate)")
	}
}

// checkConcurrency checks what is particular to a rule with algorithm:
// concurrency: its limit and permit_ttl, and none of the fields it
// refuses (ConcurrencyRefuses). The fields every rule has are checked by
// check.
func (r Rule) checkConcurrency(ps *problems) {
	switch {
	case r.Concurrency <= 0:
		ps.add("limit", "must be > 0 (requests in flight at once per key)")
	case r.Concurrency > MaxConcurrency:
		ps.add("limit", "%d is over %d, the most requests in flight a concurrency rule tracks", r.Concurrency, MaxConcurrency)
	}
	if r.PermitTTL < 0 || r.PermitTTL.D() > MaxPermitTTL {
		ps.add("permit_ttl", "%s: must be from 0 (the default, %s) to %s", r.PermitTTL, Duration(DefaultPermitTTL), Duration(MaxPermitTTL))
	}
	refuse := func(field string, set bool) {
		if set {
			ps.add(field, "a concurrency rule takes limit and permit_ttl, not %s", strings.Join(ConcurrencyRefuses, ", "))
		}
	}
	refuse("rate", r.Rate != 0)
	refuse("period", r.Period != 0)
	refuse("calendar", r.Calendar != "")
	refuse("timezone", r.Timezone != "")
	refuse("burst", r.Burst != 0)
	refuse("lease", r.Lease != LeaseAuto && r.Lease != LeaseOff)
	refuse("cost", r.Cost != 0)
	refuse("cost_header", r.CostHeader != "")
	refuse("shadow", r.Shadow)
	refuse("scope", r.Scope == ScopeGlobal)
	refuse("match.domain", r.Match.Domain != "")
	refuse("reserve", len(r.Reserve) > 0)
	refuse("priority_header", r.PriorityHeader != "")
	refuse("priority_default", r.PriorityDefault != "")
	refuse("durable", r.Durable != "")
}
