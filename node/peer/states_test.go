package peer

import (
	"testing"

	"github.com/weirlimit/weir/replication"
)

// A state's idle deadline moves with its words onto a clock that is ahead
// (so the counter is dropped when its words say it is fresh here), stays
// as it is on a clock behind (the words then read as no time passed, and
// dropping later never loses a spent quota), and an unknown one stays
// unknown.
func TestOnOurClockMovesIdleDeadlines(t *testing.T) {
	const sent = int64(1_000_000_000_000)
	for _, tc := range []struct {
		name      string
		now, idle int64
		want      int64
	}{
		{"ahead", sent + 5e9, sent + 3600e9, sent + 3605e9},
		{"behind", sent - 5e9, sent + 3600e9, sent + 3600e9},
		{"unknown deadline", sent + 5e9, 0, 0},
	} {
		states := []replication.State{{ID: 1, A: sent, B: 2, Idle: tc.idle}}
		onOurClock(states, sent, tc.now)
		if states[0].Idle != tc.want {
			t.Errorf("%s: idle %d, want %d", tc.name, states[0].Idle, tc.want)
		}
	}
}
