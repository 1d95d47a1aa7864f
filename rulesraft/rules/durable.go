package rules

// FeatureDurable: the durable field (durable: off). Counters are durable
// by default; only opting out is new to a member.
const FeatureDurable = "durable"

// Values of Rule.Durable.
const (
	DurableOn  = "on"
	DurableOff = "off"
)

// IsDurable reports whether the rule's long-lived counters (an idle
// deadline an hour or more away) are written to the nodes' data dirs:
// every rule but one with durable: off and a concurrency rule (its permits
// last at most permit_ttl, and the file holds no permit lists).
func (r Rule) IsDurable() bool {
	return r.Durable != DurableOff && canonicalAlgorithm(r.Algorithm) != AlgConcurrency
}
