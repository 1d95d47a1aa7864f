package membership

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Meta is what a node gossips about itself.
type Meta struct {
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
	// Shape is the member's ring shape (ring.Config.Shape); one of another
	// shape is refused (clusterview.ShapeGuard).
	Shape string `json:"s,omitempty"`
	// InGroup: the member is in the Raft group's configuration
	// (bootstrapped it or was added). A node with --bootstrap-expect that
	// sees such a member joins that group rather than bootstrapping one.
	InGroup bool `json:"v,omitempty"`
}

// delegate implements memberlist's Delegate and EventDelegate. Callbacks
// never block: events only signal the cluster loop.
type delegate struct{ c *Cluster }

func (d delegate) NodeMeta(limit int) []byte {
	m := d.c.meta
	m.Leaving = d.c.leaving.Load()
	m.Gateways = d.c.deps.Gateways.Gateways()
	m.Proof = d.c.deps.Prover.MemberProof()
	m.InGroup = d.c.inGroup.Load()
	b, _ := json.Marshal(m)
	if len(b) > limit {
		return nil
	}
	return b
}

// NotifyAlive (memberlist's AliveDelegate) and NotifyMerge (its
// MergeDelegate, at a join) refuse a member of another ring shape.
func (d delegate) NotifyAlive(m *memberlist.Node) error {
	var meta Meta
	_ = json.Unmarshal(m.Meta, &meta)
	return d.c.shape.Check(m.Name, meta.Shape)
}
func (d delegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, m := range peers {
		if err := d.NotifyAlive(m); err != nil {
			return err
		}
	}
	return nil
}
func (d delegate) NotifyMsg([]byte)                           {}
func (d delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d delegate) LocalState(join bool) []byte                { return nil }
func (d delegate) MergeRemoteState(buf []byte, join bool)     {}
func (d delegate) NotifyJoin(m *memberlist.Node) {
	d.c.remember(m, false)
	d.c.Refresh()
}
func (d delegate) NotifyLeave(m *memberlist.Node) {
	d.c.remember(m, true)
	d.c.Refresh()
}
func (d delegate) NotifyUpdate(m *memberlist.Node) {
	d.c.remember(m, false)
	d.c.Refresh()
}

// NotifyConflict (memberlist's ConflictDelegate) is called when gossip
// holds a record of a member at another address than a message about it.
// About this node, that means it came back elsewhere: reconnectLoop
// re-announces it until the old record is dead.
// Logged at most every 10 s (memberlist calls it on every gossip round).
func (d delegate) NotifyConflict(existing, other *memberlist.Node) {
	now := time.Now().UnixNano()
	if existing.Name == d.c.cfg.ID {
		d.c.selfConflict.Store(now)
	}
	if last := d.c.conflictLogged.Load(); now-last > int64(10*time.Second) && d.c.conflictLogged.CompareAndSwap(last, now) {
		d.c.log.Warn("gossip has a member at two addresses; the old one is taken over once declared dead (a node that came back elsewhere, or two nodes with one id)",
			"member", existing.Name, "known", existing.Address(), "other", other.Address())
	}
}

// slogWriter adapts memberlist's *log.Logger output to slog (debug level;
// memberlist's own "[WARN]" lines become warnings, "[ERR]" errors, except
// "Conflicting address": a member that came back at another address, which
// it logs on every gossip round until the old address is declared dead,
// and "Decrypt packet failed": a packet without this cluster's key, which
// anyone may send as often as they like, logged at most every 10 s).
type slogWriter struct {
	log           *slog.Logger
	undecryptable *atomic.Int64 // unix ns an undecryptable packet was last logged
}

func (w slogWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	switch {
	case strings.Contains(s, "Conflicting address"):
		w.log.Debug(s, "component", "gossip")
	case strings.Contains(s, "Decrypt packet failed"):
		now := time.Now().UnixNano()
		if last := w.undecryptable.Load(); now-last > int64(10*time.Second) && w.undecryptable.CompareAndSwap(last, now) {
			w.log.Warn(s+" (gossip without this cluster's key, dropped; logged at most every 10 s)", "component", "gossip")
		}
	case strings.Contains(s, "[ERR]"):
		w.log.Error(s, "component", "gossip")
	case strings.Contains(s, "[WARN]"):
		w.log.Warn(s, "component", "gossip")
	default:
		w.log.Debug(s, "component", "gossip")
	}
	return len(p), nil
}

var _ io.Writer = slogWriter{}

// Listen starts gossip on Config.GossipAddr, gossiping meta about this
// node and advertising advertiseIP ("" lets memberlist pick: the bind
// address, or the first private IP when it binds every address) with the
// bound port. Callbacks into Deps start here.
func (c *Cluster) Listen(meta Meta, advertiseIP string) error {
	c.meta = meta
	c.meta.Shape = c.shape.Own()
	host, port, err := splitHostPort(c.cfg.GossipAddr)
	if err != nil {
		return fmt.Errorf("membership: gossip address: %w", err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.cfg.ID
	mc.BindAddr = host
	mc.ProbeInterval = c.cfg.ProbeInterval
	mc.ProbeTimeout = c.cfg.ProbeTimeout
	mc.GossipInterval = c.cfg.GossipInterval
	mc.SuspicionMult = c.cfg.SuspicionMult
	mc.PushPullInterval = 5 * time.Second
	mc.TCPTimeout = 2 * time.Second
	// A member declared dead may come back at once at another address (a
	// rescheduled pod keeps its id): memberlist refuses a known name at a
	// new address unless the old record is dead and older than this.
	mc.DeadNodeReclaimTime = time.Millisecond
	mc.Delegate = delegate{c}
	mc.Events = delegate{c}
	mc.Conflict = delegate{c}
	mc.Alive, mc.Merge = delegate{c}, delegate{c}
	mc.Logger = log.New(slogWriter{log: c.log, undecryptable: new(atomic.Int64)}, "", 0)
	mc.Label = c.cfg.ClusterName // gossip from another cluster is dropped
	if c.cfg.Keyring != nil {
		mc.Keyring = c.cfg.Keyring
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
		switch c.cfg.Upgrade { // moving a keyless cluster onto the key
		case UpgradePlain:
			mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = false, false
		case UpgradeEncrypt:
			mc.GossipVerifyIncoming = false
		}
	}
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: mc.Logger})
	if err != nil {
		return fmt.Errorf("membership: gossip transport: %w", err)
	}
	if port == 0 {
		port = nt.GetAutoBindPort()
	}
	mc.BindPort, mc.AdvertisePort = port, port
	mc.AdvertiseAddr = advertiseIP
	mc.Transport = nt
	if c.cfg.WrapGossip != nil {
		mc.Transport = c.cfg.WrapGossip(nt)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = nt.Shutdown()
		return fmt.Errorf("membership: gossip: %w", err)
	}
	c.ml = ml
	c.mlAddr = ml.LocalNode().FullAddress().Addr
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
