package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weirlimit/weir/internal/sched"
)

// Streams is a Transport that can also open a pipelined stream to a peer.
// Run ships to each destination over one such stream (when its Transport
// has Streams; otherwise over Transport.Replicate calls, one at a time per
// destination, behind the same Stream shape).
type Streams interface {
	// OpenStream opens a stream to peer to; ctx bounds the stream's life.
	// It may wait for a connection, within a bound of its own. An error
	// wrapping ErrNoStream means the peer lacks streams: Run then uses
	// Transport.Replicate for that destination's next stream.
	OpenStream(ctx context.Context, to string) (Stream, error)
}

// Stream is one long-lived, ordered stream of batches to one peer. Run
// calls Send and Close; one reader goroutine per stream calls Recv.
type Stream interface {
	// Send writes b without waiting for the peer to apply it, and keeps
	// nothing of b once it returns. Run keeps at most Config.MaxBatch
	// states unacknowledged on a stream (and at most maxUnacked batches),
	// so Send should never wait on the peer; it must give up within
	// SendTimeout if it does.
	Send(b Batch) error
	// Recv waits for the peer's next acknowledgement: every batch up to
	// and including seq was applied, in order. It returns an error once
	// the stream has failed or was closed.
	Recv() (seq uint64, err error)
	// Close ends the stream; a Recv waiting returns an error.
	Close()
}

// Batch is one message of a Stream.
type Batch struct {
	// Seq numbers the batches of a stream: 1, 2, … without gaps.
	Seq  uint64
	From string
	// States may be empty (a batch that only asks for an acknowledgement).
	States []State
	// Ack asks the peer to acknowledge once it has applied this batch (and
	// so every earlier one): it answers nothing otherwise.
	Ack bool
}

// maxUnacked bounds the batches in flight on one stream.
const maxUnacked = 32

// unaryStream is a Stream over Transport.Replicate: one worker, started
// with the stream through the seam, makes the calls in order, one at a
// time, each bounded by SendTimeout, and acknowledges each asking batch;
// the first refusal ends the stream.
type unaryStream struct {
	t       Transport
	to      string
	timeout time.Duration
	sched   sched.Sched
	ctx     context.Context
	cancel  context.CancelFunc
	q       chan Batch  // room for maxUnacked: Run never has more in flight
	acks    chan uint64 // closed when the worker ends, after err is set
	err     error       // why the worker ended; read after acks is closed
}

// errStreamFull is a broken promise of Run's (more batches in flight than
// maxUnacked); the stream fails rather than block Run.
var errStreamFull = errors.New("replication stream queue full")

func newUnaryStream(ctx context.Context, t Transport, to string, cfg Config) *unaryStream {
	ctx, cancel := context.WithCancel(ctx)
	s := &unaryStream{t: t, to: to, timeout: cfg.SendTimeout, sched: cfg.Sched, ctx: ctx, cancel: cancel,
		q: make(chan Batch, maxUnacked), acks: make(chan uint64, maxUnacked)}
	cfg.Sched.Go(s.work)
	return s
}

func (s *unaryStream) work() {
	defer close(s.acks)
	for {
		var b Batch
		select {
		case <-s.ctx.Done():
			s.err = s.ctx.Err()
			return
		case b = <-s.q:
		}
		if len(b.States) > 0 {
			ctx, cancel := s.sched.WithTimeout(s.ctx, s.timeout)
			err := s.t.Replicate(ctx, s.to, b.From, b.States)
			cancel()
			if err != nil {
				s.err = err
				return
			}
		}
		if b.Ack {
			select {
			case s.acks <- b.Seq:
			case <-s.ctx.Done():
				s.err = s.ctx.Err()
				return
			}
		}
	}
}

func (s *unaryStream) Send(b Batch) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	select {
	case s.q <- b:
		return nil
	default:
		return fmt.Errorf("%w: %d batches", errStreamFull, len(s.q))
	}
}

func (s *unaryStream) Recv() (uint64, error) {
	seq, ok := <-s.acks
	if !ok {
		return 0, s.err
	}
	return seq, nil
}

func (s *unaryStream) Close() { s.cancel() }
