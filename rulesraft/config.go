package rulesraft

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"
)

// Config configures a Store. Build it from DefaultConfig and set ID and
// DataDir at least.
type Config struct {
	// ID names this member in the Raft group; it must be unique and stable.
	ID string
	// DataDir holds raft.db (log and stable store) and snapshots/.
	DataDir string
	// BindAddr is the Raft TCP listen address; port 0 picks a free port
	// (Store.Addr reports it).
	BindAddr string
	// AdvertiseAddr is the address peers dial, when it differs from
	// BindAddr (needed when binding 0.0.0.0): host:port, where the host may
	// be a name (kept as given and resolved at every dial, so a member
	// whose name moves to a new IP stays reachable) and port 0 means the
	// port BindAddr bound.
	AdvertiseAddr string
	// PeerAddr, when set, tells the current address of a member by ID
	// (node passes what gossip says). Raft dials it instead of the address
	// in the configuration, which is stale for a member that came back
	// elsewhere (and which no leader could update when every member moved
	// at once). With it, Reconcile leaves a member's configured address as
	// it was added (see Reconcile). Members it does not know are dialled at
	// their configured address. It must not block.
	PeerAddr func(id string) (addr string, ok bool)
	// ServerTLS and ClientTLS, when both set, make the Raft transport
	// mutual TLS: an accepted connection must complete a handshake with
	// ServerTLS (which verifies the peer) within TLSHandshakeTimeout or is
	// closed and logged; a dial completes one with ClientTLS. Nil: plain
	// TCP.
	ServerTLS, ClientTLS *tls.Config
	// Hello and CheckHello, when set, authenticate Raft connections
	// (handshake.go): every dialled connection first sends Hello(), and an
	// accepted one is closed unless CheckHello passes what its peer sent.
	// Node passes proofs derived from the gossip keyring. Both must not
	// block. With TLS (ServerTLS, ClientTLS) they are not used: the
	// certificates authenticate the connection. CheckHello returns the
	// node id the hello proves.
	Hello      func() []byte
	CheckHello func(hello []byte) (id string, ok bool)
	// PeerID, with TLS, names the node whose certificate a connection's
	// peer presented (ok false: none; its requests are then refused).
	PeerID func(tls.ConnectionState) (id string, ok bool)
	// Members, when set, turns on the checks of every inbound Raft request
	// (rpccheck.go): its sender must be the node its connection proved
	// (PeerID or CheckHello), an admitted member at the address gossip
	// gives it, and for AppendEntries, InstallSnapshot and TimeoutNow in
	// the latest configuration (TimeoutNow: the leader). A refused request
	// closes its connection; RefusedRPC (if set, must not block) counts it.
	Members    Members
	RefusedRPC func()
	// MemberFeatures, when set, returns the features (rules.Features)
	// each live member advertises, by member id. Apply on the leader then
	// refuses, with ErrUnsupported, a command whose rules use a feature
	// some member lacks (features.go). It must not block.
	MemberFeatures func() map[string][]string

	// HistoryLimit is how many versions are kept for history, diff and
	// rollback. It must be equal on every member of the group.
	HistoryLimit int
	// ApplyTimeout bounds Apply, Barrier and membership changes when the
	// context has no earlier deadline.
	ApplyTimeout time.Duration

	// Raft timing, sized for a LAN.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// CommitTimeout is Raft's: how long the leader, with nothing new to
	// send, waits (randomized to twice this) before an empty AppendEntries
	// that tells a follower the commit index. 0 is HeartbeatTimeout/2
	// (250 ms by default; hashicorp's own is 50 ms). It does not delay a
	// write reaching the followers: Apply sends the commit index on at
	// once (nudge). It bounds how long a follower that missed an
	// AppendEntries waits for the next attempt.
	CommitTimeout time.Duration
	// SnapshotThreshold is how many log entries trigger a snapshot, checked
	// every SnapshotInterval; TrailingLogs entries stay after one.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64

	// VoterGrace is how long a voter may be missing from Reconcile's alive
	// list before a healthy non-voter is promoted in its place.
	VoterGrace time.Duration

	// Logger receives Store and Raft logs; nil discards them.
	Logger *slog.Logger
	// Clock stamps commands and times missing voters; nil means time.Now.
	Clock func() time.Time
}

// DefaultConfig returns the defaults: loopback with a free port, 1,000
// versions of history, LAN timing (500ms heartbeat and election, 250ms
// leader lease) and a 30s voter grace.
func DefaultConfig() Config {
	return Config{
		BindAddr:           "127.0.0.1:0",
		HistoryLimit:       DefaultHistoryLimit,
		ApplyTimeout:       5 * time.Second,
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		SnapshotThreshold:  1024,
		SnapshotInterval:   30 * time.Second,
		TrailingLogs:       1024,
		VoterGrace:         30 * time.Second,
	}
}

// Validate reports the first problem with c, wrapping ErrConfig.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.ID == "":
		return bad("ID is empty")
	case c.DataDir == "":
		return bad("DataDir is empty")
	case c.HistoryLimit < 1:
		return bad("HistoryLimit %d must be at least 1", c.HistoryLimit)
	case c.ApplyTimeout <= 0:
		return bad("ApplyTimeout must be positive")
	case c.HeartbeatTimeout < 5*time.Millisecond:
		return bad("HeartbeatTimeout %s is below 5ms", c.HeartbeatTimeout)
	case c.ElectionTimeout < c.HeartbeatTimeout:
		return bad("ElectionTimeout %s is below HeartbeatTimeout %s", c.ElectionTimeout, c.HeartbeatTimeout)
	case c.LeaderLeaseTimeout < 5*time.Millisecond || c.LeaderLeaseTimeout > c.HeartbeatTimeout:
		return bad("LeaderLeaseTimeout %s must be between 5ms and HeartbeatTimeout", c.LeaderLeaseTimeout)
	case c.CommitTimeout < 0 || c.CommitTimeout > 0 && c.CommitTimeout < time.Millisecond:
		return bad("CommitTimeout %s must be 0 (HeartbeatTimeout/2) or at least 1ms", c.CommitTimeout)
	case c.SnapshotThreshold < 1:
		return bad("SnapshotThreshold must be at least 1")
	case c.SnapshotInterval < 5*time.Millisecond:
		return bad("SnapshotInterval %s is below 5ms", c.SnapshotInterval)
	case c.VoterGrace <= 0:
		return bad("VoterGrace must be positive")
	}
	bind, err := net.ResolveTCPAddr("tcp", c.BindAddr)
	if err != nil {
		return bad("BindAddr %q: %v", c.BindAddr, err)
	}
	if c.AdvertiseAddr == "" {
		if bind.IP == nil || bind.IP.IsUnspecified() {
			return bad("BindAddr %q listens on every address; set AdvertiseAddr", c.BindAddr)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(c.AdvertiseAddr)
	if err != nil {
		return bad("AdvertiseAddr %q: %v", c.AdvertiseAddr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return bad("AdvertiseAddr %q needs a host peers can reach", c.AdvertiseAddr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return bad("AdvertiseAddr %q: bad port", c.AdvertiseAddr)
	}
	return nil
}
