package security

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/limit"
)

// ErrConfig reports an invalid node configuration (node.ErrConfig is this
// error).
var ErrConfig = errors.New("node: invalid config")

// KeyringFile is where a node keeps its gossip keyring in its data dir
// once `weir keyring` changed it, so a restart keeps the change.
const KeyringFile = "gossip-keyring"

// Config.GossipUpgrade values.
const (
	GossipUpgradePlain   = "plain"
	GossipUpgradeEncrypt = "encrypt"
)

// Settings are the security settings of a node's configuration, as its
// validation and LoadKeys read them. LoadKeys may rewrite Keys and the
// addresses.
type Settings struct {
	ClusterName     string
	TLS             bool // TLS files are configured
	Keys            [][]byte
	KeysWritten     time.Time // when Keys were written (zero: unknown)
	Upgrade         string    // Config.GossipUpgrade
	HTTPReadTimeout time.Duration
	DataDir         string
	// The peer-facing addresses: bound to loopback when peers cannot prove
	// who they are.
	GossipAddr, RaftAddr, Advertise string
}

// Validate checks the security settings.
func (s Settings) Validate() error {
	if s.ClusterName == "" || len(s.ClusterName) > 128 {
		return fmt.Errorf("%w: cluster name must be 1 to 128 bytes", ErrConfig)
	}
	for i, k := range s.Keys {
		if len(k) != peerauth.KeySize {
			return fmt.Errorf("%w: gossip key %d is %d bytes, want %d", ErrConfig, i+1, len(k), peerauth.KeySize)
		}
	}
	if s.HTTPReadTimeout < 0 {
		return fmt.Errorf("%w: http read timeout must be >= 0", ErrConfig)
	}
	switch s.Upgrade {
	case "":
	case GossipUpgradePlain, GossipUpgradeEncrypt:
		if !s.TLS {
			return fmt.Errorf("%w: gossip upgrade %q is for a TLS cluster moving onto a gossip key (without TLS, keyless nodes gossip on loopback only)", ErrConfig, s.Upgrade)
		}
	default:
		return fmt.Errorf("%w: gossip upgrade %q: want %q or %q", ErrConfig, s.Upgrade, GossipUpgradePlain, GossipUpgradeEncrypt)
	}
	return nil
}

// errNoGossipKey is a node told to gossip on an address other hosts reach
// without a gossip key: anyone who can send it a UDP packet could forge
// membership (declare members dead, split the cluster).
func errNoGossipKey(addr string) error {
	return fmt.Errorf("%w: gossip on %s (not loopback) needs a gossip key, or anyone who reaches the port can forge membership: "+
		"make one with `weir keyring generate --out FILE` (`weir tls cert create --node ...` writes DIR/gossip-keyring too) "+
		"and start every node with --gossip-key-file FILE, or bind --gossip to 127.0.0.1", ErrConfig, addr)
}

// peersAuthenticated reports whether the node's peers prove they are nodes
// of the cluster: with a gossip key, or with TLS (a node certificate).
func (s Settings) peersAuthenticated() bool { return len(s.Keys) > 0 || s.TLS }

