package membership

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/ring"
	"github.com/weirlimit/weir/rulesraft"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// ErrNoPeers is returned by Leave when no other member is left in the ring
// to take this node's partitions (their counters are lost).
var ErrNoPeers = errors.New("membership: no member left to take the partitions")

// Config.Upgrade values: moving a running keyless TLS cluster onto a
// gossip key with rolling restarts.
const (
	UpgradePlain   = "plain"   // hold the key, gossip in plaintext, accept plaintext
	UpgradeEncrypt = "encrypt" // gossip encrypted, accept plaintext
)

// Config is what membership is built from (node.Config's gossip, join and
// ring settings).
type Config struct {
	ID          string
	ClusterName string // the gossip label: gossip from another cluster is dropped
	GossipAddr  string // host:port to bind (port 0: any)
	Join        []string
	// BootstrapExpect: bootstrap the Raft group once this many members are
	// present (0: never bootstrap; join an existing group).
	BootstrapExpect int
	Ring            ring.Config

	ProbeInterval, ProbeTimeout, GossipInterval time.Duration
	SuspicionMult                               int

	Keyring *memberlist.Keyring // gossip keys; nil: plaintext gossip
	Upgrade string              // "", UpgradePlain or UpgradeEncrypt
	// WrapGossip, when set, wraps the memberlist transport (tests cut a
	// node off with it).
	WrapGossip func(memberlist.Transport) memberlist.Transport

	Logger   *slog.Logger
	Now      func() int64          // the ring-view policy's clock (unix ns)
	Registry prometheus.Registerer // weir_members, weir_ring_version, weir_partitions_owned; nil: none
}

// Prover signs this node's gossip metadata and checks a member's
// (security: a gossip key's member proof).
type Prover interface {
	// MemberProof is the proof this node gossips ("" without a key).
	MemberProof() string
	// ProvenMember reports whether m (its Proof and Boot) proved it holds
	// a key of the keyring.
	ProvenMember(id string, m clusterview.Member) bool
}

// Admitter filters the live members to those admitted (security: with
// TLS a member proves it is that node). wait: a new member is being
// verified; the ring waits for it.
type Admitter interface {
	Admitted(members map[string]clusterview.Member) (out map[string]clusterview.Member, wait bool)
}

// Gateways is the number of gateways watching rules on this node
// (gossiped, summed over members for the fail-open share).
type Gateways interface{ Gateways() uint32 }

// Handoff takes a new ring before the check path sees it (the hand-off
// marks the partitions this node gains pending and pulls them) and tells
// a leave how far its partitions are.
type Handoff interface {
	ChangeRing(ctx context.Context, ev replication.RingChanged) error
	Routes() *replication.Routes
}

// Replicator ships counter changes to the replicas of their partitions.
// Seal binds the changes queued so far to the placement of the ring about
// to be replaced, so they go to that ring's replicas
// (replication.Replicator.Seal).
type Replicator interface{ Seal(replication.Placement) }

// Restorer holds the first ring back while durable counters wait for the
// members that wrote them (persist.Keeper).
type Restorer interface {
	Restoring(live func(id string) bool, haveRing bool) bool
}

// RaftGroup is the rules' Raft group (rulesraft.Store) as membership
// manages it: bootstrap, voters reconciled with gossip, leader knowledge.
type RaftGroup interface {
	Bootstrap(servers []rulesraft.Server) error
	IsLeader() bool
	Reconcile(ctx context.Context, alive []rulesraft.Server, left []string) error
	Leader() (id, addr string)
	// LeaderChanged signals (coalesced) each change of Leader.
	LeaderChanged() <-chan struct{}
	Configuration() ([]rulesraft.ServerInfo, error)
}

// Dialer gives the connection to a peer's gRPC address (the node's peer
// pool): a leave and the quorum watch ask peers for their health.
type Dialer interface {
	Conn(addr string) (grpc.ClientConnInterface, error)
}

