package rulesraft

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// Command operations.
const (
	// OpApply upserts Rules atomically; with ReplaceAll the rule set becomes
	// exactly Rules (overrides of rules that disappear are dropped).
	OpApply = "apply"
	// OpDeleteRule deletes rule ID and its overrides.
	OpDeleteRule = "delete_rule"
	// OpSetOverride creates or replaces Override (keyed by rule and key).
	OpSetOverride = "set_override"
	// OpDeleteOverride deletes the override for Rule and Key.
	OpDeleteOverride = "delete_override"
	// OpRollback restores rules and overrides as of Version, as a new version.
	OpRollback = "rollback"
	// OpNoop changes nothing but still prunes overrides expired at At; it
	// makes a new version only when that pruning removed something.
	OpNoop = "noop"
)

// Command is one entry of the rules Raft log, JSON encoded. Only the fields
// of its Op are read. At is stamped by the leader (Store.Apply) and is the
// only time the FSM uses, so every replica decides expiry alike.
type Command struct {
	Op         string          `json:"op"`
	Rules      []rules.Rule    `json:"rules,omitempty"`
	ReplaceAll bool            `json:"replace_all,omitempty"`
	ID         string          `json:"id,omitempty"`
	Override   *rules.Override `json:"override,omitempty"`
	Key        string          `json:"key,omitempty"`
	Rule       string          `json:"rule,omitempty"`
	Version    uint64          `json:"version,omitempty"`
	Author     string          `json:"author,omitempty"`
	At         time.Time       `json:"at"`
}

// Result is what FSM.Apply returns for a command (the value of
// raft.ApplyFuture.Response on the leader): the version the command created
// (the current version when it created none) or why it was rejected.
type Result struct {
	Version uint64
	Err     error
}

func encodeCommand(c Command) ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrInvalid, err)
	}
	return b, nil
}

func decodeCommand(b []byte) (Command, error) {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return Command{}, fmt.Errorf("%w: decode: %w", ErrInvalid, err)
	}
	return c, nil
}
