package clusterview

import (
	"errors"
	"strings"
	"testing"

	"github.com/weirlimit/weir/ring"
)

func TestShapeGuard(t *testing.T) {
	g := NewShapeGuard(ring.DefaultConfig())
	if err := g.Check("a", ring.DefaultConfig().Shape()); err != nil || g.Refused() != nil {
		t.Fatalf("same shape refused: %v, %v", err, g.Refused())
	}
	err := g.Check("old", "") // a binary that gossips no shape
	var se *ShapeError
	if !errors.As(err, &se) || se.Theirs != ring.LegacyConfig().Shape() || se.Member != "old" {
		t.Fatalf("no shape = %v, want the legacy shape refused", err)
	}
	for _, want := range []string{ring.DefaultConfig().Shape(), ring.LegacyConfig().Shape(), "member old", "--partitions"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
	other := ring.DefaultConfig()
	other.PartitionCount = 4093
	if g.Check("b", other.Shape()) == nil {
		t.Error("another partition count passed")
	}
	if r := g.Refused(); r == nil || r.Error() != err.Error() {
		t.Errorf("Refused() = %v, want the first refusal %v", g.Refused(), err)
	}
	legacy := NewShapeGuard(ring.LegacyConfig())
	if err := legacy.Check("old", ""); err != nil {
		t.Errorf("a legacy node refused a member that gossips no shape: %v", err)
	}
}
