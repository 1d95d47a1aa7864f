//go:build weirbugs

package replication

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/weirlimit/weir/internal/bug"
)

// caughtBy names, for each switch of internal/bug, the tests that caught
// its defect (docs/design.md, "Re-inserted defects"): each must fail with
// the switch on, and pass with every switch off.
var caughtBy = map[string][]string{
	bug.DoublePull:          {"TestPartitionScenarios/reclaim.txt"},
	bug.TwoPulls:            {"TestPartitionScenarios/twopulls.txt"},
	bug.FlapLeftovers:       {"TestPartitionScenarios/flap.txt", "TestFlapLeftoversPassOnlyAsCopies/flap"},
	bug.DroppedMovedMark:    {"TestPartitionScenarios/reclaim.txt"},
	bug.TakebackUnreachable: {"TestTakeBackWaitsForAnUnreachableHolder"},
	bug.GainedMoved:         {"TestPartitionScenarios/gainedmoved.txt"},
	bug.RecutChange:         {"TestSealShipsToTheRingDecidedOn"},
	bug.OffChainHolder:      {"TestPullTakesBroadcastHolderAsCopiesAfterCopies"},
	bug.KeepDropsCopies:     {"TestKeepPullFillsInKeysItLacks"},
	bug.UnpulledLeftovers:   {"TestUnpulledLeftoversPassOnlyAsCopies"},
}

// TestSwitchesBreakTheirTests runs this test binary again for each switch,
// as `WEIR_SIM_BUG=<name> go test -tags weirbugs -run <test>` would: the
// tests that caught the defect fail with it on (so the switch still puts
// the defect back, and the tests still see it) and pass without.
func TestSwitchesBreakTheirTests(t *testing.T) {
	for _, name := range bug.Names() {
		tests := caughtBy[name]
		if len(tests) == 0 {
			t.Errorf("switch %s: no test named that catches it", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			for _, test := range tests {
				pattern := ""
				for level := range strings.SplitSeq(test, "/") {
					pattern += "/^" + strings.ReplaceAll(level, ".", `\.`) + "$"
				}
				pattern = pattern[1:]
				if out, err := runSelf(pattern, ""); err != nil {
					t.Fatalf("%s with no switch on: %v\n%s", test, err, out)
				}
				out, err := runSelf(pattern, name)
				if err == nil || !strings.Contains(out, "--- FAIL: "+test) {
					t.Errorf("%s with %s=%s: want it to fail, got err %v\n%s", test, bug.Env, name, err, out)
				}
				if strings.Contains(out, "panic:") {
					t.Errorf("%s with %s=%s: panicked, want a failed check\n%s", test, bug.Env, name, out)
				}
			}
		})
	}
}

// runSelf runs the tests matching pattern in a new process of this test
// binary with the switches on set to on.
func runSelf(pattern, on string) (string, error) {
	cmd := exec.Command(os.Args[0], "-test.run="+pattern, "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), bug.Env+"="+on)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
