package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/hashicorp/memberlist"

	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/ring"
	"github.com/weirlimit/weir/rulesraft"
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
}

// member is one node as seen through gossip.
type member struct {
	ID     string
	Gossip string
	State  string
	memberMeta
}

// clusterView is an immutable snapshot: the member set and the ring built
// from it. The cluster loop swaps it atomically.
type clusterView struct {
	version uint64 // ringVersion(ring)
	ring    *ring.Ring
	members map[string]member
}

func (v *clusterView) addr(id string) (string, bool) {
	m, ok := v.members[id]
	if !ok || m.GRPC == "" {
		return "", false
	}
	return m.GRPC, true
}

// delegate implements memberlist's Delegate and EventDelegate. Callbacks
// never block: events only signal the cluster loop.
type delegate struct{ n *Node }

func (d delegate) NodeMeta(limit int) []byte {
	m := d.n.meta
	m.Leaving = d.n.leaving.Load()
	m.Gateways = d.n.api.Gateways()
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

func (n *Node) signalChanged() {
	select {
	case n.changed <- struct{}{}:
	default:
	}
}

// slogWriter adapts memberlist's *log.Logger output to slog (debug level;
// memberlist's own "[WARN]" lines become warnings).
type slogWriter struct{ n *Node }

func (w slogWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	switch {
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

func (n *Node) startMemberlist() error {
	host, port, err := splitHostPort(n.cfg.GossipAddr)
	if err != nil {
		return fmt.Errorf("node: gossip address: %w", err)
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = n.cfg.ID
	mc.BindAddr = host
	mc.BindPort = port
	mc.AdvertisePort = port
	mc.ProbeInterval = n.cfg.GossipProbeInterval
	mc.ProbeTimeout = n.cfg.GossipProbeTimeout
	mc.GossipInterval = n.cfg.GossipInterval
	mc.SuspicionMult = n.cfg.GossipSuspicionMult
	mc.PushPullInterval = 5 * time.Second
	mc.TCPTimeout = 2 * time.Second
	mc.Delegate = delegate{n}
	mc.Events = delegate{n}
	mc.Logger = log.New(slogWriter{n}, "", 0)
	if n.cfg.WrapGossip != nil {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: mc.Logger})
		if err != nil {
			return fmt.Errorf("node: gossip transport: %w", err)
		}
		if port == 0 {
			mc.BindPort = nt.GetAutoBindPort()
			mc.AdvertisePort = mc.BindPort
		}
		mc.Transport = n.cfg.WrapGossip(nt)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("node: gossip: %w", err)
	}
	n.ml = ml
	return nil
}

func (n *Node) memberCount() int {
	v := n.view.Load()
	if v == nil {
		return 1
	}
	return len(v.members)
}

// readMembers returns the live members (alive or suspect) by id, from the
// copies the event delegate keeps (memberlist's own Node structs may change
// under a reader).
func (n *Node) readMembers() map[string]member {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	out := make(map[string]member, len(n.known))
	for id, m := range n.known {
		out[id] = m
	}
	return out
}

// departedMember reports whether gossip saw id die or leave (a node this
// node has not heard of yet is not departed).
func (n *Node) departedMember(id string) bool {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	_, ok := n.departed[id]
	return ok
}

// remember copies a member's address, state and metadata. Called from
// memberlist callbacks, which hold memberlist's lock while m is stable.
// memberlist does not fill in m.State (its own record of the state is
// elsewhere), so the state is derived: a member that gossip drops while
// its metadata says it is leaving left gracefully; any other was declared
// dead.
func (n *Node) remember(m *memberlist.Node, gone bool) {
	mm := member{ID: m.Name, Gossip: m.Address(), State: stateName(memberlist.StateAlive)}
	if len(m.Meta) > 0 {
		_ = json.Unmarshal(m.Meta, &mm.memberMeta)
	}
	st := memberlist.StateAlive
	if gone {
		st = memberlist.StateDead
		if mm.Leaving {
			st = memberlist.StateLeft
		}
	}
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	if gone {
		delete(n.known, m.Name)
		n.departed[m.Name] = departure{st, time.Now()}
		n.forgetDepartedLocked()
		if st == memberlist.StateDead && m.Name != n.cfg.ID {
			n.lost[m.Name] = lostMember{gossip: mm.Gossip, since: time.Now()}
		}
	} else {
		n.known[m.Name] = mm
		delete(n.departed, m.Name)
		delete(n.lost, m.Name)
	}
}

// lostMember is a member gossip declared dead (not one that left).
type lostMember struct {
	gossip string
	since  time.Time
}

// Reconnecting to members declared dead: how often, and for how long after
// their death.
const (
	reconnectEvery = 2 * time.Second
	reconnectFor   = time.Hour
)

// reconnectLoop tries, every reconnectEvery, to rejoin the members gossip
// declared dead in the last reconnectFor. A dead member may only have been
// cut off (a network split): after a split each side holds the other as
// dead, and memberlist alone does not merge them again once the dead
// notices stopped being gossiped. A join is a full state exchange: each
// side learns it was declared dead, refutes it, and the member sets merge
// (two rounds at most). A member that really died refuses the connection.
func (n *Node) reconnectLoop() {
	n.every(reconnectEvery, func() bool {
		if n.leaving.Load() {
			return false
		}
		if addrs := n.lostAddrs(time.Now()); len(addrs) > 0 {
			if k, err := n.ml.Join(addrs); err != nil && k == 0 {
				n.log.Debug("reconnect to dead members failed", "members", len(addrs), "err", err)
			} else {
				n.log.Info("reconnected to members declared dead", "contacted", k)
			}
		}
		return false
	})
}

// lostAddrs lists the gossip addresses of members declared dead less than
// reconnectFor ago, and forgets older ones.
func (n *Node) lostAddrs(now time.Time) []string {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	var out []string
	for id, l := range n.lost {
		if now.Sub(l.since) > reconnectFor {
			delete(n.lost, id)
			continue
		}
		if l.gossip != "" {
			out = append(out, l.gossip)
		}
	}
	sort.Strings(out)
	return out
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

// clusterLoop owns ring changes, hand-off planning and Raft group
// management. It re-reads the member list on every signal and on a timer.
func (n *Node) clusterLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var gateways uint32
	for {
		n.refreshView()
		n.manageRaft()
		n.forgetReleased()
		if g := n.api.Gateways(); g != gateways {
			gateways = g
			_ = n.ml.UpdateNode(time.Second) // gossip the new gateway count
		}
		select {
		case <-n.ctx.Done():
			return
		case <-n.changed:
		case <-t.C:
		}
	}
}

// refreshView builds a new ring when the member set changed and starts the
// hand-off of moved partitions.
func (n *Node) refreshView() {
	members := n.readMembers()
	if len(n.cfg.Join) > 0 && !n.joined.Load() && n.view.Load() == nil {
		// Not joined yet: a solo ring would claim every partition.
		return
	}
	if n.leaving.Load() {
		m := members[n.cfg.ID]
		m.Leaving = true
		members[n.cfg.ID] = m
	}
	old := n.view.Load()
	if old != nil && sameRing(old.members, members) {
		// Metadata-only changes (addresses) still need a new view.
		if sameMeta(old.members, members) {
			return
		}
		nv := &clusterView{version: old.version, ring: old.ring, members: members}
		n.view.Store(nv)
		return
	}
	ids := make([]string, 0, len(members))
	for id, m := range members {
		if !m.Leaving {
			ids = append(ids, id)
		}
	}
	r, err := ring.New(ids, n.cfg.Ring)
	if err != nil {
		n.log.Error("ring rebuild failed", "err", err)
		return
	}
	version := ringVersion(r)
	var oldRing *ring.Ring
	if old != nil {
		oldRing = old.ring
	}
	nv := &clusterView{version: version, ring: r, members: members}
	gain, resync := n.applyRingChange(oldRing, nv, old)
	n.view.Store(nv)
	// Pulls and resyncs start once nv is the view: they dial peers by it
	// (a joiner has no view before its first).
	if len(gain) > 0 {
		n.goFunc(func() { n.pullPartitions(gain) })
	}
	if len(resync) > 0 {
		n.goFunc(func() { n.resyncReplicas(resync) })
	}
	n.met.members.Set(float64(len(members)))
	n.met.ringVersion.Set(float64(version))
	n.met.partitionsOwned.Set(float64(len(r.OwnedBy(n.cfg.ID))))
	n.log.Info("ring changed", "version", version, "members", len(members))
}

// ringVersion identifies a ring by what it is built from: a 32-bit hash of
// its sorted member ids and its config. Every node with the same ring
// members reports the same version, so an operator comparing nodes sees
// at once whether they agree; it is not ordered (a later ring is not a
// larger number). 32 bits keep it short and exact as a Prometheus gauge.
func ringVersion(r *ring.Ring) uint64 {
	var d xxhash.Digest
	d.Reset()
	ids := r.Members()
	sort.Strings(ids)
	for _, id := range ids {
		_, _ = d.WriteString(id)
		_, _ = d.Write([]byte{0})
	}
	c := r.Config()
	_, _ = fmt.Fprintf(&d, "%d/%d/%g/%d", c.PartitionCount, c.ReplicationFactor, c.Load, c.Replicas)
	return d.Sum64() & 0xffffffff
}

// sameRing reports whether a and b put the same members in the ring.
func sameRing(a, b map[string]member) bool {
	if len(a) != len(b) {
		return false
	}
	for id, ma := range a {
		mb, ok := b[id]
		if !ok || ma.Leaving != mb.Leaving {
			return false
		}
	}
	return true
}

func sameMeta(a, b map[string]member) bool {
	for id, m := range a {
		if b[id] != m {
			return false
		}
	}
	return true
}

// applyRingChange marks partitions this node gains as pending (served by
// their previous holder until hand-off completes) and returns them with
// their sources, to pull once nv is the view. It also returns the
// partitions this node keeps serving whose replica set gained a member:
// their full state goes to it once nv is the view.
func (n *Node) applyRingChange(oldRing *ring.Ring, nv *clusterView, old *clusterView) (gain []replication.Source, resync []uint32) {
	self := n.cfg.ID
	if oldRing == nil {
		// First view. The cluster existed before without this node: compare
		// with the ring of the other members, so partitions this node takes
		// over are pulled from their owners before it answers for them.
		var others []string
		for id, m := range nv.members {
			if id != self && !m.Leaving {
				others = append(others, id)
			}
		}
		if len(others) == 0 {
			for _, p := range nv.ring.OwnedBy(self) {
				n.parts.setReady(p)
			}
			return nil, nil
		}
		r, err := ring.New(others, n.cfg.Ring)
		if err != nil {
			n.log.Error("ring rebuild failed", "err", err)
			return nil, nil
		}
		oldRing = r
	}
	// While members only join, every node that handed a partition on keeps
	// a moved mark to the next holder, so a chain of marks leads to the
	// counters even to a new owner that has not seen the latest ring yet:
	// marks stay until their puller is gone. A member leaving the ring
	// breaks such chains (its own marks go with it), so then a mark whose
	// puller no longer owns the partition by this ring is dropped and the
	// partition is routed by the ring, to the owner that promoted or pulled
	// its counters. A puller this node has not heard of yet (not in
	// nv.ring) is not stale: it pulled on a newer ring than this one.
	shrank := false
	if oldRing != nil {
		for _, id := range oldRing.Members() {
			if !nv.ring.Contains(id) {
				shrank = true
				break
			}
		}
	}
	n.parts.clearMoved(func(p uint32, puller string) bool {
		return n.departedMember(puller) ||
			(shrank && nv.ring.Contains(puller) && nv.ring.PartitionOwner(p) != puller)
	})
	alive := func(id string) bool { _, ok := nv.members[id]; return ok }
	moves := ring.Diff(oldRing, nv.ring)
	rm := make([]replication.Move, len(moves))
	for i, m := range moves {
		rm[i] = replication.Move{Partition: m.Partition, OldOwner: m.OldOwner, NewOwner: m.NewOwner, OldReplicas: m.OldReplicas, NewReplicas: m.NewReplicas}
	}
	gain, lose, dropReplica := replication.PlanHandoff(self, rm, alive)
	for _, p := range replication.PlanResync(self, rm) {
		if n.parts.state(p) == partReady {
			resync = append(resync, p)
		}
	}
	if len(dropReplica) > 0 {
		// The new owner may still pull these copies (its previous owner
		// died): keep them for a while.
		n.goFunc(func() { n.dropReplicasLater(dropReplica) })
	}
	// Lost partitions are routed by the ring from now on; their counters
	// stay in the engine until the new owner pulls them (items it forwards
	// here meanwhile are still decided here).
	for _, p := range lose {
		n.parts.release(p)
	}
	for _, g := range gain {
		n.parts.setPending(g.Partition, n.source(g.From))
	}
	return gain, resync
}

// source is the peer to pull a gained partition from: the first of the
// planned sources (live, best first), or "" when the best copy is this
// node's own replica or none survives.
func (n *Node) source(from []string) string {
	if len(from) == 0 || from[0] == n.cfg.ID {
		return ""
	}
	return from[0]
}

// dropReplicasLater forgets replica copies of partitions this node no
// longer holds, after a grace period in which a new owner may pull them,
// unless a later ring made this node hold them again.
func (n *Node) dropReplicasLater(parts []uint32) {
	t := time.NewTimer(replicaGrace)
	defer t.Stop()
	select {
	case <-n.ctx.Done():
		return
	case <-t.C:
	}
	v := n.view.Load()
	var drop []uint32
	for _, p := range parts {
		if !slices.Contains(v.ring.PartitionReplicas(p), n.cfg.ID) {
			drop = append(drop, p)
		}
	}
	n.replicas.Drop(drop)
}

// replicaGrace is how long copies of a partition no longer held are kept,
// and how long a released partition's counters wait for its new owner.
const replicaGrace = 30 * time.Second

// forgetReleased drops the counters of partitions released more than
// replicaGrace ago that nobody pulled.
func (n *Node) forgetReleased() {
	parts := n.parts.forgetReleased(time.Now().Add(-replicaGrace).UnixNano())
	if len(parts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
	defer cancel()
	if err := n.engine.Drop(ctx, parts); err != nil && n.ctx.Err() == nil {
		n.log.Warn("drop released partitions", "err", err)
	}
	n.log.Info("forgot released partitions nobody pulled", "partitions", len(parts))
}

// manageRaft bootstraps the group once enough members are present and, on
// the leader, reconciles the Raft configuration with gossip membership.
func (n *Node) manageRaft() {
	v := n.view.Load()
	if v == nil {
		return
	}
	if n.cfg.BootstrapExpect > 0 && !n.boot.Load() {
		var servers []rulesraft.Server
		for _, m := range v.members {
			if m.Raft != "" {
				servers = append(servers, rulesraft.Server{ID: m.ID, Addr: m.Raft})
			}
		}
		if len(servers) >= n.cfg.BootstrapExpect {
			sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
			servers = servers[:n.cfg.BootstrapExpect]
			err := n.store.Bootstrap(servers)
			if err != nil && !isAlreadyBootstrapped(err) {
				n.log.Warn("raft bootstrap", "err", err)
			} else {
				n.boot.Store(true)
			}
		}
	}
	if !n.store.IsLeader() {
		return
	}
	var alive []rulesraft.Server
	for _, m := range v.members {
		if m.Raft != "" && m.State == "alive" {
			alive = append(alive, rulesraft.Server{ID: m.ID, Addr: m.Raft})
		}
	}
	sort.Slice(alive, func(i, j int) bool { return alive[i].ID < alive[j].ID })
	gone := n.leftMembers()
	if err := n.store.Reconcile(n.ctx, alive, gone); err != nil && n.ctx.Err() == nil {
		n.log.Warn("raft reconcile", "err", err)
	}
}

// leftMembers lists members that left gracefully (so the leader removes
// them from Raft at once instead of waiting for the voter grace period).
func (n *Node) leftMembers() []string {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	var out []string
	for id, d := range n.departed {
		if d.state == memberlist.StateLeft {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// departure is how and when a member left gossip.
type departure struct {
	state memberlist.NodeStateType // dead or left
	at    time.Time
}

// departedFor is how long a departed member is remembered (listed by
// Members, its moved marks cleared, retried if it died). A member gone
// longer is forgotten, so ids that come and go do not pile up.
const departedFor = reconnectFor

func (n *Node) forgetDepartedLocked() {
	for id, d := range n.departed {
		if time.Since(d.at) > departedFor {
			delete(n.departed, id)
		}
	}
}

// departedMembers returns the members gossip saw die or leave recently,
// with how they went.
func (n *Node) departedMembers() map[string]memberlist.NodeStateType {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	out := make(map[string]memberlist.NodeStateType, len(n.departed))
	for id, d := range n.departed {
		out[id] = d.state
	}
	return out
}

func isAlreadyBootstrapped(err error) bool { return errors.Is(err, rulesraft.ErrAlreadyBootstrapped) }
