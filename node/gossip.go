package node

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/weirlimit/weir/node/clusterview"
)

// memberMeta is what a node gossips about itself.
type memberMeta struct {
	GRPC    string `json:"g"`
	HTTP    string `json:"h"`
	Raft    string `json:"r"`
	Leaving bool   `json:"l,omitempty"` // handing partitions off; not in the ring
	// Gateways watching rules on this node (summed over members for the
	// fail-open share).
	Gateways uint32 `json:"w,omitempty"`
	// Boot identifies this run of the process (random at start), so a
	// member that comes back after it was declared dead is known to have
	// lived through a network split (same Boot) rather than restarted with
	// no counters (a new Boot).
	Boot uint64 `json:"b,omitempty"`
	// Proof ties the member to the gossip keyring (peerauth.MemberProof,
	// base64); members without a valid one are ignored when a key is set.
	Proof string `json:"p,omitempty"`
	// Features are the rule features (rules.Features) this member's binary
	// supports, comma-separated; an older binary sends none.
	Features string `json:"f,omitempty"`
}

// member is one node as seen through gossip (clusterview's record).
type member = clusterview.Member

// delegate implements memberlist's Delegate and EventDelegate. Callbacks
// never block: events only signal the cluster loop.
type delegate struct{ n *Node }

func (d delegate) NodeMeta(limit int) []byte {
	m := d.n.meta
	m.Leaving = d.n.leaving.Load()
	m.Gateways = d.n.api.Gateways()
	m.Proof = d.n.sec.MemberProof()
	b, _ := json.Marshal(m)
	if len(b) > limit {
		return nil
	}
	return b
}
func (d delegate) NotifyMsg([]byte)                           {}
func (d delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d delegate) LocalState(join bool) []byte                { return nil }
func (d delegate) MergeRemoteState(buf []byte, join bool)     {}
func (d delegate) NotifyJoin(m *memberlist.Node) {
	d.n.remember(m, false)
	d.n.signalChanged()
}
func (d delegate) NotifyLeave(m *memberlist.Node) {
	d.n.remember(m, true)
	d.n.signalChanged()
}
func (d delegate) NotifyUpdate(m *memberlist.Node) {
	d.n.remember(m, false)
	d.n.signalChanged()
}

// NotifyConflict (memberlist's ConflictDelegate) is called when gossip
// holds a record of a member at another address than a message about it.
// About this node, that means it came back elsewhere: reconnectLoop
// re-announces it until the old record is dead.
// Logged at most every 10 s (memberlist calls it on every gossip round).
func (d delegate) NotifyConflict(existing, other *memberlist.Node) {
	now := time.Now().UnixNano()
	if existing.Name == d.n.cfg.ID {
		d.n.selfConflict.Store(now)
	}
	if last := d.n.conflictLogged.Load(); now-last > int64(10*time.Second) && d.n.conflictLogged.CompareAndSwap(last, now) {
		d.n.log.Warn("gossip has a member at two addresses; the old one is taken over once declared dead (a node that came back elsewhere, or two nodes with one id)",
			"member", existing.Name, "known", existing.Address(), "other", other.Address())
	}
}

func (n *Node) signalChanged() {
	select {
	case n.changed <- struct{}{}:
	default:
	}
}

// slogWriter adapts memberlist's *log.Logger output to slog (debug level;
// memberlist's own "[WARN]" lines become warnings, "[ERR]" errors, except
// "Conflicting address": a member that came back at another address, which
// it logs on every gossip round until the old address is declared dead,
// and "Decrypt packet failed": a packet without this cluster's key, which
// anyone may send as often as they like, logged at most every 10 s).
type slogWriter struct {
	n             *Node
	undecryptable *atomic.Int64 // unix ns an undecryptable packet was last logged
}

func (w slogWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	switch {
	case strings.Contains(s, "Conflicting address"):
		w.n.log.Debug(s, "component", "gossip")
	case strings.Contains(s, "Decrypt packet failed"):
		now := time.Now().UnixNano()
		if last := w.undecryptable.Load(); now-last > int64(10*time.Second) && w.undecryptable.CompareAndSwap(last, now) {
			w.n.log.Warn(s+" (gossip without this cluster's key, dropped; logged at most every 10 s)", "component", "gossip")
		}
	case strings.Contains(s, "[ERR]"):
		w.n.log.Error(s, "component", "gossip")
	case strings.Contains(s, "[WARN]"):
		w.n.log.Warn(s, "component", "gossip")
	default:
		w.n.log.Debug(s, "component", "gossip")
	}
	return len(p), nil
}

var _ io.Writer = slogWriter{}

// startMemberlist starts gossip on GossipAddr, advertising advertiseIP
// ("" lets memberlist pick: the bind address, or the first private IP when
// it binds every address) with the bound port.
func (n *Node) startMemberlist(advertiseIP string) error {
	host, port, err := splitHostPort(n.cfg.GossipAddr)
	if err != nil {
		return fmt.Errorf("node: gossip address: %w", err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = n.cfg.ID
	mc.BindAddr = host
	mc.ProbeInterval = n.cfg.GossipProbeInterval
	mc.ProbeTimeout = n.cfg.GossipProbeTimeout
	mc.GossipInterval = n.cfg.GossipInterval
	mc.SuspicionMult = n.cfg.GossipSuspicionMult
	mc.PushPullInterval = 5 * time.Second
	mc.TCPTimeout = 2 * time.Second
	// A member declared dead may come back at once at another address (a
	// rescheduled pod keeps its id): memberlist refuses a known name at a
	// new address unless the old record is dead and older than this.
	mc.DeadNodeReclaimTime = time.Millisecond
	mc.Delegate = delegate{n}
	mc.Events = delegate{n}
	mc.Conflict = delegate{n}
	mc.Logger = log.New(slogWriter{n: n, undecryptable: new(atomic.Int64)}, "", 0)
	mc.Label = n.cfg.ClusterName // gossip from another cluster is dropped
	if kr := n.sec.Keyring(); kr != nil {
		mc.Keyring = kr
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
		switch n.cfg.GossipUpgrade { // moving a keyless cluster onto the key
		case GossipUpgradePlain:
			mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = false, false
		case GossipUpgradeEncrypt:
			mc.GossipVerifyIncoming = false
		}
	}
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: mc.Logger})
	if err != nil {
		return fmt.Errorf("node: gossip transport: %w", err)
	}
	if port == 0 {
		port = nt.GetAutoBindPort()
	}
	mc.BindPort, mc.AdvertisePort = port, port
	mc.AdvertiseAddr = advertiseIP
	mc.Transport = nt
	if n.cfg.WrapGossip != nil {
		mc.Transport = n.cfg.WrapGossip(nt)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = nt.Shutdown()
		return fmt.Errorf("node: gossip: %w", err)
	}
	n.ml = ml
	return nil
}

func stateName(s memberlist.NodeStateType) string {
	switch s {
	case memberlist.StateAlive:
		return "alive"
	case memberlist.StateSuspect:
		return "suspect"
	case memberlist.StateDead:
		return "dead"
	case memberlist.StateLeft:
		return "left"
	}
	return "unknown"
}
