package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/weirlimit/weir/internal/grpcwin"
	"github.com/weirlimit/weir/internal/sched"
	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/node/api"
	"github.com/weirlimit/weir/node/forward"
	"github.com/weirlimit/weir/node/membership"
	"github.com/weirlimit/weir/node/ops"
	"github.com/weirlimit/weir/node/peer"
	"github.com/weirlimit/weir/node/persist"
	"github.com/weirlimit/weir/node/router"
	"github.com/weirlimit/weir/node/security"
	"github.com/weirlimit/weir/node/shard"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/region"
	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/rulesraft"
)

// ErrClosed is returned by a node that is shutting down. It is
// limit.ErrClosed (so limit.ErrUnavailable too): the edges answer
// Unavailable / 503.
var ErrClosed = router.ErrClosed

// ErrNoPeers is returned by Leave when no other member is left in the ring
// to take this node's partitions (their counters are lost).
var ErrNoPeers = membership.ErrNoPeers

// Node is one Weir process: membership, ring, shards, replication, rules and
// the servers in front of them. It wires its parts and owns nothing else.
type Node struct {
	cfg Config
	log *slog.Logger

	store    *rulesraft.Store    // the rule set (Raft)
	counters counterParts        // shards, replication, hand-off, durable counters
	cluster  *membership.Cluster // gossip, members, the cluster view, join and leave
	sec      *security.Guard     // TLS, roles, admission, keys and proofs
	fwd      *forward.Table      // forwarders and peer connections
	router   *router.Router      // the check path
	ops      *ops.Ops            // the operators' view and its edge
	api      *api.Server         // the check, rules and members APIs
	region   *region.Agent       // nil unless Config.Region is set
	srv      servers             // listeners, gRPC, HTTP, health

	ctx   context.Context // cancelled by Close
	loops loops           // goroutines joined on Close
}

// counterParts hold the counters: decided by the shards, copied by the
// replicator, moved by the hand-off, kept on disk by the keeper.
type counterParts struct {
	engine   *shard.Engine
	repl     *replication.Replicator
	replicas *replication.Store
	handoff  *replication.Handoff
	durable  *persist.Keeper
}

// servers are the node's listeners and the servers on them.
type servers struct {
	grpcLis, httpLis net.Listener
	grpc             *grpc.Server
	health           *health.Server // grpc.health.v1: SERVING once ready, NOT_SERVING from Leave on
	http             *http.Server
}

// loops are the node's goroutines and how they stop.
type loops struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
}

// New validates cfg, opens the Raft store and binds every listener. Call
// Start to begin serving.
func New(cfg Config) (*Node, error) {
	cfg, keyring, err := prepare(cfg)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID)}
	n.cluster = n.newCluster(keyring)
	n.ctx, n.loops.cancel = context.WithCancel(context.Background())
	boot := cfg.Sched.Uint64() | 1
	if n.sec, err = n.newSecurity(boot, keyring); err != nil {
		n.loops.cancel()
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			n.closeResources()
		}
	}()
	if n.fwd, err = n.newForwarders(); err != nil {
		return nil, err
	}
	if err := n.listen(); err != nil {
		return nil, err
	}
	adv, err := membership.NewAdvertiser(cfg.Advertise, cfg.GossipAddr, cfg.ResolveTimeout, n.log)
	if err != nil {
		return nil, err
	}
	if n.store, err = n.openRules(adv); err != nil {
		return nil, err
	}
	if n.counters, err = n.newCounters(); err != nil {
		return nil, err
	}
	registerCounterMetrics(cfg.Registry, &n.counters)
	n.initOps()
	if err := n.newServers(); err != nil {
		return nil, err
	}
	meta := membership.Meta{
		Boot:     boot,
		GRPC:     adv.Addr(n.srv.grpcLis.Addr().String()),
		HTTP:     adv.Addr(n.srv.httpLis.Addr().String()),
		Raft:     n.store.Addr(),
		Features: membership.AdvertisedFeatures(cfg.WithoutFeatures),
	}
	if err := n.cluster.Listen(meta, adv.GossipIP()); err != nil {
		return nil, err
	}
	ok = true
	return n, nil
}

