// Package shard is the in-memory decision engine of a Weir node.
//
// # Ownership
//
// Partition p belongs to shard p % Config.Shards, and a shard's counters
// are changed by one thread of execution at a time: whoever holds the
// shard's lock. Each shard owns a map partition → (counter id → entry) and
// every scratch buffer it uses; only the holder of its lock touches them.
// Other goroutines read its statistics through atomics.
//
// # Deciding: inline when uncontended, batched when busy
//
// Check splits its items by shard and submits one request per shard, one
// shard after the other (a goroutine holds at most one shard's lock at a
// time, so locks have no order to keep). A submit first tries the shard's
// lock (TryLock): when it is free, the caller's own goroutine decides its
// request at once, with no goroutine hand-off. When it is busy, the
// request queues on the shard's bounded channel (QueueLen) and the caller
// waits for its answer; the holder decides everything queued, in batches
// of up to MaxBatch requests, before it releases the lock, and after
// releasing it looks at the queue once more, so a request never waits in
// the queue while the lock is free. A caller's goroutine decides at most 4
// batches this way (its own and three of others') before it leaves what is
// still queued to the shard goroutine (a non-blocking kick), so its own
// reply is not held up by a long run of others' work. Under load a batch
// so still gathers everything that queued while the previous one was
// decided, as when a shard goroutine drained its channel.
//
// Each batch reads the clock once (Config.Now is the only clock), decides
// its requests in order with the pure bucket package, calls OnChange once
// with the states the batch changed, and then answers. OnChange runs under
// the shard's lock on whichever goroutine decided the batch (calls for
// different shards may run at once), must not block, and must copy what
// it keeps: the slice and its Log slices are reused. Expiry of idle
// counters is not reported (an expired counter is equal to a fresh one);
// Drop is not reported. Lock order: a shard's lock, then whatever OnChange
// takes (the replicator's queue lock); nothing else is taken under it.
//
// One goroutine per shard remains, for what must happen without a caller:
// the sweep ticker (an idle shard wakes once per SweepEvery, never per
// check) and the batches callers left queued.
//
// # All-or-nothing
//
// The non-refund items of one Check call with the same non-zero Group that
// land on the same shard are decided together, at the position of the
// group's first item: each is decided on a copy of its counter (items with
// the same ID share one copy and see each other's consumption), and the
// copies are committed only if every item was allowed. A denied group takes
// nothing; all its items report Allowed=false, and those that would have
// passed on their own report Voided (Result.Voided). Items of one group on
// different shards (different partitions, i.e. different keys) are NOT
// atomic inside the engine: the caller must refund the parts that were
// allowed when another part was denied. All rules of one key share its
// partition, so the multi-window case (per second + per minute on one key)
// is atomic. Refund items ignore Group and are always applied.
//
// # Idle expiry
//
// Each counter stores, beside its 24-byte bucket.State, an idle deadline:
// the time after which its state is certainly full again (last decision +
// Limit.IdleAfter, never moved earlier), so the sweep needs no Limit. A
// sweep step examines about SweepBudget slots, continuing from where the
// previous one stopped, and drops counters past their deadline, so a
// step's pause is bounded. Every SweepEvery a shard runs one step and
// schedules as many more as it takes to walk all its slots within
// SweepPass; the shard goroutine runs them one at a time, each under the
// lock and followed by at most one batch of what queued meanwhile. So
// however many counters a key flood left behind, each is dropped within
// about 2*(SweepPass+SweepEvery) (12 s by default) of its idle deadline.
// A partition's table shrinks once a quarter full and an emptied partition
// is deleted, which gives the memory to the Go heap; once the shards have
// freed ReleaseBytes of tables, the engine's releaser goroutine calls
// debug.FreeOSMemory (at most once per ReleaseEvery), so the process's RSS
// follows instead of waiting minutes for the runtime's scavenger.
//
// # Key cap
//
// Each item may name its rule and that rule's cap on live keys
// (Item.Cap, MaxKeys 0: Config.MaxKeys). A shard counts its live counters by
// rule (a 16-bit rule tag kept in each slot, so expiry counts them out
// without a lookup) and holds up to ceil(MaxKeys/Shards) per rule. A
// decision that would store a new counter of a rule at its cap stores
// nothing and answers Result.KeyCap (not allowed, nothing taken; in a
// group it denies the group). Existing counters are decided as usual, and
// the count falls as counters idle out. Imported counters carry no rule
// until their first decision, which counts them (possibly past the cap).
//
// # Automatic leases
//
// Items of rules with lease: auto (Item.Auto) feed a per-shard rate
// estimate of up to AutoLeaseKeys counters (hotKeys, owned by the shard
// goroutine like the tables). While a counter is hot (AutoLeaseRate tokens
// a second from AutoLeaseGateways gateways or more; cool below half), an
// allowed item naming its gateway (Item.Gateway) is granted up to
// limit.AutoLeaseSize tokens more, taken from the counter right after the
// item's own decision (Result.Granted; replicated like any change), and a
// denied one is told to retry when a whole grant could be taken. See
// autolease.go.
//
// # Storage
//
// Per shard: map partition → part. A part holds a linear-probing table of
// 32-byte slots (id, bucket.State; the zero State marks an empty slot)
// with two parallel arrays, the idle deadline in whole seconds (rounded
// up) and the rule tag: 38 bytes a counter. It grows by half at 4/5 full,
// i.e. 48 to 71 bytes per counter, 60 at 1M keys over 1024 partitions (Go
// maps cost 60 to 100 here), and,
// only if the partition has sliding_log counters, a Go map id → log.
// Counters whose state is the zero (fresh) State are not stored.
//
// # Import
//
// Import installs a state only when the counter is missing locally; an
// existing local counter is kept as it is (the engine does not know the
// limit at import time, so it cannot compare remaining capacity; keeping
// the local one never depends on the remote side). Zero states and empty
// logs are fresh counters and are not stored. An imported counter keeps
// the idle deadline its state carries (replication.State.Idle: it travels
// with the counter), so it is dropped when its own window says so; one
// that came without (an older peer) is kept for Config.ImportIdle. Item.
// Volatile (durable: off) is kept in the high bit of the slot's rule tag
// and travels the same way.
//
// # Durable snapshot
//
// Snapshot asks every shard, through its channel like any request, for
// copies of its counters whose idle deadline is at least
// Config.SnapshotMinIdle away and that are not volatile; each shard
// answers between two batches, walking its deadline arrays. The node's
// persist writer calls it every --persist-interval (node/persist).
//
// # Time and cancellation
//
// Everything nondeterministic goes through Config.Sched (internal/sched):
// the shard and releaser goroutines start there, the sweep ticker and the
// release timer run on its clock, and Config.Now defaults to it. A sweep
// pass walks partitions in order, and sliding logs are exported and
// expired in id order, so what OnChange and Export report never depends
// on map iteration. An engine with Config.Inline starts no goroutine: the
// caller's goroutine decides each call (as the shard would, a batch of
// one) and Tick runs the sweep, so a simulation steps it by hand.
//
// Close stops and joins every shard goroutine and the releaser; calls made
// afterwards, and calls still waiting in a queue, return ErrClosed (a call
// already deciding on its own goroutine finishes). A Check whose ctx
// ends returns ctx.Err(); a shard skips a request whose ctx already ended,
// but the parts of a call that were decided before stay decided.
package shard
