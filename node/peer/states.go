package peer

import (
	"github.com/weirlimit/weir/bucket"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/replication"
)

// onOurClock moves counter states written on a peer's clock onto this
// node's: sentAt is the peer's clock when it sent them, now this node's
// when they arrived. When this clock is ahead (now > sentAt, which also
// counts the time in flight), every state's times move that much later
// (bucket.Later), so the skew is not read as time passed and grants no
// token. When it is behind, the states are kept as they are: the bucket
// reads the peer's later times as no time passed. A peer that sent no
// clock (sentAt 0) is trusted as is. A state's idle deadline moves with
// its times, so the counter is dropped here when its words say it is
// fresh again on this clock, not earlier.
func onOurClock(states []replication.State, sentAt, now int64) {
	if sentAt == 0 || now <= sentAt {
		return
	}
	d := now - sentAt
	for i := range states {
		st := &states[i]
		st.Idle = st.LaterIdle(d)
		if st.Log != nil {
			st.Log = bucket.LaterLog(st.Log, d)
			continue
		}
		b := bucket.Later(bucket.State{A: st.A, B: st.B, C: st.C}, d)
		st.A, st.B, st.C = b.A, b.B, b.C
	}
}

func statesToProto(in []replication.State) []*weirv1.CounterState {
	block := make([]weirv1.CounterState, len(in)) // one allocation, not one per state
	out := make([]*weirv1.CounterState, len(in))
	for i, s := range in {
		c := &block[i]
		c.Id, c.Partition, c.A, c.B, c.C, c.Log, c.Permits = s.ID, s.Partition, s.A, s.B, s.C, s.Log, s.Permits
		c.IdleNs, c.Volatile = s.Idle, s.Volatile
		out[i] = c
	}
	return out
}

func statesFromProto(in []*weirv1.CounterState) []replication.State {
	out := make([]replication.State, 0, len(in))
	for _, s := range in {
		if s == nil {
			continue
		}
		out = append(out, replication.State{ID: s.Id, Partition: s.Partition, A: s.A, B: s.B, C: s.C, Log: s.Log, Permits: s.Permits,
			Idle: max(s.IdleNs, 0), Volatile: s.Volatile})
	}
	return out
}
