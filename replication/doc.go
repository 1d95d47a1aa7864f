// Package replication ships counter states from a partition's owner to its
// replicas, holds the copies a replica receives until they are promoted or
// handed off, and moves partitions between nodes when the ring changes:
// the partition state machine and the hand-off protocol. It never
// interprets the state words (State.A, B, C, Log) and knows no rule
// semantics; it imports only the standard library, internal/sched and
// internal/bug (switches that put back fixed hand-off defects, dead code
// outside the weirbugs build tag), not ring, rulesraft or node: the node
// hands it rings as Assignments and member ids.
//
// # Parts
//
//   - Replicator (owner side): shard goroutines call Enqueue after each
//     batch; Run flushes Config.Interval after the change that woke it
//     (then again every Interval while changes wait, and no timer once
//     nothing does), or early once MaxBatch changes are pending, grouping them by
//     destination via Placement and writing each group to the
//     destination's one pipelined Stream (Streams; a Transport without
//     streams is driven through the same shape, one Replicate call at a
//     time). Acknowledgements are cumulative and asked for at most every
//     AckInterval (pipeline.go).
//   - Resync (owner side): queues a snapshot of a partition's counters for a
//     replica that just joined its replica list, ordered with the change
//     stream (see Resync). PlanResync says which partitions need it.
//   - Store (replica side): Apply is called by the peer gRPC handler; Take,
//     Peek and Drop by the node on promotion, hand-off and ring change.
//   - PlanHandoff: a pure function from ring moves and liveness to the
//     partitions to fetch, give away and forget. No I/O, no clock.
//   - Partitions: the partition state machine, pure: Step(event) returns
//     the effects to run; events (RingChanged, Arrived, Ask, HandBack,
//     Tick) carry their time. Scenario files in testdata/partitions pin
//     its behaviour (go test -run Scenarios -update rewrites them).
//   - Router: where a check sends an item of a partition (decide, wait
//     for the pull, forward, unavailable), a pure function of the table
//     (Routes or Partitions) and the node's View of the ring; no item is
//     passed on past MaxHops. Scenario files in testdata/route.
//   - Handoff: the hand-off protocol around Partitions. Its Run goroutine
//     is the machine's one owner: events arrive on one channel, it
//     publishes an immutable Routes snapshot after each (the check path
//     reads it without locks), and runs the effects: pulls and resyncs as
//     work it joins, dropping counters and copies inline. Serve is
//     the holder's side (a peer's ask), on the caller's goroutine. It
//     talks to the shard engine through Counters (export, import, drop)
//     and to peers through Peers, both defined here.
//   - Pins: a check that decides a partition locally holds its fence's
//     read lock (Pin, Unpin; several partitions in ascending order); a
//     hand-off publishes the partition as moved and then takes the write
//     lock once before it exports, so no decision falls between.
//
// # Goroutines and ownership
//
// Enqueue runs on any goroutine and never blocks on Run or the network: it
// takes the Replicator's mutex for the length of one batch to coalesce into
// the current inbox generation (a bounded FIFO ring plus an id index).
// Run is the single goroutine that owns everything else: the spare inbox
// generation (swapped with the current one under the mutex in O(1) at each
// flush), the per-destination queues and streams, and the Placement cache.
// Run writes batches to the streams itself (Stream.Send only queues; Run
// keeps at most MaxBatch states and maxUnacked batches unacknowledged per
// stream). Through the seam it starts one goroutine per stream open (an
// open may wait for a connection) and one reader per open stream, which
// reports acknowledgements and the stream's end to Run on a channel; no
// goroutine is started per flush. Run closes its streams when ctx ends and
// drains the channel until every opener and reader has reported its end,
// so none outlives Run. Stats reads atomics that Run publishes, plus the
// inbox under the mutex. Store guards its map with its own mutex (it is not
// on a check's path). Lock order: flushMu (held by a flush's swap and by
// Resync) before the Replicator's mutex; that mutex and the stats mutex are
// never held together.
//
// Goroutines, tickers, timers, deadlines and the clock come from the seam
// (Config.Sched, HandoffConfig.Sched; internal/sched): production passes
// sched.Real, a test or simulation a deterministic schedtest.Sim. No
// message order follows map iteration: a pull asks its sources, each ask
// round and the broadcast to live members in id order; a flush sends to
// destinations in id order, each batch in the order of its counters'
// first change.
//
// A simulation also drives the two loops itself (Config.Inline,
// HandoffConfig.Inline). An Inline Replicator has no Run: its caller
// calls Flush, which starts the sends through the seam, and each send
// records its own result (what Run owns is then guarded by a mutex, taken
// before flushMu). An Inline Handoff has no Run and no ticker: ChangeRing,
// Serve and Tick apply their event on the caller's goroutine, one at a
// time, and the pulls and resyncs it starts go to the seam once the event
// is done. Both run the code Run runs (flush, send, finish; apply).
//
// # Invariants
//
//   - Newest wins: for each counter id a destination is sent only the latest
//     state known at flush time; a refused send is retried at the next flush
//     with whatever is newest then, never queued behind newer states.
//   - Bounded memory: the inbox holds at most QueueLen distinct ids (beyond
//     it the oldest is evicted), and each destination's queue at most
//     QueueLen; every change given up this way is counted in Dropped.
//     States refused by a destination that is no longer placed for their
//     partition are discarded at the next flush (the new replica gets them
//     from later changes or from hand-off).
//   - Enqueue copies what it keeps, Log slices included; the slices handed to
//     Transport are never written afterwards.
//
// # Ordering
//
// A destination's batches travel in order on one stream (an Inline
// replicator keeps one send in flight per destination instead), so a
// replica applies each counter's states in change order, some skipped
// (coalesced). When a stream fails, the states it had not had acknowledged
// go back to the queue (newest per id wins) and travel on the next stream.
// Across counters there is no order. One exception: a batch of a stream
// that failed on the owner's side (a timeout) may still be applied late by
// the replica, after the next stream's; the replica then holds a stale copy
// of those counters until they change again. Destinations are independent.
//
// # What a failover loses
//
// Replication is asynchronous. When an owner dies, the promoted replica
// lacks the changes that had not reached it: normally those of the last
// Interval plus one send time (5ms + a one-way trip with the defaults; a
// change waits at most Interval for its flush, also the first after a
// quiet spell); while a destination refuses sends, everything since its
// oldest refused change. Stats().Lag is the age of the oldest change not
// yet acknowledged, so it bounds this window from above (by up to
// AckInterval more under steady traffic, as acknowledgements are sparse). Lost changes are
// decrements that did happen, so a limit can over-admit by at most the
// traffic of that window for the partitions the dead node owned. Dropped
// changes widen it the same way.
package replication
