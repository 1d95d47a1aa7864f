package replication

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/weirlimit/weir/internal/sched"
)

// Config tunes a Replicator. Start from DefaultConfig and set Self.
type Config struct {
	// Self is the local node id, sent as the "from" of every Replicate and
	// never used as a destination.
	Self string
	// Interval is how often pending changes are flushed. A change is also
	// flushed early when MaxBatch changes are pending.
	Interval time.Duration
	// MaxBatch is the most states sent in one Replicate call.
	MaxBatch int
	// QueueLen bounds the distinct counter ids waiting in the inbox, and
	// separately the distinct ids waiting for any one destination (besides
	// those in its one send in flight). Changes to
	// an id already waiting replace it (newest wins) and never count against
	// the bound; a new id beyond it evicts the oldest waiting inbox entry (or,
	// in a destination's retry queue, is not queued for that destination).
	// Either way Stats().Dropped is incremented.
	QueueLen int
	// SendTimeout bounds each Replicate call, and on a stream the wait
	// for an acknowledgement asked for (the stream then fails and its
	// unacknowledged states are sent again on a new one).
	SendTimeout time.Duration
	// AckInterval is how often, at most, a destination is asked to
	// acknowledge the batches of its stream while they flow (besides when
	// its stream is half full), and how long after the last ship Run asks
	// once more when only acknowledgements are awaited.
	// Acknowledgements only free the owner's copies and measure Lag: a
	// replica applies each batch as it arrives, so the loss bound does not
	// depend on them.
	AckInterval time.Duration
	// Logger receives send failures and recoveries (one line per
	// transition, not per attempt). Nil discards.
	Logger *slog.Logger
	// Now is the clock used to age unshipped changes (Stats().Lag) and to
	// stamp successes. Nil means Sched's.
	Now func() time.Time
	// Sched runs the flush ticker, the sends, stream opens and readers (as
	// concurrent work) and their deadlines. Nil means production
	// (sched.Real).
	Sched sched.Sched
	// Inline makes a replicator with no Run and no ticker: its caller
	// calls Flush instead (neither Interval nor the early flush at
	// MaxBatch applies), and each send started through Sched records its
	// own result. A simulation steps it this way.
	Inline bool
}

// DefaultConfig returns the defaults: flush every 5ms, at most 4096 states per
// RPC, 65536 pending ids, 1s send timeout, an acknowledgement asked at most
// every 100ms. Self must still be set.
func DefaultConfig() Config {
	return Config{
		Interval:    5 * time.Millisecond,
		MaxBatch:    4096,
		QueueLen:    65536,
		SendTimeout: time.Second,
		AckInterval: 100 * time.Millisecond,
		Logger:      slog.New(slog.DiscardHandler),
		Sched:       sched.Real{},
	}
}

// Validate reports the first field out of range, wrapping ErrInvalidConfig.
// Nil Logger, Now and Sched are allowed and defaulted by NewReplicator.
func (c Config) Validate() error {
	switch {
	case c.Self == "":
		return fmt.Errorf("%w: Self is empty", ErrInvalidConfig)
	case c.Interval <= 0:
		return fmt.Errorf("%w: Interval %v must be > 0", ErrInvalidConfig, c.Interval)
	case c.MaxBatch <= 0:
		return fmt.Errorf("%w: MaxBatch %d must be > 0", ErrInvalidConfig, c.MaxBatch)
	case c.QueueLen <= 0:
		return fmt.Errorf("%w: QueueLen %d must be > 0", ErrInvalidConfig, c.QueueLen)
	case c.SendTimeout <= 0:
		return fmt.Errorf("%w: SendTimeout %v must be > 0", ErrInvalidConfig, c.SendTimeout)
	case c.AckInterval <= 0:
		return fmt.Errorf("%w: AckInterval %v must be > 0", ErrInvalidConfig, c.AckInterval)
	}
	return nil
}
