// Package region is the I/O shell of Weir's multi-region mode: several
// Weir clusters (regions) share one global quota per key of a rule with
// scope: global, each deciding locally from its share (docs/design.md,
// "Regions"; the allocator is the pure package region/share).
//
// Every node runs one Agent. It keeps the share table of the global keys
// this node owns in its region's ring, and every Interval:
//
//   - folds the check path's tally (tokens asked and admitted per key)
//     into the table, forgets keys it no longer owns, steps the table and
//     publishes a snapshot of its shares;
//   - sends one Region.Exchange to each peer region's address with the
//     records of its shared keys (keys used outside their home region);
//     the receiving node merges the keys it owns, passes the others once
//     to their owners in its region, and answers with its records; both
//     sides take the grants a merged record carries at once (Table.Take),
//     not at their next step;
//   - hands the records of shared keys it no longer owns to their new
//     owner in its region (Region.Exchange with handoff), which adopts
//     them; until then (2 × Interval + Timeout after a ring change,
//     RingChanged) the new owner decides a key it does not hold with at
//     most the floor.
//
// Goroutines: Run owns the table; gRPC handlers hand their merges to it
// through a channel (ops) and wait for the answer; exchanges run in one
// goroutine per peer and report back to Run. The check path reads the
// latest snapshot (atomic pointer) and adds to the tally under a mutex.
//
// Enforcement: the key's owner scales the rule's limit to the region's
// share before deciding (Scale): the bucket algorithms get the share of the
// rate (by stretching the period) and a fixed 1/n of the burst, the
// windows the share of the rate.
package region