// Deps are the other parts membership calls. Each is called only after
// Listen (gossip callbacks) or Run (the loops).
type Deps struct {
	Prover     Prover
	Admitter   Admitter
	Gateways   Gateways
	Handoff    Handoff
	Replicator Replicator
	Restorer   Restorer
	Raft       RaftGroup
	Dialer     Dialer
	// Published hears of every view published with a new ring, on the
	// cluster loop, after the check path sees it (region, forwarders,
	// metrics). Must not block.
	Published func(v *View)
}

// Cluster is this node's membership: gossip (memberlist and the metadata
// it gossips), the member book its callbacks fill, the published cluster
// view and the loop that refreshes it, the Raft group's bootstrap and
// voters, the quorum watch, join, rejoin and leave.
type Cluster struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	ml      *memberlist.Memberlist
	mlAddr  string // ml's advertised address, read once: UpdateNode rewrites LocalNode's fields
	meta    Meta
	changed chan struct{} // non-blocking "members changed" signal
	view    atomic.Pointer[View]
	// replicated: see Replicated.
	replicated atomic.Bool
	met        viewMetrics
	gossiped   *clusterview.Book // what gossip reported: live, departed, lost, rejoined members
	shape      *clusterview.ShapeGuard

	leaving atomic.Bool
	joined  atomic.Bool // gossip join done (when Join is configured)
	boot    atomic.Bool // Raft bootstrapped (or joined an existing group)
	inGroup atomic.Bool // in the Raft configuration (gossiped: Meta.InGroup)

	leaderlessFor  atomic.Int64 // ns since this node last knew a Raft leader; 0 while it knows one (watchQuorum)
	regained       atomic.Bool  // a Raft leader again after QuorumLostAfter without one (watchQuorum)
	selfConflict   atomic.Int64 // unix ns of the last gossip record of this id at another address
	conflictLogged atomic.Int64 // unix ns of the last address-conflict warning

	wg sync.WaitGroup // Run's loops
}

// New returns the membership of node cfg.ID: the member book is ready (Raft
// may ask RaftAddrOf at once); gossip starts with Listen.
func New(cfg Config, deps Deps) *Cluster {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixNano() }
	}
	return &Cluster{
		cfg:      cfg,
		deps:     deps,
		log:      cfg.Logger,
		changed:  make(chan struct{}, 1),
		gossiped: clusterview.NewBook(cfg.ID),
		shape:    clusterview.NewShapeGuard(cfg.Ring),
		met:      newViewMetrics(cfg.Registry),
	}
}

// Refresh asks the cluster loop to re-read the member list (a member was
// admitted, a join succeeded). It never blocks.
func (c *Cluster) Refresh() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// View is the published cluster view, nil before the first ring.
func (c *Cluster) View() *View { return c.view.Load() }

// Leaving reports whether this node is leaving (Leave was called).
func (c *Cluster) Leaving() bool { return c.leaving.Load() }

// Meta is what this node gossips about itself (Leaving, Gateways and
// Proof are filled in when it is sent).
func (c *Cluster) Meta() Meta { return c.meta }

// GossipAddr is the advertised memberlist address.
func (c *Cluster) GossipAddr() string { return c.mlAddr }

// UpdateMeta gossips this node's metadata again (a new gateway count, a
// proof signed with a new primary key), waiting up to timeout.
func (c *Cluster) UpdateMeta(timeout time.Duration) error { return c.ml.UpdateNode(timeout) }

// MemberCount is the number of members in the published view (1 before
// the first).
func (c *Cluster) MemberCount() int {
	v := c.view.Load()
	if v == nil {
		return 1
	}
	return len(v.Members)
}

// ReadMembers returns the live members (alive or suspect) by id, from the
// copies the event delegate keeps (memberlist's own Node structs may change
// under a reader).
func (c *Cluster) ReadMembers() map[string]clusterview.Member { return c.gossiped.Live() }

