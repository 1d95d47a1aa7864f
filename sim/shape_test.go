package sim_test

import (
	"strings"
	"testing"

	"github.com/weirlimit/weir/ring"
	"github.com/weirlimit/weir/sim"
)

// A run is on production's ring unless told otherwise, and a case's
// `ring` line survives Format and ParseCase.
func TestSimRingShape(t *testing.T) {
	if got, want := sim.RingShape(sim.DefaultOptions(1, 3)), ring.DefaultConfig().Shape(); got != want {
		t.Errorf("default run on %q, want production's %q", got, want)
	}
	legacy, err := sim.ParseRing("64 20 consistent", 3)
	if err != nil {
		t.Fatal(err)
	}
	if legacy != sim.LegacyRing(3) {
		t.Errorf("64 20 consistent = %+v, want LegacyRing %+v", legacy, sim.LegacyRing(3))
	}
	c := sim.Case{Seed: 7, Nodes: 3, Expect: "pass", Ring: legacy, Faults: []sim.Fault{}}
	back, err := sim.ParseCase("x", strings.NewReader(c.Format()))
	if err != nil {
		t.Fatal(err)
	}
	if back.Ring != legacy || sim.RingShape(back.Options()) != legacy.Shape() {
		t.Errorf("ring line lost: %q parsed to %+v", c.Format(), back.Ring)
	}
	if f := (sim.Case{Seed: 7, Nodes: 3, Expect: "pass"}).Format(); strings.Contains(f, "ring") {
		t.Errorf("production's shape written as a ring line:\n%s", f)
	}
	for _, bad := range []string{"64 20", "x 20 balanced", "64 20 round", "0 20 balanced"} {
		if _, err := sim.ParseRing(bad, 3); err == nil {
			t.Errorf("ParseRing(%q) = nil error", bad)
		}
	}
}
