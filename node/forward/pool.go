package forward

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/weirlimit/weir/internal/grpcwin"
)

// pool keeps one gRPC connection per peer address. The map is replaced,
// never changed, so the check path reads it without a lock; mu serializes
// the (rare) dials.
type pool struct {
	mu    sync.Mutex
	conns atomic.Pointer[map[string]*grpc.ClientConn] // nil once closed
	opts  []grpc.DialOption                           // credentials included
}

func newPool(opts []grpc.DialOption) *pool {
	p := &pool{opts: opts}
	p.conns.Store(&map[string]*grpc.ClientConn{})
	return p
}

func (p *pool) conn(addr string) (*grpc.ClientConn, error) {
	if m := p.conns.Load(); m != nil {
		if c, ok := (*m)[addr]; ok {
			return c, nil
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.conns.Load()
	if m == nil {
		return nil, ErrClosed
	}
	if c, ok := (*m)[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, err
	}
	next := make(map[string]*grpc.ClientConn, len(*m)+1)
	for a, cc := range *m {
		next[a] = cc
	}
	next[addr] = c
	p.conns.Store(&next)
	return c, nil
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := p.conns.Swap(nil); m != nil {
		for _, c := range *m {
			_ = c.Close()
		}
	}
}

// DialOptions are the options of every peer connection besides its
// credentials. Reconnects back off to at most one second (gRPC's default
// is two minutes), so a peer that comes back after a network split or a
// restart is reachable again as soon as gossip says it is alive. dialer,
// when set, replaces the plain TCP dial (tests put fronts in the way).
func DialOptions(dialer func(context.Context, string) (net.Conn, error)) []grpc.DialOption {
	bo := backoff.DefaultConfig
	bo.BaseDelay = 100 * time.Millisecond
	bo.MaxDelay = time.Second
	opts := append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second})}, grpcwin.DialOptions()...)
	if dialer != nil {
		opts = append(opts, grpc.WithContextDialer(dialer))
	}
	return opts
}
