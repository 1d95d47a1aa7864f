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
// the servers in front of them.
type Node struct {
	cfg Config
	log *slog.Logger
	now func() int64

	store    *rulesraft.Store
	engine   *shard.Engine
	repl     *replication.Replicator
	replicas *replication.Store
	api      *api.Server
	cluster  *membership.Cluster // gossip, members, the cluster view, join and leave
	handoff  *replication.Handoff
	fwd      *forward.Table // forwarders and peer connections (node/forward)
	met      *metrics
	sec      *security.Guard // TLS, roles, admission, keys and proofs (node/security)
	region   *region.Agent   // nil unless Config.Region is set
	tracer   trace.Tracer    // nil: tracing off (tracing.go)

	grpcSrv *grpc.Server
	health  *health.Server // grpc.health.v1: SERVING once ready, NOT_SERVING from Leave on
	httpSrv *http.Server
	grpcLis net.Listener
	httpLis net.Listener
	router  *router.Router // the check path (node/router)
	ops     *ops.Ops       // the operators' view and its edge (node/ops)

	durable *persist.Keeper // durable counters: what was loaded, the writer

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
}

// New validates cfg, opens the Raft store and binds every listener. Call
// Start to begin serving.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
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
		return nil, fmt.Errorf("node: data dir: %w", err)
	}
	keys, keyring, err := security.LoadKeys(cfg.securitySettings(), cfg.Logger.With("node", cfg.ID))
	if err != nil {
		return nil, err
	}
	cfg.GossipKeys, cfg.GossipAddr, cfg.RaftAddr, cfg.Advertise = keys.Keys, keys.GossipAddr, keys.RaftAddr, keys.Advertise
	n := &Node{
		cfg: cfg,
		log: cfg.Logger.With("node", cfg.ID),
		now: cfg.Now,
	}
	n.cluster = n.newCluster(keyring)
	if cfg.Tracer != nil {
		n.tracer = cfg.Tracer.Tracer(tracing.Name)
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.met = newMetrics(cfg.Registry)
	boot := cfg.Sched.Uint64() | 1
	if n.sec, err = n.newSecurity(boot, keyring); err != nil {
		return nil, err
	}
	if n.fwd, err = n.newForwarders(); err != nil {
		return nil, err
	}

	ok := false
	defer func() {
		if !ok {
			n.closeResources()
		}
	}()

	n.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("node: grpc listen: %w", err)
	}
	n.httpLis, err = net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("node: http listen: %w", err)
	}

	adv, err := membership.NewAdvertiser(cfg.Advertise, cfg.GossipAddr, cfg.ResolveTimeout, n.log)
	if err != nil {
		return nil, err
	}
	rc := rulesraft.DefaultConfig()
	rc.ID = cfg.ID
	rc.DataDir = filepath.Join(cfg.DataDir, "raft")
	rc.BindAddr = cfg.RaftAddr
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
	n.store, err = rulesraft.Open(rc)
	if err != nil {
		return nil, fmt.Errorf("node: rules store: %w", err)
	}

	sc := shard.DefaultConfig()
	sc.Shards = cfg.Shards
	sc.MaxKeys = cfg.MaxKeys
	sc.AutoLeaseRate, sc.AutoLeaseGateways = cfg.AutoLeaseRate, cfg.AutoLeaseGateways
	sc.Now = cfg.Now
	sc.Sched = cfg.Sched
	sc.OnChange = func(states []replication.State) { n.repl.Enqueue(states) }
	n.engine, err = shard.New(sc)
	if err != nil {
		return nil, fmt.Errorf("node: shards: %w", err)
	}
	rcfg := replication.DefaultConfig()
	rcfg.Self = cfg.ID
	rcfg.Interval = cfg.ReplicationInterval
	rcfg.Sched = cfg.Sched
	rcfg.Logger = n.log.With("component", "replication")
	n.repl, err = replication.NewReplicator(rcfg, peer.NewTransport(n.fwd, cfg.Now), n.replicaPlacement)
	if err != nil {
		return nil, fmt.Errorf("node: replicator: %w", err)
	}
	n.replicas = replication.NewBoundedStore(replication.StoreLimits{Partitions: uint32(cfg.Ring.PartitionCount), MaxStates: maxReplicaStates})
	hc := replication.DefaultHandoffConfig(cfg.ID, cfg.Ring.PartitionCount)
	hc.ResyncRetry = cfg.ReplicationInterval
	hc.Now = cfg.Now
	hc.Sched = cfg.Sched
	hc.Logger = n.log.With("component", "handoff")
	n.handoff, err = replication.NewHandoff(hc, n.engine, peer.Puller{Conns: n.fwd, Now: cfg.Now}, n.replicas, n.repl)
	if err != nil {
		return nil, fmt.Errorf("node: hand-off: %w", err)
	}
	n.durable = persist.NewKeeper(persist.KeeperConfig{ID: cfg.ID, DataDir: cfg.DataDir, Solo: len(cfg.Join) == 0,
		Partitions: uint32(cfg.Ring.PartitionCount), Interval: cfg.PersistInterval, RestoreWait: cfg.RestoreWait,
		MinIdle: sc.SnapshotMinIdle, Now: cfg.Now, Sched: cfg.Sched, Logger: n.log.With("component", "persist"),
		Counters: n.engine, Copies: n.replicas, Ring: n.publishedRing, Leaving: n.cluster.Leaving})
	n.met.registerFuncs(cfg.Registry, n)
	n.initOps()

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
		return nil, fmt.Errorf("node: api: %w", err)
	}
	mux := http.NewServeMux()
	n.grpcSrv = grpc.NewServer(append(grpcwin.ServerOptions(), n.sec.ServerOptions()...)...)
	n.api.Register(n.grpcSrv)
	if err := n.registerGateways(n.grpcSrv, mux); err != nil {
		return nil, err
	}
	weirv1.RegisterPeerServer(n.grpcSrv, n.newPeerServer())
	if cfg.Region.Region != "" {
		if n.region, err = n.newRegionAgent(); err != nil {
			return nil, fmt.Errorf("node: region: %w", err)
		}
		weirv1.RegisterRegionServer(n.grpcSrv, n.region)
	}
	if n.router, err = n.newRouter(); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.ops.RegisterGRPC(n.grpcSrv)
	n.health = health.NewServer()
	for svc := range n.grpcSrv.GetServiceInfo() {
		n.health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(n.grpcSrv, n.health)
	if cfg.GRPCReflection {
		reflection.Register(n.grpcSrv)
	}

	n.newKeyringAPI().Register(mux)
	n.ops.Register(mux)
	mux.Handle("/", n.api.Handler())
	n.httpSrv = n.sec.NewHTTPServer(mux)

	meta := membership.Meta{
		Boot:     boot,
		GRPC:     adv.Addr(n.grpcLis.Addr().String()),
		HTTP:     adv.Addr(n.httpLis.Addr().String()),
		Raft:     n.store.Addr(),
		Features: membership.AdvertisedFeatures(cfg.WithoutFeatures),
	}
	if err := n.cluster.Listen(meta, adv.GossipIP()); err != nil {
		return nil, err
	}
	ok = true
	return n, nil
}

