package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
	"time"

	"github.com/weirlimit/weir/client"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/ring"
)

// SDKOptions tune the gateway SDK clients the weir target makes.
type SDKOptions struct {
	// GatewayPrefix names the gateways to the cluster ("<prefix>-<i>"); it
	// must differ between benches that run against one cluster at once.
	GatewayPrefix string
	// InFlight and MaxBatch override the client's defaults when > 0.
	InFlight, MaxBatch int
	// Linger overrides the client's default when non-zero; negative: no
	// linger.
	Linger time.Duration
	// ReadyTimeout bounds the wait for a client's first rule set.
	ReadyTimeout time.Duration
	// TLS, when set, is every client's TLS config (a gateway certificate).
	TLS *tls.Config
}

// SDKFactory returns a Factory whose gateway i is its own client.Client
// (own connections, coalescing senders, ring view, leases and
// blocked-until cache) bootstrapped from seeds (gRPC addresses). A gateway
// is returned only once it holds the cluster's rules. ctx bounds that wait.
func SDKFactory(ctx context.Context, seeds []string, o SDKOptions) Factory {
	return func(i int) (Target, error) {
		cfg := client.DefaultConfig()
		cfg.Cluster = seeds
		cfg.GatewayID = o.GatewayPrefix + "-" + strconv.Itoa(i)
		cfg.TLS = o.TLS
		if o.InFlight > 0 {
			cfg.InFlight = o.InFlight
		}
		if o.MaxBatch > 0 {
			cfg.MaxBatch = o.MaxBatch
		}
		if o.Linger != 0 {
			cfg.Linger = max(o.Linger, 0)
		}
		c, err := client.New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		d := o.ReadyTimeout
		if d <= 0 {
			d = 30 * time.Second
		}
		rctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		if err := c.WaitReady(rctx); err != nil {
			_ = c.Close()
			return nil, err
		}
		return sdkGateway{c: c}, nil
	}
}

// sdkGateway is one simulated gateway: one SDK client.
type sdkGateway struct{ c *client.Client }

var (
	_ Target       = sdkGateway{}
	_ GroupChecker = sdkGateway{}
	_ Batcher      = sdkGateway{}
)

func (g sdkGateway) Check(ctx context.Context, key, rule string, cost int64) (bool, error) {
	return verdict(g.c.CheckKey(ctx, key, cost, rule))
}

func (g sdkGateway) CheckLocal(ctx context.Context, key, rule string, cost int64) (bool, bool, error) {
	d, err := g.c.CheckKey(ctx, key, cost, rule)
	ok, err := verdict(d, err)
	return ok, d.Local, err
}

func (g sdkGateway) CheckGroup(ctx context.Context, key string, rules []string, cost int64) (bool, error) {
	return verdict(g.c.CheckKey(ctx, key, cost, rules...))
}

func (g sdkGateway) Close() error { return g.c.Close() }

func (g sdkGateway) Batching() (rpcs, items uint64) {
	st := g.c.Stats()
	return st.RPCs, st.Items
}

func (g sdkGateway) Local() (leaseHits, blockedHits, autoLeases uint64) {
	st := g.c.Stats()
	return st.LeaseHits, st.BlockedHits, st.AutoLeases
}

// verdict is the bench's reading of an SDK decision: a rule decided by its
// fail mode (the cluster did not answer in the rule's timeout, or answered
// with an error) is not a cluster decision, so it is an error here.
func verdict(d client.Decision, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	for _, l := range d.Limits {
		if l.Fallback {
			return false, fmt.Errorf("%w: rule %s on %s decided by its fail mode", ErrUndecided, l.Rule, l.Key)
		}
	}
	return d.Allowed, nil
}

// Cluster is a snapshot of a Weir cluster's live members, read once.
type Cluster struct {
	members []*weirv1.Member // alive or suspect
	ring    *ring.Ring
}

// ReadCluster asks the seeds (gRPC addresses), in turn, for the member
// list and builds the ring the nodes use.
func ReadCluster(ctx context.Context, seeds []string, tc *tls.Config) (*Cluster, error) {
	if len(seeds) == 0 {
		return nil, fmt.Errorf("%w: no cluster addresses", ErrInput)
	}
	var last error
	for _, a := range seeds {
		resp, err := members(ctx, a, tc)
		if err != nil {
			last = err
			continue
		}
		return newCluster(resp)
	}
	return nil, fmt.Errorf("bench: reading cluster members: %w", last)
}

func newCluster(resp *weirv1.MembersResponse) (*Cluster, error) {
	c := &Cluster{}
	var ids []string
	for _, m := range resp.GetMembers() {
		if m.GetState() != "alive" && m.GetState() != "suspect" {
			continue
		}
		c.members = append(c.members, m)
		ids = append(ids, m.GetId())
	}
	r, err := ring.New(ids, ring.Config{
		PartitionCount:    int(resp.GetPartitionCount()),
		ReplicationFactor: int(resp.GetReplicationFactor()),
		Load:              resp.GetLoad(),
		Replicas:          ring.DefaultReplicas,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: ring from members: %w", err)
	}
	c.ring = r
	return c, nil
}

// Owner returns the id of the member that owns key.
func (c *Cluster) Owner(key string) string { return c.ring.Owner(key) }

// HTTPAddrs returns the members' HTTP addresses.
func (c *Cluster) HTTPAddrs() []string {
	out := make([]string, 0, len(c.members))
	for _, m := range c.members {
		if a := m.GetHttpAddr(); a != "" {
			out = append(out, a)
		}
	}
	return out
}
