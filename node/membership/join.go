package membership

import (
	"context"
	"errors"
	"fmt"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/weirlimit/weir/internal/sched"
	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/replication"
)

// Join tries the Join addresses once, before the first ring is built:
// Join's push/pull brings the whole member list, so the first ring is
// complete. When it finds no one, Run's join loop retries with backoff
// (logged here). Without Join addresses it does nothing. It fails only when
// the members it reached have another ring shape (clusterview.ShapeError).
func (c *Cluster) Join() error {
	if len(c.cfg.Join) == 0 {
		return nil
	}
	if err := c.join(); err != nil {
		if r := c.shape.Refused(); r != nil {
			return fmt.Errorf("node: refusing to join: %w", r)
		}
		c.log.Warn("gossip join failed; retrying with backoff", "join", c.cfg.Join, "err", err)
		return nil
	}
	c.joined.Store(true)
	return nil
}

// join tries every Join address once (memberlist resolves host names
// again on each call, and joins every address a name stands for). It
// succeeds once this node knows another member: a name that resolves to
// this node alone (the first pod behind a headless Service) is no join.
func (c *Cluster) join() error {
	_, err := c.ml.Join(c.cfg.Join)
	if c.ml.NumMembers() > 1 {
		return nil
	}
	if err == nil {
		err = errors.New("no other member answered")
	}
	return err
}

// joinLoop retries the gossip join with backoff (clusterview.Join) until
// this node has company: it answered a join, or another member joined it
// meanwhile.
func (c *Cluster) joinLoop(ctx context.Context) {
	j := clusterview.NewJoin(time.Now())
	sched.Every(ctx, sched.Real{}, 100*time.Millisecond, func() bool {
		switch j.Step(time.Now(), c.ml.NumMembers() <= 1) {
		case clusterview.JoinWait:
			return false
		case clusterview.JoinAttempt:
			if err := c.join(); err != nil {
				wait := j.Failed(time.Now())
				c.log.Info("gossip join failed; retrying", "join", c.cfg.Join, "in", wait, "err", err)
				return false
			}
		}
		c.log.Info("joined the cluster", "members", c.ml.NumMembers())
		c.joined.Store(true)
		c.Refresh()
		return true
	})
}

// reconnectLoop tries, every clusterview.RejoinEvery, to rejoin the
// members gossip declared dead in the last 15 minutes (Book.LostDue). A
// dead member may only have been cut off (a network split): after a split
// each side holds the other as dead, and memberlist alone does not merge
// them again once the dead notices stopped being gossiped. A join is a
// full state exchange: each side learns it was declared dead, refutes it,
// and the member sets merge (two rounds at most). A member that really
// died refuses the connection.
//
// It also re-announces this node while gossip records it at another
// address (clusterview.Reannounce).
func (c *Cluster) reconnectLoop(ctx context.Context) {
	sched.Every(ctx, sched.Real{}, clusterview.RejoinEvery, func() bool {
		if c.leaving.Load() {
			return false
		}
		var conflictAt time.Time
		if at := c.selfConflict.Load(); at != 0 {
			conflictAt = time.Unix(0, at)
		}
		if clusterview.Reannounce(time.Now(), conflictAt) {
			if addrs := c.gossiped.PeerGossipAddrs(); len(addrs) > 0 {
				k, err := c.ml.Join(addrs)
				c.log.Info("gossip has this node at another address; re-announced", "contacted", k, "err", err)
			}
		}
		if addrs := c.gossiped.LostDue(time.Now()); len(addrs) > 0 {
			if k, err := c.ml.Join(addrs); err != nil && k == 0 {
				c.log.Debug("reconnect to dead members failed", "members", len(addrs), "err", err)
			} else {
				c.log.Info("reconnected to members declared dead", "contacted", k)
			}
		}
		return false
	})
}

// StartLeave marks this node leaving; false if it already was. HandOff
// then tells the others.
func (c *Cluster) StartLeave() bool { return c.leaving.CompareAndSwap(false, true) }

// HandOff, once StartLeave marked this node leaving, gossips it (waiting
// up to gossipWait: the others drop it out of their rings, it stays
// reachable) and waits until every partition it owned has been pulled, or
// no member is left to pull them (ErrNoPeers), or ctx ends. Depart ends
// the gossip membership afterwards.
func (c *Cluster) HandOff(ctx context.Context, gossipWait time.Duration) error {
	var owned []uint32
	if v := c.view.Load(); v != nil && len(v.Members) > 1 {
		owned = v.Ring.OwnedBy(c.cfg.ID)
	}
	if err := c.ml.UpdateNode(gossipWait); err != nil {
		c.log.Warn("gossip update", "err", err)
	}
	c.Refresh()
	// Wait until every partition this node owned has been pulled, or no
	// member is left to pull them (clusterview.Leave). Checked on every
	// route change and on a tick: a member gone or silent changes no route.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	l := clusterview.NewLeave(owned, time.Now)
	for {
		h := leaveHandoff{c: c, ctx: ctx, routes: c.deps.Handoff.Routes()}
		out, left := l.Step(h)
		if out == clusterview.HandedOff {
			return nil
		}
		if out == clusterview.NoPeers {
			return fmt.Errorf("membership: leave: %d partitions not handed off: %w", left, ErrNoPeers)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("membership: leave: %d partitions not handed off: %w", left, ctx.Err())
		case <-h.routes.Changed():
		case <-tick.C:
		}
	}
}

// Depart leaves gossip (after Leave: the others see this node left, not
// dead).
func (c *Cluster) Depart() {
	if err := c.ml.Leave(time.Second); err != nil {
		c.log.Warn("gossip leave", "err", err)
	}
}

// leaveHandoff is what a leave watches: the hand-off's routes, the ring
// and the peers' answers.
type leaveHandoff struct {
	c      *Cluster
	ctx    context.Context
	routes *replication.Routes
}

var _ clusterview.Handoff = leaveHandoff{}

func (h leaveHandoff) Moved(p uint32) bool {
	st, _ := h.routes.State(p)
	return st == replication.PartMoved
}
func (h leaveHandoff) OthersInRing() bool { return h.c.gossiped.OthersInRing() }
func (h leaveHandoff) PeersAnswer() bool  { return h.c.peerAnswers(h.ctx) }

// peerAnswers reports whether any other member in the ring answers a gRPC
// health check (whatever its status) within clusterview.ProbeEvery.
func (c *Cluster) peerAnswers(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, clusterview.ProbeEvery)
	defer cancel()
	answered := make(chan bool)
	asked := 0
	for id, m := range c.ReadMembers() {
		if id == c.cfg.ID || m.Leaving || m.GRPC == "" {
			continue
		}
		cc, err := c.deps.Dialer.Conn(m.GRPC)
		if err != nil {
			continue
		}
		asked++
		go func() {
			_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			answered <- err == nil
		}()
	}
	ok := false
	for range asked {
		ok = <-answered || ok
	}
	return ok
}
