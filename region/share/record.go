package share

import (
	"slices"
)

// Record is one region's state for one key, as the region itself last
// wrote it (Seq orders them). All slices are indexed by region (the
// table's sorted Regions) and are cumulative, so a record may be delivered
// late, twice or never, and a newer one replaces it.
type Record struct {
	Origin int
	Seq    int64 // origin's clock at the step that wrote it (strictly increasing)
	Held   int64 // the origin's share, in shares of Whole
	Demand int64 // tokens asked per interval, smoothed, ×demandScale
	Spent  int64 // tokens admitted in the last interval

	Granted     []int64 // given to each region
	Received    []int64 // taken from each region's grants
	Claimed     []int64 // claimed from each lost region
	ClaimSeq    []int64 // per region: the Seq+1 of the record a claim was made at
	Surrendered int64   // given up (to the floor) while in the minority
	// SurrenderSeq is the Seq of the last step in the minority, and
	// SurrenderGranted the Granted vector then: grants made before it that
	// a region which declared the origin lost had not seen are void.
	SurrenderSeq     int64
	SurrenderGranted []int64
	// Seen, per region: the Seq of its record the origin holds.
	Seen []int64
	// Restored is share surrendered and taken back once every region had
	// seen the surrender and no claim covered it; RestoreSurrendered and
	// RestoreClaimed are Surrendered and each region's Claimed[origin] at
	// the last restore.
	Restored           int64
	RestoreSurrendered int64
	RestoreClaimed     []int64
	// Voided, per region: the share that region granted this origin
	// which the origin will never take (granted after the record it
	// declared the region lost at, before the region's surrender);
	// RestoreVoided is each region's Voided[origin] at the last restore.
	// A region restoring adds back what others voided of its grants, so
	// a void that no claim covered is not lost.
	Voided        []int64
	RestoreVoided []int64
	Minority      bool
	// Lost, per region: 0 if the origin hears from it, else the Seq+1 of
	// the region's record the origin holds (1: none).
	Lost []int64
	// Gen is the key's ledger generation: a reset starts a new ledger
	// from the initial shares, and a region ignores records of an older
	// generation than its own (0: the first; records from peers that
	// predate generations read as 0).
	Gen int64
	// Capped: the origin holds at most its initial share of the key for
	// the rest of this generation and votes to start the next (Step).
	Capped bool
}

const demandScale = 1024

func (r *Record) clone() Record {
	c := *r
	c.Granted = slices.Clone(r.Granted)
	c.Received = slices.Clone(r.Received)
	c.Claimed = slices.Clone(r.Claimed)
	c.ClaimSeq = slices.Clone(r.ClaimSeq)
	c.Lost = slices.Clone(r.Lost)
	c.SurrenderGranted = slices.Clone(r.SurrenderGranted)
	c.Seen = slices.Clone(r.Seen)
	c.RestoreClaimed = slices.Clone(r.RestoreClaimed)
	c.Voided = slices.Clone(r.Voided)
	c.RestoreVoided = slices.Clone(r.RestoreVoided)
	return c
}

func (r *Record) valid(n int) bool {
	return r.Origin >= 0 && r.Origin < n && len(r.Granted) == n && len(r.Received) == n &&
		len(r.Claimed) == n && len(r.ClaimSeq) == n && len(r.Lost) == n && len(r.SurrenderGranted) == n &&
		len(r.Seen) == n && len(r.RestoreClaimed) == n && len(r.Voided) == n && len(r.RestoreVoided) == n
}

// held computes a record's share from its ledger.
func held(init int64, r *Record) int64 {
	h := init - r.Surrendered + r.Restored
	for i := range r.Granted {
		h += r.Received[i] + r.Claimed[i] - r.Granted[i]
	}
	return h
}