// prepare validates cfg, fills its defaults, makes the data directory and
// loads the gossip keys.
func prepare(cfg Config) (Config, *memberlist.Keyring, error) {
	if err := cfg.Validate(); err != nil {
		return cfg, nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixNano() }
	}
	cfg.Sched = sched.Or(cfg.Sched)
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return cfg, nil, fmt.Errorf("node: data dir: %w", err)
	}
	keys, keyring, err := security.LoadKeys(cfg.securitySettings(), cfg.Logger.With("node", cfg.ID))
	if err != nil {
		return cfg, nil, err
	}
	cfg.GossipKeys, cfg.GossipAddr, cfg.RaftAddr, cfg.Advertise = keys.Keys, keys.GossipAddr, keys.RaftAddr, keys.Advertise
	return cfg, keyring, nil
}

// tracer is the node's tracer; nil when tracing is off.
func (n *Node) tracer() trace.Tracer {
	if n.cfg.Tracer == nil {
		return nil
	}
	return n.cfg.Tracer.Tracer(tracing.Name)
}

// listen binds the gRPC and HTTP listeners.
func (n *Node) listen() (err error) {
	if n.srv.grpcLis, err = net.Listen("tcp", n.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("node: grpc listen: %w", err)
	}
	if n.srv.httpLis, err = net.Listen("tcp", n.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("node: http listen: %w", err)
	}
	return nil
}

// openRules opens the Raft group's store of the rule set.
func (n *Node) openRules(adv membership.Advertiser) (*rulesraft.Store, error) {
	cfg := n.cfg
	rc := rulesraft.DefaultConfig()
	rc.ID = cfg.ID
	rc.DataDir = filepath.Join(cfg.DataDir, "raft")
	rc.BindAddr = cfg.RaftAddr
	var err error
	if rc.AdvertiseAddr, err = adv.Raft(cfg.RaftAddr); err != nil {
		return nil, err
	}
	rc.PeerAddr = n.cluster.RaftAddrOf
	rc.MemberFeatures = n.cluster.MemberFeatures
	n.sec.RaftHandshake(&rc) // proofs and TLS of Raft connections
	rc.Logger = n.log.With("component", "raft")
	rc.HeartbeatTimeout = cfg.RaftHeartbeatTimeout
	rc.ElectionTimeout = cfg.RaftElectionTimeout
	rc.LeaderLeaseTimeout = cfg.RaftHeartbeatTimeout / 2
	st, err := rulesraft.Open(rc)
	if err != nil {
		return nil, fmt.Errorf("node: rules store: %w", err)
	}
	return st, nil
}

// newCounters builds the shards, the replicator, the replica store, the
// hand-off and the durable counters' keeper. The shards' changes go to
// the replicator, which exists by the time the shards start.
func (n *Node) newCounters() (c counterParts, err error) {
	cfg := n.cfg
	sc := shard.DefaultConfig()
	sc.Shards = cfg.Shards
	sc.MaxKeys = cfg.MaxKeys
	sc.AutoLeaseRate, sc.AutoLeaseGateways = cfg.AutoLeaseRate, cfg.AutoLeaseGateways
	sc.Now = cfg.Now
	sc.Sched = cfg.Sched
	sc.OnChange = func(states []replication.State) {
		if n.cluster.Replicated() { // nowhere to ship them on a ring of one
			n.counters.repl.Enqueue(states)
		}
	}
	if c.engine, err = shard.New(sc); err != nil {
		return c, fmt.Errorf("node: shards: %w", err)
	}
	rcfg := replication.DefaultConfig()
	rcfg.Self = cfg.ID
	rcfg.Interval = cfg.ReplicationInterval
	rcfg.Sched = cfg.Sched
	rcfg.Logger = n.log.With("component", "replication")
	if c.repl, err = replication.NewReplicator(rcfg, peer.NewTransport(n.fwd, cfg.Now), n.cluster.Replicas); err != nil {
		return c, fmt.Errorf("node: replicator: %w", err)
	}
	// The copies the durable-counter writer looks at every PersistInterval:
	// half of SnapshotMinIdle away or more when applied (the half leaves
	// room for the clock stepping back), not every copy held.
	longFrom := func() int64 { return cfg.Now() + int64(sc.SnapshotMinIdle/2) }
	c.replicas = replication.NewBoundedStore(replication.StoreLimits{Partitions: uint32(cfg.Ring.PartitionCount), MaxStates: maxReplicaStates, LongFrom: longFrom})
	hc := replication.DefaultHandoffConfig(cfg.ID, cfg.Ring.PartitionCount)
	hc.ResyncRetry = cfg.ReplicationInterval
	hc.Now = cfg.Now
	hc.Sched = cfg.Sched
	hc.Logger = n.log.With("component", "handoff")
	if c.handoff, err = replication.NewHandoff(hc, c.engine, peer.Puller{Conns: n.fwd, Now: cfg.Now}, c.replicas, c.repl); err != nil {
		return c, fmt.Errorf("node: hand-off: %w", err)
	}
	c.durable = persist.NewKeeper(persist.KeeperConfig{ID: cfg.ID, DataDir: cfg.DataDir, Solo: len(cfg.Join) == 0,
		Partitions: uint32(cfg.Ring.PartitionCount), Interval: cfg.PersistInterval, RestoreWait: cfg.RestoreWait,
		MinIdle: sc.SnapshotMinIdle, Now: cfg.Now, Sched: cfg.Sched, Logger: n.log.With("component", "persist"),
		Counters: c.engine, Copies: c.replicas, Ring: n.publishedRing, Leaving: n.cluster.Leaving})
	return c, nil
}

