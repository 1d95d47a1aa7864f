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
// every rule but one with durable: off.
func (r Rule) IsDurable() bool { return r.Durable != DurableOff }
