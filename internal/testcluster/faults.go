package testcluster

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/weirlimit/weir/node"
)

// errCut is what a dial across a cut link returns.
var errCut = errors.New("testcluster: link cut by the test")

// Faults cuts links between the nodes of a test cluster. A wired node
// sends its peer gRPC traffic (forwarding, replication, hand-off) through
// Faults' dialer and its gossip through Faults' transport wrapper, so the
// test can cut a node off from its peers and heal it again. Clients still
// reach every node, and Raft traffic is not cut. A cut is enforced on the
// sending side of every link (all nodes are wired), so it is symmetric:
// dials fail, gossip packets are dropped, and open peer connections across
// the cut are closed.
type Faults struct {
	mu    sync.Mutex
	addrs map[string]string   // a node's gRPC or gossip address -> its id
	cut   map[string]bool     // isolated node ids
	conns map[*faultConn]bool // open connections dialed through Faults
	drops atomic.Int64        // gossip packets and dials refused
}

// NewFaults returns a Faults with every link up.
func NewFaults() *Faults {
	return &Faults{addrs: map[string]string{}, cut: map[string]bool{}, conns: map[*faultConn]bool{}}
}

// Wire routes the peer links of the node cfg describes through f.
func (f *Faults) Wire(cfg *node.Config) {
	self := cfg.ID
	cfg.PeerDialer = func(ctx context.Context, addr string) (net.Conn, error) {
		return f.dial(ctx, self, addr)
	}
	cfg.WrapGossip = func(t memberlist.Transport) memberlist.Transport {
		return &faultTransport{Transport: t, f: f, self: self}
	}
}

// Learn records n's peer addresses, so links to it can be cut.
func (f *Faults) Learn(n *node.Node) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addrs[n.GRPCAddr()] = n.ID()
	f.addrs[n.GossipAddr()] = n.ID()
}

// Isolate cuts every link between node id and the other nodes.
func (f *Faults) Isolate(id string) {
	f.mu.Lock()
	f.cut[id] = true
	var doomed []*faultConn
	for c := range f.conns {
		if f.blockedLocked(c.from, c.to) {
			doomed = append(doomed, c)
		}
	}
	f.mu.Unlock()
	for _, c := range doomed {
		_ = c.Close()
	}
}

// Heal restores every link.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.cut)
}

// Drops counts gossip packets dropped and dials refused so far.
func (f *Faults) Drops() int64 { return f.drops.Load() }

func (f *Faults) blocked(from, toAddr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	to, ok := f.addrs[toAddr]
	return ok && f.blockedLocked(from, to)
}

func (f *Faults) blockedLocked(from, to string) bool {
	return from != to && (f.cut[from] || f.cut[to])
}

func (f *Faults) dial(ctx context.Context, self, addr string) (net.Conn, error) {
	if f.blocked(self, addr) {
		f.drops.Add(1)
		return nil, errCut
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return f.track(self, addr, c)
}

// track registers c so Isolate can close it; a link cut during the dial
// closes it at once.
func (f *Faults) track(self, addr string, c net.Conn) (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fc := &faultConn{Conn: c, f: f, from: self, to: f.addrs[addr]}
	if fc.to != "" && f.blockedLocked(self, fc.to) {
		_ = c.Close()
		return nil, errCut
	}
	f.conns[fc] = true
	return fc, nil
}

// faultConn is a peer connection Faults can close.
type faultConn struct {
	net.Conn
	f        *Faults
	from, to string
	once     sync.Once
}

func (c *faultConn) Close() error {
	c.once.Do(func() {
		c.f.mu.Lock()
		delete(c.f.conns, c)
		c.f.mu.Unlock()
	})
	return c.Conn.Close()
}

// faultTransport drops gossip across cut links: packets vanish (as on a
// lossy network) and stream dials fail.
type faultTransport struct {
	memberlist.Transport
	f    *Faults
	self string
}

func (t *faultTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.f.blocked(t.self, addr) {
		t.f.drops.Add(1)
		return time.Now(), nil
	}
	return t.Transport.WriteTo(b, addr)
}

func (t *faultTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.f.blocked(t.self, addr) {
		t.f.drops.Add(1)
		return nil, errCut
	}
	c, err := t.Transport.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return t.f.track(t.self, addr, c)
}
