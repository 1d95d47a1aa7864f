package share

// cutOff reports whether at now this region has gone LostAfter without a
// round trip to a majority of the regions.
func (t *Table) cutOff(now int64) bool {
	reached := 1
	for i := range t.regions {
		if i != t.self && now-t.ok[i] <= int64(t.cfg.LostAfter) {
			reached++
		}
	}
	return 2*reached <= len(t.regions)
}

// view is region i's share as this region expects it once i has seen what
// this region sent: its last record, plus grants from this region it has
// not taken yet, plus the claims it will make from regions lost with the
// agreement this region already acted on. Using it, two regions do not
// both give toward the same stale picture.
func (t *Table) view(k *keyState, i int, lost []bool) int64 {
	r := &k.recs[i]
	if i == t.self {
		return r.Held
	}
	me := &k.recs[t.self]
	v := r.Held + max(0, me.Granted[i]-r.Received[t.self])
	for j := range lost {
		if lost[j] && me.ClaimSeq[j] == k.recs[j].Seq+1 && r.ClaimSeq[j] < me.ClaimSeq[j] {
			if excess := k.recs[j].Held - t.cfg.Floor; excess > 0 {
				v += excess / t.claimParts()
			}
		}
	}
	return v
}

// claim takes, for each region this one counts as lost, 1/(regions-1) of
// that region's share above its floor, when the regions still heard from
// are a majority and each of them reports the same lost set and the same
// last record of every lost region (so they all claim from the same
// ledger). The part is one of every other region's, not of the regions
// this one hears from: two regions may claim at the same record under
// different majorities (one counted the lost region lost later, having
// heard from it later, for instance through a request that arrived late,
// and was cut off in the step it claimed), and claims at one record, at
// most one per region, must not add up to more than it held. With more
// than one region lost, the parts of the regions also lost stay
// unclaimed until one of them is back and claims it, or the lost region
// is back and restores what was not claimed.
func (t *Table) claim(key string, k *keyState, lost []bool) {
	n := len(t.regions)
	me := &k.recs[t.self]
	var alive []int
	anyLost := false
	for i := range t.regions {
		if lost[i] {
			anyLost = true
		} else {
			alive = append(alive, i)
		}
	}
	if !anyLost || 2*len(alive) <= n {
		return
	}
	for _, s := range alive {
		if s == t.self {
			continue
		}
		r := &k.recs[s]
		if !k.have[s] || r.Minority {
			return
		}
		for i := range t.regions {
			want := int64(0)
			if lost[i] {
				want = k.recs[i].Seq + 1
			}
			if r.Lost[i] != want {
				return
			}
		}
	}
	for j := range t.regions {
		if !lost[j] || me.ClaimSeq[j] >= k.recs[j].Seq+1 {
			continue
		}
		me.ClaimSeq[j] = k.recs[j].Seq + 1
		if excess := k.recs[j].Held - t.cfg.Floor; excess > 0 {
			me.Claimed[j] += excess / t.claimParts()
		}
	}
}

// restore takes back share this region surrendered in the minority, less
// what the majority claimed from it, plus what the others voided of its
// grants (given after the record they declared it lost at: counted in
// claims when claims were made, lost otherwise), once every other
// region's record (direct or relayed) shows it has seen the surrender and
// does not count this region as lost: no claim against the records before
// the surrender can follow, and each region's void for it is final (a
// region voids in the step it first sees the surrender while hearing from
// this one, the step that writes Seen and Lost so).
func (t *Table) restore(k *keyState) {
	me := &k.recs[t.self]
	var newVoids int64
	for p := range t.regions {
		if p != t.self && k.have[p] {
			newVoids += k.recs[p].Voided[t.self] - me.RestoreVoided[p]
		}
	}
	// A minority step that had nothing above the floor to surrender still
	// moves SurrenderSeq, and the others void the grants before it: those
	// come back here too.
	if me.Surrendered <= me.RestoreSurrendered && newVoids <= 0 {
		return
	}
	var claims, voided int64
	for p := range t.regions {
		if p == t.self {
			continue
		}
		r := &k.recs[p]
		if !k.have[p] || r.Seen[t.self] < me.SurrenderSeq || r.Lost[t.self] != 0 {
			return
		}
		claims += r.Claimed[t.self] - me.RestoreClaimed[p]
		voided += r.Voided[t.self] - me.RestoreVoided[p]
	}
	if back := me.Surrendered - me.RestoreSurrendered - claims + voided; back > 0 {
		me.Restored += back
	}
	me.RestoreSurrendered = me.Surrendered
	for p := range t.regions {
		if p != t.self {
			me.RestoreClaimed[p] = k.recs[p].Claimed[t.self]
			me.RestoreVoided[p] = k.recs[p].Voided[t.self]
		}
	}
}

// claimParts is what a claim divides a lost region's share above the
// floor by: every other region, whichever of them the claimer hears from
// (see claim).
func (t *Table) claimParts() int64 { return int64(len(t.regions) - 1) }