// newServers builds the API, the router, the gRPC server with every
// service on it (health NOT_SERVING until ready) and the HTTP server.
func (n *Node) newServers() (err error) {
	cfg := n.cfg
	n.api, err = api.New(api.Config{
		AdminToken:   cfg.AdminToken,
		MaxBodyBytes: 1 << 20,
		MaxWait:      60 * time.Second,
		Logger:       n.log.With("component", "api"),
		Registry:     cfg.Registry,
		Now:          func() time.Time { return time.Unix(0, cfg.Now()) }, // the decisions' clock: reset_at = now + reset
		DialOptions:  []grpc.DialOption{n.sec.PeerCreds()},
	}, backend{n})
	if err != nil {
		return fmt.Errorf("node: api: %w", err)
	}
	mux := http.NewServeMux()
	g := grpc.NewServer(append(grpcwin.ServerOptions(), n.sec.ServerOptions()...)...)
	n.srv.grpc = g
	n.api.Register(g)
	if err := n.registerGateways(g, mux); err != nil {
		return err
	}
	if cfg.Region.Region != "" {
		if n.region, err = n.newRegionAgent(); err != nil {
			return fmt.Errorf("node: region: %w", err)
		}
		weirv1.RegisterRegionServer(g, n.region)
	}
	if n.router, err = n.newRouter(); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	weirv1.RegisterPeerServer(g, n.newPeerServer())
	n.ops.RegisterGRPC(g)
	n.srv.health = health.NewServer()
	for svc := range g.GetServiceInfo() {
		n.srv.health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	n.srv.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(g, n.srv.health)
	if cfg.GRPCReflection {
		reflection.Register(g)
	}
	n.newKeyringAPI().Register(mux)
	n.ops.Register(mux)
	mux.Handle("/", n.api.Handler())
	n.srv.http = n.sec.NewHTTPServer(mux)
	return nil
}

// Start serves the APIs and runs the membership, replication and shard loops.
func (n *Node) Start() error {
	if why := n.cluster.NoLeaderReason(); why != "" {
		n.log.Warn(why)
	}
	n.counters.engine.Start()
	n.counters.durable.Start(n.ctx) // a solo node's counters, before it serves
	n.goFunc(func() { _ = n.counters.durable.Run(n.ctx) })
	n.goFunc(func() { n.ops.Run(n.ctx) })
	n.goFunc(func() { _ = n.counters.repl.Run(n.ctx) })
	n.goFunc(func() { _ = n.counters.handoff.Run(n.ctx) })
	n.goFunc(func() {
		if err := n.srv.grpc.Serve(n.srv.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("grpc server stopped", "err", err)
		}
	})
	n.goFunc(func() {
		if err := n.sec.ServeHTTP(n.srv.http, n.srv.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server stopped", "err", err)
		}
	})
	if err := n.cluster.Join(); err != nil { // before the first ring: it brings the whole member list
		return err
	}
	n.goFunc(func() { n.cluster.Run(n.ctx) })
	n.goFunc(n.serveHealth)
	if n.region != nil {
		n.goFunc(func() { _ = n.region.Run(n.ctx) })
	}
	return nil
}

// serveHealth reports SERVING on grpc.health.v1 once the node is first
// ready (a ring, a Raft leader, the rules, no hand-off pending). It stays
// so (checks are answered without a Raft leader) until Leave, which turns
// every service NOT_SERVING for good.
func (n *Node) serveHealth() {
	sched.Every(n.ctx, n.cfg.Sched, 100*time.Millisecond, func() bool {
		if n.Ready() != nil {
			return false
		}
		for svc := range n.srv.grpc.GetServiceInfo() {
			n.srv.health.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
		}
		n.srv.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		return true
	})
}

// maxReplicaStates caps the replica copies a node holds (about 100 bytes
// each): far above what the owners' key caps let them ship in practice,
// low enough that a misbehaving peer cannot exhaust memory.
const maxReplicaStates = 4 << 20

// goFunc runs f on a goroutine the node joins on Close.
func (n *Node) goFunc(f func()) {
	n.loops.wg.Add(1)
	go func() {
		defer n.loops.wg.Done()
		f()
	}()
}

// ID is the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// HTTPAddr is the advertised HTTP address (the bound port).
func (n *Node) HTTPAddr() string { return n.cluster.Meta().HTTP }

// GRPCAddr is the advertised gRPC address (the bound port).
func (n *Node) GRPCAddr() string { return n.cluster.Meta().GRPC }

// GossipAddr is the advertised memberlist address.
func (n *Node) GossipAddr() string { return n.cluster.GossipAddr() }

// RaftAddr is the advertised Raft address.
func (n *Node) RaftAddr() string { return n.cluster.Meta().Raft }

// Store exposes the local rules store (reads; writes on the leader).
func (n *Node) Store() *rulesraft.Store { return n.store }

// Leave hands owned partitions to their next owners and leaves the cluster
// gracefully: gRPC health turns NOT_SERVING, gossip marks this node as
// leaving (it drops out of everyone's ring but stays reachable), the new
// owners pull its partitions, then it leaves gossip and the Raft leader
// removes it. It returns when the hand-off finished, when no other member
// is left in the ring to take the partitions (all gone or leaving too), or
// when LeaveTimeout passed. Close is still needed afterwards.
func (n *Node) Leave(ctx context.Context) error {
	if !n.cluster.StartLeave() {
		return nil
	}
	n.srv.health.Shutdown()
	ctx, cancel := context.WithTimeout(ctx, n.cfg.LeaveTimeout)
	defer cancel()
	err := n.cluster.HandOff(ctx, n.cfg.LeaveTimeout/4)
	n.counters.durable.Write() // what this node still holds: all of it when nobody took its partitions
	n.cluster.Depart()
	return err
}

// Close stops the node hard (no hand-off): servers, loops, gossip, Raft.
func (n *Node) Close() error {
	n.loops.closed.Do(func() {
		n.loops.cancel()
		n.api.Close()
		n.srv.grpc.Stop()
		sctx, c := context.WithTimeout(context.Background(), time.Second)
		_ = n.srv.http.Shutdown(sctx)
		c()
		n.loops.wg.Wait()
		n.ops.Close()
		n.fwd.Close()
		if n.region != nil {
			n.region.Close()
		}
		n.closeResources()
	})
	return nil
}

// closeResources releases what New opened; safe on a partly built node.
func (n *Node) closeResources() {
	if n.cluster != nil {
		n.cluster.Close()
	}
	if n.counters.engine != nil {
		n.counters.engine.Close()
	}
	if n.store != nil {
		_ = n.store.Close()
	}
	if n.fwd != nil {
		n.fwd.Close()
	}
	if n.srv.grpcLis != nil {
		_ = n.srv.grpcLis.Close()
	}
	if n.srv.httpLis != nil {
		_ = n.srv.httpLis.Close()
	}
	if n.loops.cancel != nil {
		n.loops.cancel()
	}
}