// Start serves the APIs and runs the membership, replication and shard loops.
func (n *Node) Start() error {
	if why := n.cluster.NoLeaderReason(); why != "" {
		n.log.Warn(why)
	}
	n.engine.Start()
	n.durable.Start(n.ctx) // a solo node's counters, before it serves
	n.goFunc(func() { _ = n.durable.Run(n.ctx) })
	n.goFunc(func() { n.ops.Run(n.ctx) })
	n.goFunc(func() { _ = n.repl.Run(n.ctx) })
	n.goFunc(func() { _ = n.handoff.Run(n.ctx) })
	n.goFunc(func() {
		if err := n.grpcSrv.Serve(n.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("grpc server stopped", "err", err)
		}
	})
	n.goFunc(func() {
		if err := n.sec.ServeHTTP(n.httpSrv, n.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
	n.every(100*time.Millisecond, func() bool {
		if n.Ready() != nil {
			return false
		}
		for svc := range n.grpcSrv.GetServiceInfo() {
			n.health.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
		}
		n.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		return true
	})
}

// every calls f each d until f reports done or the node closes.
func (n *Node) every(d time.Duration, f func() (done bool)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
			if f() {
				return
			}
		}
	}
}

// maxReplicaStates caps the replica copies a node holds (about 100 bytes
// each): far above what the owners' key caps let them ship in practice,
// low enough that a misbehaving peer cannot exhaust memory.
const maxReplicaStates = 4 << 20

// goFunc runs f on a goroutine the node joins on Close.
func (n *Node) goFunc(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
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
	n.health.Shutdown()
	ctx, cancel := context.WithTimeout(ctx, n.cfg.LeaveTimeout)
	defer cancel()
	err := n.cluster.HandOff(ctx, n.cfg.LeaveTimeout/4)
	n.durable.Write() // what this node still holds: all of it when nobody took its partitions
	n.cluster.Depart()
	return err
}

// Close stops the node hard (no hand-off): servers, loops, gossip, Raft.
func (n *Node) Close() error {
	n.closed.Do(func() {
		n.cancel()
		n.api.Close()
		n.grpcSrv.Stop()
		sctx, c := context.WithTimeout(context.Background(), time.Second)
		_ = n.httpSrv.Shutdown(sctx)
		c()
		n.wg.Wait()
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
	if n.engine != nil {
		n.engine.Close()
	}
	if n.store != nil {
		_ = n.store.Close()
	}
	if n.fwd != nil {
		n.fwd.Close()
	}
	if n.grpcLis != nil {
		_ = n.grpcLis.Close()
	}
	if n.httpLis != nil {
		_ = n.httpLis.Close()
	}
	if n.cancel != nil {
		n.cancel()
	}
}