// LoadKeys loads the keyring (the one persisted in the data dir wins over
// s.Keys unless they were written later) and, when peers cannot prove who
// they are, binds the peer-facing listeners (gossip, Raft) to loopback.
// With TLS and no key, gossip must bind loopback: it refuses another
// address (errNoGossipKey). It returns the adjusted settings and the
// keyring (nil without a gossip key).
func LoadKeys(s Settings, log *slog.Logger) (Settings, *memberlist.Keyring, error) {
	path := filepath.Join(s.DataDir, KeyringFile)
	switch keys, err := peerauth.ReadKeyringFile(path); {
	case err == nil:
		st, serr := os.Stat(path)
		switch {
		case len(s.Keys) == 0:
			log.Warn("gossip keyring found in the data dir but no gossip key configured: using the data dir's", "file", path)
			s.Keys = keys
		case serr == nil && !s.KeysWritten.IsZero() && s.KeysWritten.After(st.ModTime()):
			log.Warn("the configured gossip keyring is newer than the one persisted in the data dir: using the configured one", "file", path)
		default:
			log.Info("using the gossip keyring persisted in the data dir (written by weir keyring); the configured keys are older", "file", path)
			s.Keys = keys
		}
	case !errors.Is(err, os.ErrNotExist):
		return s, nil, fmt.Errorf("node: %w", err)
	}
	if !s.peersAuthenticated() {
		changed := false
		for _, a := range []*string{&s.GossipAddr, &s.RaftAddr} {
			if l, ok := loopbackAddr(*a); ok {
				*a, changed = l, true
			}
		}
		if s.Advertise != "" && !IsLoopbackHost(s.Advertise) {
			s.Advertise, changed = "", true
		}
		if changed {
			log.Warn("no gossip key and no TLS: gossip and Raft listen on loopback only and peer calls are accepted from loopback only; set --gossip-key-file to form a cluster across machines",
				"gossip", s.GossipAddr, "raft", s.RaftAddr)
		} else {
			log.Info("no gossip key and no TLS: peer-facing ports are on loopback only")
		}
		return s, nil, nil
	}
	if len(s.Keys) == 0 { // TLS without a gossip key: only on loopback (certificates cannot sign UDP gossip)
		if host, _, err := net.SplitHostPort(s.GossipAddr); err != nil || !IsLoopbackHost(host) {
			return s, nil, errNoGossipKey(s.GossipAddr)
		}
		if s.Upgrade != "" {
			return s, nil, fmt.Errorf("%w: gossip upgrade %q needs the gossip key (--gossip-key-file)", ErrConfig, s.Upgrade)
		}
		return s, nil, nil
	}
	kr, err := memberlist.NewKeyring(s.Keys, s.Keys[0])
	if err != nil {
		return s, nil, fmt.Errorf("%w: gossip keyring: %v", ErrConfig, err)
	}
	return s, kr, nil
}

// loopbackAddr returns addr with a loopback host, and whether that changed
// it.
func loopbackAddr(addr string) (string, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || IsLoopbackHost(host) {
		return addr, false
	}
	return net.JoinHostPort("127.0.0.1", port), true
}

// IsLoopbackHost reports whether host is localhost or a loopback IP.
func IsLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// ErrNoKeyring answers keyring calls to a node without a gossip key.
var ErrNoKeyring = limit.Errorf(limit.ErrInvalid, "node: gossip encryption is off (no --gossip-key-file): there is no keyring to change")

// Keys is this node's keyring: its primary key and every key
// (ErrNoKeyring without a gossip key).
func (g *Guard) Keys() (primary []byte, keys [][]byte, err error) {
	if g.keyring == nil {
		return nil, nil, ErrNoKeyring
	}
	return g.keyring.GetPrimaryKey(), g.keyring.GetKeys(), nil
}

// ChangeKeyring applies one change (install, use or remove key) to this
// node's keyring and persists the result in the data dir. After use, the
// node gossips its member proof again, signed with the new primary.
func (g *Guard) ChangeKeyring(op string, key []byte) error {
	if g.keyring == nil {
		return ErrNoKeyring
	}
	g.keyringMu.Lock()
	defer g.keyringMu.Unlock()
	var err error
	switch op {
	case "install":
		err = g.keyring.AddKey(key)
	case "use":
		err = g.keyring.UseKey(key)
	case "remove":
		err = g.keyring.RemoveKey(key)
	default:
		return limit.Errorf(limit.ErrNotFound, "no keyring operation %q: want install, use or remove", op)
	}
	if err != nil {
		return limit.Errorf(limit.ErrConflict, "node %s: keyring %s: %v", g.cfg.ID, op, err)
	}
	if err := peerauth.WriteKeyringFile(filepath.Join(g.cfg.DataDir, KeyringFile), g.keyring.GetPrimaryKey(), g.keyring.GetKeys()); err != nil {
		return fmt.Errorf("node %s: keyring %s applied but not persisted: %w", g.cfg.ID, op, err)
	}
	g.log.Info("gossip keyring changed", "op", op, "key", peerauth.Fingerprint(key))
	if op == "use" {
		if err := g.members.Announce(); err != nil {
			g.log.Warn("gossip update after a new primary key", "err", err)
		}
	}
	return nil
}

// Keyring is the gossip keyring memberlist encrypts with (nil without a
// gossip key). Change it through ChangeKeyring only.
func (g *Guard) Keyring() *memberlist.Keyring { return g.keyring }
