package rulesraft

import "errors"

// Sentinel errors. Callers test them with errors.Is; the returned errors wrap
// them with detail.
var (
	// ErrNotLeader: the call needs the Raft leader and this node is not it
	// (Leader tells who is).
	ErrNotLeader = errors.New("rulesraft: not the leader")
	// ErrNotFound: the named rule, override or version does not exist.
	ErrNotFound = errors.New("rulesraft: not found")
	// ErrVersionGone: the version is older than the kept history.
	ErrVersionGone = errors.New("rulesraft: version no longer in history")
	// ErrInvalid: the command or its rules failed validation; nothing changed.
	ErrInvalid = errors.New("rulesraft: invalid command")
	// ErrClosed: the Store is closed or shutting down.
	ErrClosed = errors.New("rulesraft: store closed")
	// ErrAlreadyBootstrapped: Bootstrap found existing Raft state.
	ErrAlreadyBootstrapped = errors.New("rulesraft: already bootstrapped")
	// ErrTimeout: Raft did not accept or commit the command in time; the
	// outcome may be unknown.
	ErrTimeout = errors.New("rulesraft: timeout")
	// ErrConfig: Config.Validate rejected the configuration.
	ErrConfig = errors.New("rulesraft: invalid config")
)
