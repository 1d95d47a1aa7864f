package share

// Step runs one interval at now: it takes grants addressed to this region,
// surrenders in the minority, claims from lost regions when the majority
// agrees, gives surplus share toward demand, and writes this region's
// records.
//
// A key this region has not asked for in IdleAfter is dropped at the
// step when its ledger is one a fresh key would have here: this region
// moved no share of it (granted, received, claimed or surrendered none),
// no region's record it holds grants it any or reports demand, and it is
// not in the minority. Asked for again, the key starts from the same
// initial share, and its first record replaces the old one at the peers
// with the same ledger, so dropping never changes a share (the bound
// holds). A key whose share moved is kept: its ledger is cumulative and
// the other regions' ledgers refer to it.
func (t *Table) Step(now int64) {
	t.minority = t.cutOff(now)
	t.fell = t.minority
	for key, k := range t.keys {
		if t.switchable(k) {
			k = t.renew(key, k, k.gen+1)
		}
		t.stepKey(key, k, now)
		if t.droppable(k, now) {
			delete(t.keys, key)
			if k.gen > 0 {
				t.gone[key] = tombstone{gen: k.gen, at: now}
			}
		}
	}
	for key, g := range t.gone {
		if now-g.at > int64(t.cfg.GoneFor) {
			delete(t.gone, key)
		}
	}
}

// droppable reports whether key state k can be dropped at now (Step).
func (t *Table) droppable(k *keyState, now int64) bool {
	if t.cfg.IdleAfter <= 0 || t.minority || now-k.lastAsk < int64(t.cfg.IdleAfter) || !idle(&k.recs[t.self]) ||
		k.recs[t.self].Capped {
		return false
	}
	for i := range k.recs {
		if r := &k.recs[i]; r.Demand != 0 || (i != t.self && r.Granted[t.self] != 0) || k.capSeq[i] != 0 ||
			(k.gen > 0 && !k.have[i]) {
			// After a reset, a region keeps the key until it holds every
			// region's record of the new generation: the regions still
			// capped in the old one learn of the new one from its records.
			return false
		}
	}
	return true
}

// switchable reports whether key state k can start its next generation:
// every region's record of this one, this region's included, is capped,
// so each region holds at most its initial share until it has left this
// generation, and the initial shares add up to Whole.
func (t *Table) switchable(k *keyState) bool {
	for i := range k.recs {
		if !k.have[i] || !k.recs[i].Capped {
			return false
		}
	}
	return true
}

// capping reports whether this region caps key state k at this step: a
// region's record of this generation is capped (it joins the reset), or
// it proposes one: the key's share moved (so dropping it is not enough),
// no region has asked for it in IdleAfter by every record held (this
// region's own asks, every region's reported demand), every region is
// heard from and none is capped lost, and this region is not in the
// minority.
func (t *Table) capping(k *keyState, now int64) bool {
	for i := range k.recs {
		if k.have[i] && k.recs[i].Capped {
			return true
		}
	}
	if t.cfg.IdleAfter <= 0 || t.minority || now-k.lastAsk < int64(t.cfg.IdleAfter) || idle(&k.recs[t.self]) {
		return false
	}
	for i := range k.recs {
		if !k.have[i] || k.recs[i].Demand != 0 || k.recs[i].Minority || k.capSeq[i] != 0 ||
			(i != t.self && now-t.heard[i] > int64(t.cfg.LostAfter)) {
			return false
		}
	}
	return true
}

func (t *Table) stepKey(key string, k *keyState, now int64) {
	n := len(t.regions)
	me := &k.recs[t.self]
	// Targets use the demand this region last reported, the one its peers
	// see beside their own, so both sides compute from the same step.
	reported := me.Demand
	if k.asked > 0 || k.lastAsk == 0 {
		k.lastAsk = now
	}
	me.Demand = (me.Demand + k.asked*demandScale) / 2
	me.Spent = k.spent
	if !me.Capped && t.capping(k, now) {
		me.Capped = true
	}
	k.asked, k.spent = 0, 0
	me.Minority = t.minority
	lost := make([]bool, n)
	for i := range t.regions {
		me.Lost[i] = 0
		if i != t.self && now-t.heard[i] > int64(t.cfg.ClaimAfter) {
			lost[i] = true
			me.Lost[i] = k.recs[i].Seq + 1
			if k.capSeq[i] == 0 && !t.minority {
				k.capSeq[i], k.capGranted[i] = k.recs[i].Seq+1, k.recs[i].Granted[t.self]
			}
		}
		if r := &k.recs[i]; k.capSeq[i] != 0 && !lost[i] {
			switch {
			case r.SurrenderSeq >= k.capSeq[i]:
				// It surrendered since: what it granted between the
				// record the majority may have claimed at and the
				// surrender may have been counted in the claims.
				k.recs[t.self].Voided[i] += max(0, r.SurrenderGranted[t.self]-k.capGranted[i])
				k.capSeq[i] = 0
			case k.direct[i] >= k.capSeq[i]:
				// It answered itself with a newer record and has not
				// surrendered since: it never was in the minority, so
				// no claim at the capped record was or can be made.
				k.capSeq[i] = 0
			}
		}
	}

	if t.minority {
		// Cut off from the majority: keep at most the floor; take, claim
		// and give nothing until back.
		if h := held(t.initial(key, t.self), me); h > t.cfg.Floor {
			me.Surrendered += h - t.cfg.Floor
		}
		me.SurrenderSeq = max(me.Seq+1, now)
		copy(me.SurrenderGranted, me.Granted)
		t.write(key, k, now)
		return
	}

	t.take(k)

	// Claim from lost regions once the majority agrees.
	t.claim(key, k, lost)
	t.restore(k)

	t.write(key, k, now)
	t.give(key, k, now, lost, reported)
}

