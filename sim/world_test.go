package sim_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/weirlimit/weir/sim"
)

func TestWorldSmoke(t *testing.T) {
	seed, _ := strconv.ParseUint(os.Getenv("SEED"), 10, 64)
	if seed == 0 {
		for s := uint64(1); s <= 20; s++ {
			out := sim.Run(sim.DefaultOptions(s, 3))
			t.Logf("%s", out)
		}
		return
	}
	o := sim.DefaultOptions(seed, 3)
	o.Verbose = true
	out := sim.Run(o)
	t.Logf("%s", out)
	for _, f := range out.Faults {
		t.Logf("  %s", f)
	}
	f := os.Getenv("GREP")
	for _, l := range out.Readable {
		if f == "" || strings.Contains(l, f) || strings.Contains(l, "fault") || strings.Contains(l, "ring") || strings.Contains(l, "sees") || strings.Contains(l, "leader") {
			t.Log(l)
		}
	}
}
