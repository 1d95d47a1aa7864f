package rulesraft

import (
	"errors"

	"github.com/weirlimit/weir/limit"
)

// Sentinel errors. Callers test them with errors.Is; the returned errors wrap
// them with detail. Each that an edge reports is also of a limit kind
// (ErrNotFound is limit.ErrNotFound, ...), which the edges map to a status.
var (
	// ErrNotLeader: the call needs the Raft leader and this node is not it
	// (Leader tells who is).
	ErrNotLeader = limit.Errorf(limit.ErrNotLeader, "not the leader")
	// ErrNotFound: the named rule, override or version does not exist.
	// Its text ends what users read ("rule \"x\" not found"), so it names
	// no package.
	ErrNotFound = limit.Errorf(limit.ErrNotFound, "not found")
	// ErrVersionGone: the version is older than the kept history
	// ("version 3 no longer in history").
	ErrVersionGone = limit.Errorf(limit.ErrNotFound, "no longer in history")
	// ErrInvalid: the command or its rules failed validation; nothing changed.
	ErrInvalid = limit.Errorf(limit.ErrInvalid, "invalid rules change")
	// ErrUnsupported: the command's rules use a feature (a rule field or
	// algorithm newer than the first release) that a live member does not
	// support; nothing changed.
	ErrUnsupported = limit.Errorf(limit.ErrConflict, "feature not supported by every member")
	// ErrClosed: the Store is closed or shutting down.
	ErrClosed = limit.Errorf(limit.ErrClosed, "rules store closed")
	// ErrAlreadyBootstrapped: Bootstrap found existing Raft state.
	ErrAlreadyBootstrapped = errors.New("rules store already bootstrapped")
	// ErrTimeout: Raft did not accept or commit the command in time; the
	// outcome may be unknown.
	ErrTimeout = limit.Errorf(limit.ErrUnavailable, "rules store timed out")
	// ErrOutcomeUnknown: the leader lost leadership while the command was
	// in its log but not yet committed; the next leader may still commit
	// it. Unlike ErrNotLeader (refused before the log, safe to send again),
	// sending it again may apply it twice: read first.
	ErrOutcomeUnknown = limit.Errorf(limit.ErrUnavailable, "outcome unknown")
	// ErrConfig: Config.Validate rejected the configuration.
	ErrConfig = errors.New("invalid rules store config")
)
