package shard

import "github.com/weirlimit/weir/bucket"

// permit decides one item of a concurrency counter: a release of the
// permit it names (Item.Release), or an acquisition that takes a new
// permit drawn from the seam (Config.Sched). Refunds do nothing to a
// permit list: only a release, which names its permit, frees one.
func (s *shard) permit(it *Item, now int64) Result {
	var le logEntry
	var ok bool
	if p := s.parts[it.Partition]; p != nil {
		le, ok = p.logs[it.ID]
	}
	oldLen := len(le.log)
	var lg []int64
	var res bucket.Result
	var id bucket.PermitID
	switch {
	case it.Release != nil:
		lg, res.Allowed = bucket.ReleasePermit(le.log, *it.Release, now)
		res.Limit = it.Limit.Rate
		res.Remaining = max(it.Limit.Rate-bucket.PermitsHeld(lg, now), 0)
	case it.Refund:
		lg, res = bucket.TakePermit(le.log, it.Limit, id, 0, now)
	default:
		lg, res, id = s.takePermit(le.log, it, now)
	}
	var tag uint16
	if it.Cap != nil && le.tag == 0 && len(lg) > 0 {
		tag = s.tags.get(it.Cap.Rule)
		if !ok && s.capped(tag, it) {
			return s.keyCap(it.Limit)
		}
	}
	changed := len(lg) != oldLen || !id.Zero()
	s.putLog(it.Partition, it.ID, ok, le, lg, idleAt(it.Limit, now), changed, tag, it.Volatile, true)
	return Result{Result: res, Permit: id}
}

// takePermit takes a permit for it under its limit, with a fresh id (none
// for a zero cost: a peek); the id is zero when the permit is refused.
func (s *shard) takePermit(lg []int64, it *Item, now int64) ([]int64, bucket.Result, bucket.PermitID) {
	var id bucket.PermitID
	if it.Cost > 0 {
		id = s.newPermitID()
	}
	lg, res := bucket.TakePermit(lg, it.Limit, id, it.Cost, now)
	if !res.Allowed {
		id = bucket.PermitID{}
	}
	return lg, res, id
}

// newPermitID draws a permit id: 128 random bits from the seam, never the
// zero id (which means "no permit").
func (s *shard) newPermitID() bucket.PermitID {
	for {
		id := bucket.PermitID{Hi: s.sched.Uint64(), Lo: s.sched.Uint64()}
		if !id.Zero() {
			return id
		}
	}
}
