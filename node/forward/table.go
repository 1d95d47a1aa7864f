package forward

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/weirlimit/weir/limit"
)

// ErrClosed is returned once the table is closed (or its context ended).
// It is limit.ErrClosed, so the edges answer Unavailable / 503.
var ErrClosed = limit.Errorf(limit.ErrClosed, "forward: closed")

// Members resolves a member id to its gRPC address in the current view;
// an error says why there is none (no view yet, an unknown member).
type Members interface {
	PeerAddr(id string) (string, error)
}

// Config is what a Table needs.
type Config struct {
	Self        string            // this node's id (a span attribute)
	Members     Members           // member id to address
	DialOptions []grpc.DialOption // every peer connection's, credentials included (see DialOptions)
	// Registerer takes the forward metrics (weir_forwarded_items_total,
	// weir_forward_batch_items, weir_forward_destinations); nil: none.
	Registerer prometheus.Registerer
	Tracer     trace.Tracer  // nil: tracing off
	Timeout    time.Duration // a forwarded request's deadline (Config.ForwardTimeout of the node)
	MaxBatch   int           // the most items coalesced in one request
	Inflight   int           // the most requests in flight on one destination's stream
}

// Table is the forwarder of each destination and the connection pool they
// (and the node's other peer clients) dial through. The forwarder map is
// replaced, never changed (under mu, by forwarder and Prune), so the check
// path finds a forwarder with an atomic load.
type Table struct {
	cfg    Config
	ctx    context.Context // ends every stream and wait when done
	cancel context.CancelFunc
	pool   *pool

	mu sync.Mutex
	m  atomic.Pointer[map[string]*forwarder]

	gmu    sync.Mutex // guards stopped and wg.Add
	closed bool       // Close began: no more goroutines
	wg     sync.WaitGroup

	forwarded prometheus.Counter
	batch     prometheus.Histogram
}

// New builds a table whose streams live until ctx ends or Close.
func New(ctx context.Context, cfg Config) (*Table, error) {
	if cfg.Members == nil {
		return nil, errors.New("forward: no Members")
	}
	if cfg.Timeout <= 0 || cfg.MaxBatch < 1 || cfg.Inflight < 1 {
		return nil, fmt.Errorf("forward: timeout %v, max batch %d, inflight %d: want > 0", cfg.Timeout, cfg.MaxBatch, cfg.Inflight)
	}
	t := &Table{cfg: cfg, pool: newPool(cfg.DialOptions)}
	t.forwarded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "weir_forwarded_items_total", Help: "Items forwarded to their owner.",
	})
	t.batch = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "weir_forward_batch_items", Help: "Items per forwarded RPC.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 7),
	})
	if r := cfg.Registerer; r != nil {
		dests := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_forward_destinations", Help: "Members this node keeps forwarders (coalescing senders and streams) to."},
			func() float64 { return float64(t.Len()) })
		for _, c := range []prometheus.Collector{t.forwarded, t.batch, dests} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("forward: metrics: %w", err)
			}
		}
	}
	t.ctx, t.cancel = context.WithCancel(ctx)
	return t, nil
}

// Conn returns the pooled connection to a peer address.
func (t *Table) Conn(addr string) (*grpc.ClientConn, error) { return t.pool.conn(addr) }

// MemberConn returns the connection to the member id in the current view.
func (t *Table) MemberConn(id string) (*grpc.ClientConn, error) {
	addr, err := t.cfg.Members.PeerAddr(id)
	if err != nil {
		return nil, err
	}
	return t.pool.conn(addr)
}

// Call is one check's items bound for one destination, from Start to
// Wait. Calls are pooled; a call whose caller gave up before its answer
// is left to the garbage collector instead, as the answer may still come.
type Call struct {
	f     *forwarder
	idx   []int // the items' positions in the caller's batch
	start error // why Start queued nothing

	items []limit.Item
	res   []limit.Result
	err   error
	done  chan struct{} // one token per answer
	tried bool          // already resent once (never written on a stream that had ended)
}

var callPool = sync.Pool{New: func() any { return &Call{done: make(chan struct{}, 1)} }}

// Start queues copies of items[idx] for dest (see appendItems: each
// carries at least rule version ver and its hop count, one more when the
// items were forwarded to this node), coalesced with other callers'
// items; Wait returns the answer. The caller keeps items and idx
// unchanged until Wait returns.
func (t *Table) Start(ctx context.Context, dest string, items []limit.Item, idx []int, ver uint64, forwarded bool) *Call {
	f := t.forwarder(dest)
	c := callPool.Get().(*Call)
	c.f, c.idx = f, idx
	c.start = f.start(ctx, c, items, idx, ver, forwarded)
	return c
}

// Wait copies the answer into res at the call's positions (one result per
// item, in order), or returns why there is none: the error of Start, a
// failed or timed-out request, the member gone, ctx done or the table
// closed.
func (c *Call) Wait(ctx context.Context, res []limit.Result) error {
	if err := c.start; err != nil {
		c.release()
		return err
	}
	f := c.f
	select {
	case <-c.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-f.t.ctx.Done():
		return ErrClosed
	case <-f.stopped:
		// The member is gone: a call already answered keeps its answer,
		// any other fails rather than wait for a stream torn down.
		select {
		case <-c.done:
		default:
			return f.gone()
		}
	}
	err := c.err
	if err == nil {
		for j, i := range c.idx {
			res[i] = c.res[j]
		}
	}
	c.release()
	return err
}

func (c *Call) release() {
	clear(c.res)
	c.res, c.err, c.start, c.f, c.idx = c.res[:0], nil, nil, nil, nil
	callPool.Put(c)
}

func (t *Table) forwarder(dest string) *forwarder {
	if m := t.m.Load(); m != nil {
		if f, ok := (*m)[dest]; ok {
			return f
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var cur map[string]*forwarder
	if m := t.m.Load(); m != nil {
		cur = *m
	}
	if f, ok := cur[dest]; ok {
		return f
	}
	f := &forwarder{t: t, dest: dest, stopped: make(chan struct{})}
	next := make(map[string]*forwarder, len(cur)+1)
	for d, g := range cur {
		next[d] = g
	}
	next[dest] = f
	t.m.Store(&next)
	return f
}

// Prune stops the forwarders of destinations live does not hold (members
// that left or died): their streams end and their queued calls fail. A
// member that comes back gets a new forwarder.
func (t *Table) Prune(live func(id string) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.m.Load()
	if m == nil {
		return
	}
	var next map[string]*forwarder
	for dest, f := range *m {
		if live(dest) {
			continue
		}
		if next == nil {
			next = make(map[string]*forwarder, len(*m))
			for d, g := range *m {
				next[d] = g
			}
		}
		close(f.stopped)
		f.close(f.gone())
		delete(next, dest)
	}
	if next != nil {
		t.m.Store(&next)
	}
}

// Len is how many destinations have a forwarder.
func (t *Table) Len() int {
	if m := t.m.Load(); m != nil {
		return len(*m)
	}
	return 0
}

// Close ends every stream, joins the table's goroutines, fails the calls
// still queued and closes the connections. It may be called more than once.
func (t *Table) Close() {
	t.gmu.Lock()
	t.closed = true
	t.gmu.Unlock()
	t.cancel()
	t.wg.Wait()
	t.mu.Lock()
	if m := t.m.Load(); m != nil {
		for _, f := range *m {
			f.close(ErrClosed)
		}
	}
	t.mu.Unlock()
	t.pool.close()
}

// goFunc runs f on a goroutine Close joins; false once Close began.
func (t *Table) goFunc(f func()) bool {
	t.gmu.Lock()
	defer t.gmu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}
