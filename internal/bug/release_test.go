//go:build !weirbugs

package bug_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/weirlimit/weir/internal/bug"
	"github.com/weirlimit/weir/internal/testbin"
)

// A release build of weir carries none of the switch names: On is a
// constant false there, so no switch site survives compilation and no
// name is linked in (a build that could turn one on would hold them).
// The test binary, which does reference them, shows the scan finds names
// where they are.
func TestReleaseBinaryHasNoSwitches(t *testing.T) {
	names := append(bug.Names(), bug.Env)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{self: true, testbin.Weir(t): false} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if got := bytes.Contains(b, []byte(n)); got != want {
				t.Errorf("%s holds %q: %v, want %v", path, n, got, want)
			}
		}
	}
}

func TestOffInANormalBuild(t *testing.T) {
	for _, n := range bug.Names() {
		if bug.On(n) {
			t.Errorf("On(%q) in a normal build", n)
		}
	}
}
