package opsapi

import (
	"time"

	"github.com/weirlimit/weir/node/events"
)

// Snapshot is what the dashboard shows, as GET /v1/ops/snapshot answers
// it: the cluster as the answering node sees it, and the per-node parts
// (rates, hot keys, events, gateways) of every member that answered
// (scope=cluster) or of this node alone (scope=local).
type Snapshot struct {
	Node     string         `json:"node"`
	Time     time.Time      `json:"time"`
	Scope    string         `json:"scope"`
	Cluster  *Cluster       `json:"cluster,omitempty"`
	Rules    *Rules         `json:"rules,omitempty"`
	Rates    []RuleRate     `json:"rates"`
	HotKeys  []HotKey       `json:"hot_keys"`
	Events   []events.Event `json:"events"`
	Gateways []Gateway      `json:"gateways"`
	// Permits is the concurrency permits in use, by rule (rules holding
	// none are left out), summed over the members that answered.
	Permits []RulePermits `json:"permits"`
	// Answered and Failed name the members whose parts are (not) included.
	Answered []string `json:"answered"`
	Failed   []string `json:"failed,omitempty"`
}

// Cluster is membership, the ring and the Raft group.
type Cluster struct {
	Leader            string   `json:"leader"`
	Term              uint64   `json:"term"`
	AppliedIndex      uint64   `json:"applied_index"`
	LastIndex         uint64   `json:"last_index"`
	RaftState         string   `json:"raft_state"`
	RingVersion       uint64   `json:"ring_version"`
	PartitionCount    uint32   `json:"partition_count"`
	ReplicationFactor uint32   `json:"replication_factor"`
	Members           []Member `json:"members"`
}

// Member is one node of the cluster.
type Member struct {
	ID              string `json:"id"`
	State           string `json:"state"`
	HTTPAddr        string `json:"http_addr"`
	PartitionsOwned uint32 `json:"partitions_owned"`
	ReplicasHeld    uint32 `json:"replicas_held"`
	RaftRole        string `json:"raft_role"`
}

// Rules is the rule set and its last change.
type Rules struct {
	Version    uint64      `json:"version"`
	Rules      []RuleInfo  `json:"rules"`
	LastChange *RuleChange `json:"last_change,omitempty"`
}

// RuleInfo is one rule as the dashboard lists it.
type RuleInfo struct {
	ID        string `json:"id"`
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
	Rate      int64  `json:"rate"`
	Period    string `json:"period"`
	Burst     int64  `json:"burst"`
	Shadow    bool   `json:"shadow,omitempty"`
	// Concurrency is a concurrency rule's limit: requests in flight per key.
	Concurrency int64 `json:"limit,omitempty"`
	// Overrides counts the rule's overrides; OverrideSample lists the
	// first MaxOverrideSample of them (by key).
	Overrides      int            `json:"overrides"`
	OverrideSample []OverrideInfo `json:"override_sample,omitempty"`
}

// MaxOverrideSample is how many overrides a RuleInfo lists.
const MaxOverrideSample = 5

// OverrideInfo is one override as the dashboard lists it: Limit is
// "blocked" or the key's rate and burst.
type OverrideInfo struct {
	Key       string    `json:"key"`
	Limit     string    `json:"limit"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// RuleChange is the newest rules version: who made it and what changed.
type RuleChange struct {
	Version uint64    `json:"version"`
	Author  string    `json:"author"`
	At      time.Time `json:"at"`
	Summary string    `json:"summary"`
	Diff    []string  `json:"diff"`
}

// RuleRate is one rule's decisions per second over the last minutes, one
// point per RateStep (oldest first), counted where checks entered the
// cluster (gateway-side decisions included once reported).
type RuleRate struct {
	Rule   string      `json:"rule"`
	Points []RatePoint `json:"points"`
}

// RatePoint is the decisions per second during the step ending at T.
type RatePoint struct {
	T       int64   `json:"t"` // unix seconds, a multiple of the step
	Allowed float64 `json:"allowed"`
	Denied  float64 `json:"denied"`
	Error   float64 `json:"error"`
}

// HotKey is one of a rule's hottest keys: Rate is the estimated checks per
// second, at most ErrRate above the true one.
type HotKey struct {
	Rule    string  `json:"rule"`
	Key     string  `json:"key"`
	Rate    float64 `json:"rate"`
	ErrRate float64 `json:"err_rate"`
}

// Gateway is what one gateway reported to this node (or to any member,
// merged): its decisions made without the owner.
type Gateway struct {
	ID         string    `json:"id"`
	Nodes      []string  `json:"nodes"`
	LastReport time.Time `json:"last_report"`
	Local      uint64    `json:"local"`       // answered from a lease or the blocked-until cache
	FailOpen   uint64    `json:"fail_open"`   // allowed by the fail-open fallback
	FailClosed uint64    `json:"fail_closed"` // denied by fail_mode closed
}

// RulePermits is the concurrency permits a rule's keys hold now (on one
// node's counters, or summed over the cluster).
type RulePermits struct {
	Rule  string `json:"rule"`
	InUse int64  `json:"in_use"`
}
