// Package rulesraft stores Weir's rule set, overrides and their history in
// a small hashicorp/raft group, and streams changes to watchers.
//
// # What it owns
//
//   - Command: the JSON log entry (apply, delete_rule, set_override,
//     delete_override, rollback, noop).
//   - FSM: the raft.FSM. Apply validates every command again (rules.Validate,
//     Override.ValidateFor); a rejected command returns an error Result and
//     changes nothing. Snapshot/Restore carry the current set and the
//     history (JSON, each version as a delta from the one before).
//   - Store: the I/O shell: bolt log and stable store (DataDir/raft.db), file
//     snapshots (DataDir/snapshots), TCP transport, leader-only Apply,
//     Bootstrap, Reconcile (group membership from gossip), Watch. The TCP
//     stream layer (transport.go) tracks its connections so that Close also
//     ends Raft's per-connection reader goroutines. With Config.ServerTLS
//     and ClientTLS it is mutual TLS (transport_tls.go): one accept
//     goroutine hands each accepted connection to a handshake goroutine
//     (bounded by TLSHandshakeTimeout, ended by Close), and only those that
//     pass reach Raft; refusals are logged.
//   - logger.go: the one adapter from Raft's hclog to *slog.Logger.
//
// The rule model itself (Rule, Override, Set, validation, matching) lives in
// the pure package rules, which gateways link without linking Raft.
//
// # Versions
//
// A version is the Raft log index of the command that made it, so versions
// increase but are not contiguous (configuration changes and rejected
// commands use indexes too). Version 0 is the empty state before the first
// command. Each version records its author, the leader's time stamp (At)
// and a summary, and remembers the version it was made from, which lets a
// watcher tell "the next version" from "a version I missed". The history
// keeps the last Config.HistoryLimit versions; a version holds its rules and
// overrides by pointer, so versions share every rule they did not change.
// Rollback N makes a new version whose rules and overrides are those of N.
//
// Time: the FSM reads no clock. Overrides expire by the time the leader
// stamped into each command (Command.At), and every applied command first
// prunes the overrides expired at its At, so all replicas agree. Readers
// filter with Override.Active(now) between commands.
//
// # Invariants
//
//   - The published *rules.Set and every history version are immutable.
//   - The history is ascending by version; its last entry is the current
//     state. Every member of a group uses the same HistoryLimit, because a
//     rollback's target is looked up in the local history on every replica.
//   - A write is acknowledged only after Raft committed it on a majority and
//     the local FSM applied it. So the leader's version, once it has
//     confirmed its leadership (VerifyLeader) and applied its whole log
//     (else a Barrier), covers every acknowledged write: that is
//     Store.ReadIndex, which a follower waits for (WaitVersion) to answer a
//     read-your-writes read.
//
// # Goroutines
//
// Raft's FSM goroutine calls FSM.Apply, Snapshot and Restore; they take the
// FSM's write lock only to append a version and publish it (atomic pointer),
// then close the "changed" channel to wake waiters. Readers (Current) never
// lock; History, SetAt and watchers take the read lock briefly. Each Watch
// runs its own goroutine that pulls versions from the history, so a slow
// watcher never blocks Apply; one that falls behind the history receives the
// current set and continues from it. Store.Apply waits for a Raft future on
// a tracked goroutine. Every goroutine the Store starts is joined by Close,
// which shuts Raft down first and then closes the transport and bolt store.
// Reconcile calls are serialized by their own mutex, which also guards the
// missing-voter timestamps.
//
// # Inbound requests
//
// With Config.Members, each accepted connection is a checkConn
// (rpccheck.go): Raft's handler goroutine of that connection reads it, and
// each of its reads first takes one whole request off the wire
// (rpcframe.go, bounded), checks who sent it against the connection's
// identity, the members and the latest configuration, and only then hands
// its bytes, unchanged, to Raft. A refused request closes the connection.
package rulesraft
