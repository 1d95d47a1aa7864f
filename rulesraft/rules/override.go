package rules

import (
	"time"

	"github.com/weirlimit/weir/bucket"
)

// Validate checks an override on its own: key non-empty and at most
// MaxOverrideKeyLen bytes, rule a valid id, and either Block or Rate > 0
// (not both); Burst >= 0 (0 means equal to Rate).
func (o Override) Validate() error {
	var ps problems
	o.check(&ps)
	return errOf(ps.list)
}

func (o Override) check(ps *problems) {
	switch {
	case o.Key == "":
		ps.add("key", "must not be empty")
	case len(o.Key) > MaxOverrideKeyLen:
		ps.add("key", "is %d bytes long; at most %d", len(o.Key), MaxOverrideKeyLen)
	}
	checkID(ps, "rule", o.Rule)
	switch {
	case o.Block && o.Rate != 0:
		ps.add("rate", "must be absent when block is set (a blocked key has no rate)")
	case !o.Block && o.Rate <= 0:
		ps.add("rate", "must be > 0 (set block: true to deny the key)")
	}
	if o.Burst < 0 {
		ps.add("burst", "must be >= 0 (0 or absent means equal to rate)")
	}
}

// ValidateFor checks o against the rule it names: o must be valid on its
// own, name r, and give a limit the bucket package accepts for r's
// algorithm (a sliding_log override may not exceed MaxLogLimit).
func (o Override) ValidateFor(r Rule) error {
	var ps problems
	o.check(&ps)
	if len(ps.list) > 0 {
		return errOf(ps.list)
	}
	if o.Rule != r.ID {
		ps.add("rule", "%q does not name rule %q", o.Rule, r.ID)
	} else if lim, blocked := Effective(&r, &o); !blocked {
		if err := lim.Validate(MaxLogLimit); err != nil {
			ps.add("rate", "rejected for rule %q: %v", r.ID, err)
		}
	}
	return errOf(ps.list)
}

// Active reports whether the override is in force at now. A zero ExpiresAt
// never expires; otherwise it is active strictly before ExpiresAt.
func (o Override) Active(now time.Time) bool {
	return o.ExpiresAt.IsZero() || now.Before(o.ExpiresAt)
}

// Effective returns the limit a rule enforces for a key given its override
// (nil for none). The override's rate and burst replace the rule's, a burst
// of 0 meaning equal to the rate; period and algorithm stay the rule's.
// blocked reports a Block override: the key is denied whatever the limit.
// Effective does not look at expiry or check that o names r; callers pass
// only an override that is Active and belongs to r.
func Effective(r *Rule, o *Override) (lim bucket.Limit, blocked bool) {
	lim = r.Limit()
	if o == nil {
		return lim, false
	}
	if o.Block {
		return lim, true
	}
	lim.Rate = o.Rate
	lim.Burst = o.Burst
	if lim.Burst == 0 {
		lim.Burst = o.Rate
	}
	return lim, false
}