// Lookup is id's record while it is live in gossip.
func (c *Cluster) Lookup(id string) (clusterview.Member, bool) { return c.gossiped.Lookup(id) }

// DepartedMember reports whether gossip saw id die or leave (a node this
// node has not heard of yet is not departed).
func (c *Cluster) DepartedMember(id string) bool { return c.gossiped.IsDeparted(id) }

// DepartedMembers returns the members gossip saw die or leave recently,
// with how they went: "dead" or "left".
func (c *Cluster) DepartedMembers() map[string]string {
	out := map[string]string{}
	for id, st := range c.gossiped.Departed() {
		out[id] = stateName(memberlist.StateDead)
		if st == clusterview.Left {
			out[id] = stateName(memberlist.StateLeft)
		}
	}
	return out
}

// RaftAddrOf is the Raft address gossip last gave for member id (Raft
// dials it instead of the configured one: see rulesraft.Config.PeerAddr).
// A member that died keeps its last address, so Raft keeps dialling where
// it was.
func (c *Cluster) RaftAddrOf(id string) (string, bool) { return c.gossiped.RaftAddr(id) }

// MemberFeatures are the rule features each live member advertises, by id
// (rulesraft.Config.MemberFeatures: the leader refuses rules some member
// cannot read).
func (c *Cluster) MemberFeatures() map[string][]string {
	out := map[string][]string{}
	for id, m := range c.ReadMembers() {
		out[id] = nil
		if m.Features != "" {
			out[id] = strings.Split(m.Features, ",")
		}
	}
	return out
}

// AdvertisedFeatures is what a node gossips as its supported rule
// features: all of this binary's (rules.Features) but those left out.
func AdvertisedFeatures(without []string) string {
	var out []string
	for _, f := range rules.Features() {
		if !slices.Contains(without, f) {
			out = append(out, f)
		}
	}
	return strings.Join(out, ",")
}

// remember copies a member's address, state and metadata into the book.
// Called from memberlist callbacks, which hold memberlist's lock while m
// is stable. memberlist does not fill in m.State (its own record of the
// state is elsewhere), so the state is derived: a member that gossip drops
// while its metadata says it is leaving left gracefully; any other was
// declared dead.
func (c *Cluster) remember(m *memberlist.Node, gone bool) {
	var meta Meta
	if len(m.Meta) > 0 {
		_ = json.Unmarshal(m.Meta, &meta)
	}
	rec := clusterview.Member{
		ID: m.Name, Gossip: m.Address(),
		GRPC: meta.GRPC, HTTP: meta.HTTP, Raft: meta.Raft, Leaving: meta.Leaving,
		Gateways: meta.Gateways, Boot: meta.Boot, Proof: meta.Proof, Features: meta.Features, InGroup: meta.InGroup,
	}
	if !c.deps.Prover.ProvenMember(m.Name, rec) {
		c.gossiped.Drop(m.Name)
		return
	}
	st := memberlist.StateAlive
	if gone {
		st = memberlist.StateDead
		if meta.Leaving {
			st = memberlist.StateLeft
		}
	}
	rec.State = stateName(st)
	c.gossiped.Report(rec, time.Now())
}

// Run runs the membership loops until ctx ends: the join retries (when
// Join found no one at Start), the cluster loop, the rejoin of lost
// members and the quorum watch. It returns once they all stopped.
func (c *Cluster) Run(ctx context.Context) {
	if len(c.cfg.Join) > 0 && !c.joined.Load() {
		c.goFunc(func() { c.joinLoop(ctx) })
	}
	c.goFunc(func() { c.clusterLoop(ctx) })
	c.goFunc(func() { c.reconnectLoop(ctx) })
	c.goFunc(func() { c.watchQuorum(ctx) })
	c.Refresh()
	c.wg.Wait()
}

func (c *Cluster) goFunc(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// Close stops gossip at once (no leave); safe before Listen.
func (c *Cluster) Close() {
	if c.ml != nil {
		_ = c.ml.Shutdown()
	}
}