// give moves this region's surplus above its target toward the regions
// below theirs, among the regions that take part (not lost, not in the
// minority, reached within LostAfter); reported is the demand this region
// last reported. It reports whether it gave any.
func (t *Table) give(key string, k *keyState, now int64, lost []bool, reported int64) bool {
	n := len(t.regions)
	me := &k.recs[t.self]
	active := make([]bool, n)
	views := make([]int64, n)
	var pool, demand int64
	count := int64(0)
	for i := range t.regions {
		r := &k.recs[i]
		if lost[i] || r.Minority || (i != t.self && now-t.ok[i] > int64(t.cfg.LostAfter)) {
			continue
		}
		active[i] = true
		views[i] = t.view(k, i, lost)
		pool += views[i]
		if i == t.self {
			demand += reported
		} else {
			demand += r.Demand
		}
		count++
	}
	if demand <= 0 || count < 2 {
		return false
	}
	dem := func(i int) int64 {
		if i == t.self {
			return reported
		}
		return k.recs[i].Demand
	}
	floor := func(i int) int64 {
		if dem(i) <= 0 {
			return t.cfg.IdleFloor
		}
		return t.cfg.Floor
	}
	spare := pool
	for i := range t.regions {
		if active[i] {
			spare -= floor(i)
		}
	}
	if spare < 0 {
		return false
	}
	target := func(i int) int64 {
		return floor(i) + int64(float64(spare)*float64(dem(i))/float64(demand))
	}
	surplus := me.Held - target(t.self)
	if surplus <= t.cfg.MinMove {
		return false
	}
	var deficit int64
	defs := make([]int64, n)
	for i := range t.regions {
		if i != t.self && active[i] {
			if d := target(i) - views[i]; d > 0 {
				defs[i] = d
				deficit += d
			}
		}
	}
	if deficit <= 0 {
		return false
	}
	for i, d := range defs {
		if d > 0 {
			me.Granted[i] += min(d, int64(float64(surplus)*float64(d)/float64(deficit)))
		}
	}
	t.writeMoved(key, k, now)
	return true
}

// take takes what the other regions granted this one and it has not
// taken yet (up to the cap of a region it declared lost, less what it
// voided); it reports whether it took any.
func (t *Table) take(k *keyState) bool {
	me := &k.recs[t.self]
	took := false
	for i := range t.regions {
		if i != t.self && k.have[i] {
			granted := k.recs[i].Granted[t.self]
			if k.capSeq[i] != 0 {
				granted = min(granted, k.capGranted[i])
			}
			if avail := granted - me.Voided[i] - me.Received[i]; avail > 0 {
				me.Received[i] += avail
				took = true
			}
		}
	}
	return took
}

// Take takes, between steps, the grants addressed to this region that
// the records merged since carry, so a move costs the time from the
// giver's step to the record's arrival (one exchange) rather than to the
// receiver's next step (up to one more interval), during which the share
// is held by no region. It takes exactly what the next step would take
// first: nothing while this region is, or at now would be, in the
// minority, or counts any region lost or capped (the step handles those
// with their voids). Like Rebalance it leaves Seen as the step wrote it:
// Seen says which records a step acted on (voids, restores), and a take
// acts on no surrender. It reports whether this region's share changed.
func (t *Table) Take(key string, now int64) bool {
	k := t.keys[key]
	if k == nil || t.minority || t.cutOff(now) {
		return false
	}
	for i := range t.regions {
		if i != t.self && (now-t.heard[i] > int64(t.cfg.ClaimAfter) || k.capSeq[i] != 0) {
			return false
		}
	}
	if !t.take(k) {
		return false
	}
	t.writeMoved(key, k, now)
	return true
}

// Rebalance gives key's share above the floor toward the regions that
// ask for it between steps, right after a peer's records arrived, when
// this region does not use the key itself (it reported no demand): an
// answer carries the grant back at once rather than at the next step, so
// a key homed in a quiet region reaches the regions that use it one
// round trip after their first exchange. Regions that use the key move
// share at steps only (all from the same step's records, which keeps
// them from chasing each other's stale views). It gives nothing while
// this region is in the minority or counts any region lost (the step
// handles those). It reports whether any share moved.
func (t *Table) Rebalance(key string, now int64) bool {
	k := t.keys[key]
	if k == nil || k.recs[t.self].Demand != 0 || k.asked != 0 || t.minority || t.cutOff(now) {
		return false
	}
	lost := make([]bool, len(t.regions))
	for i := range t.regions {
		if i != t.self && (now-t.heard[i] > int64(t.cfg.ClaimAfter) || k.capSeq[i] != 0) {
			return false
		}
	}
	return t.give(key, k, now, lost, k.recs[t.self].Demand)
}

// write updates this region's record after a step: its share, a new Seq
// and Seen (the records the step acted on).
func (t *Table) write(key string, k *keyState, now int64) {
	t.writeMoved(key, k, now)
	me := &k.recs[t.self]
	for i := range me.Seen {
		me.Seen[i] = k.recs[i].Seq
	}
}

// writeMoved updates the share and Seq after share moved, leaving Seen
// as the last step wrote it: between steps (Rebalance) records merged
// since have not been acted on (a void for a surrender they show is
// computed at the next step), and a region that reads Seen as "has acted
// on my surrender" must not restore before that.
func (t *Table) writeMoved(key string, k *keyState, now int64) {
	me := &k.recs[t.self]
	me.Held = held(t.initial(key, t.self), me)
	me.Seq = max(me.Seq+1, now)
}
