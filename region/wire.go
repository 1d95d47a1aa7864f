package region

import (
	"slices"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/region/share"
)

// recordsToWire and fromWire are the only places records meet proto.

func recordsToWire(rs []share.Record) []*weirv1.RegionRecord {
	out := make([]*weirv1.RegionRecord, 0, len(rs))
	for i := range rs {
		r := &rs[i]
		out = append(out, &weirv1.RegionRecord{
			Origin: int32(r.Origin), Seq: r.Seq, Held: r.Held, Demand: r.Demand, Spent: r.Spent,
			Granted: r.Granted, Received: r.Received, Claimed: r.Claimed, ClaimSeq: r.ClaimSeq,
			Surrendered: r.Surrendered, Minority: r.Minority, Lost: r.Lost,
			SurrenderSeq: r.SurrenderSeq, SurrenderGranted: r.SurrenderGranted, Seen: r.Seen,
			Restored: r.Restored, RestoreSurrendered: r.RestoreSurrendered, RestoreClaimed: r.RestoreClaimed,
			Voided: r.Voided, RestoreVoided: r.RestoreVoided, Gen: r.Gen, Capped: r.Capped,
		})
	}
	return out
}

// fromWire converts records; malformed ones (wrong lengths, bad origin)
// are dropped by share.Table.Merge.
func fromWire(ws []*weirv1.RegionRecord) []share.Record {
	out := make([]share.Record, 0, len(ws))
	for _, w := range ws {
		voided, restoreVoided := slices.Clone(w.GetVoided()), slices.Clone(w.GetRestoreVoided())
		if n := len(w.GetGranted()); len(voided) == 0 && len(restoreVoided) == 0 {
			// A peer from before voids were recorded (fields 19, 20).
			voided, restoreVoided = make([]int64, n), make([]int64, n)
		}
		out = append(out, share.Record{
			Origin: int(w.GetOrigin()), Seq: w.GetSeq(), Held: w.GetHeld(), Demand: w.GetDemand(), Spent: w.GetSpent(),
			Granted: slices.Clone(w.GetGranted()), Received: slices.Clone(w.GetReceived()), Claimed: slices.Clone(w.GetClaimed()),
			ClaimSeq: slices.Clone(w.GetClaimSeq()), Surrendered: w.GetSurrendered(), Minority: w.GetMinority(),
			Lost: slices.Clone(w.GetLost()), SurrenderSeq: w.GetSurrenderSeq(), SurrenderGranted: slices.Clone(w.GetSurrenderGranted()),
			Seen: slices.Clone(w.GetSeen()), Restored: w.GetRestored(), RestoreSurrendered: w.GetRestoreSurrendered(),
			RestoreClaimed: slices.Clone(w.GetRestoreClaimed()), Voided: voided, RestoreVoided: restoreVoided,
			// A peer from before generations (fields 21, 22) sends none:
			// generation 0, not capped.
			Gen: w.GetGen(), Capped: w.GetCapped(),
		})
	}
	return out
}
