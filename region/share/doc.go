// Package share allocates one global quota among regions by demand: the
// pure core of Weir's multi-region mode (docs/design.md, "Regions").
//
// A Table is one region's view. Per key, every region owns a Record: a
// ledger of cumulative grants given, grants taken, claims and surrenders,
// from which its share (Held) follows. Regions exchange their records (and
// relay the others') every interval; no call here does I/O, reads a clock
// or starts a goroutine: the caller passes now and owns the Table from one
// goroutine.
//
// Invariant: the shares of all regions never add up to more than Whole,
// whatever messages are lost, delayed, duplicated or reordered:
//
//   - a region lowers its own share first (Granted) and only then
//     announces it; the receiver takes no more than the grant addressed to
//     it (Received ≤ Granted), so given share is re-granted only after the
//     giver acknowledged giving it;
//   - a region that has not completed a round trip with a majority for
//     LostAfter keeps at most the floor (Surrendered) and moves nothing;
//   - a region not heard from for ClaimAfter (> LostAfter + one round
//     trip) is lost; the others claim its share above the floor only when
//     they are a majority and all report the same lost set and the same
//     last record of it, each 1/(regions-1) of it (so claims made under
//     different majorities at one record add up to no more than it held),
//     once per record.
//
// Grants are taken at steps and, between them, as the records carrying
// them arrive (Take); a key idle for IdleAfter whose share never moved is
// dropped at a step (its ledger is a fresh key's).
//
// A key whose share moved is reset first: once no region has asked for it
// in IdleAfter, the regions cap it (each holds at most its initial share
// for the rest of the generation, Record.Capped) and, when every region's
// record is capped, start a new generation (Record.Gen) from the initial
// shares; records of older generations are ignored, and a region that
// dropped a reset key remembers its generation for GoneFor, so a late
// record of the old ledger is nothing. Capped regions hold at most the
// initial shares, which add up to Whole, so the bound holds while the
// regions switch.
//
// Shares follow demand: each step a region whose share exceeds its target
// (floor + the spare share in proportion to its smoothed demand) by more
// than MinMove gives the surplus to the regions below their targets.
//
// Files by concern: config.go (Config and its validation), record.go (the
// Record one region writes and its ledger arithmetic), table.go (the Table,
// its keys, and the records it takes in: Merge, Adopt, Observe), step.go
// (one interval: Step, giving and taking share, resets), lost.go (the
// minority and lost regions: surrender, claims, restore).
package share
