//go:build !weirbugs

package bug_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/weirlimit/weir/internal/bug"
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
	// Built as internal/testbin builds it (so the build cache is shared),
	// into a directory the test removes.
	weir := filepath.Join(t.TempDir(), "weir")
	if out, err := exec.Command("go", "build", "-o", weir, "github.com/weirlimit/weir/cmd/weir").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for path, want := range map[string]bool{self: true, weir: false} {
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
