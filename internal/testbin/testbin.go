// Package testbin builds the weir binary for tests that run it as a
// process, once per test binary.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	path string
	err  error
)

// Weir returns the path of a weir binary built from this module (once per
// test process, into a temporary directory), failing t if it cannot be
// built.
func Weir(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		dir, derr := os.MkdirTemp("", "weir-bin-")
		if derr != nil {
			err = derr
			return
		}
		path = filepath.Join(dir, "weir")
		out, berr := exec.Command("go", "build", "-o", path, "github.com/weirlimit/weir/cmd/weir").CombinedOutput()
		if berr != nil {
			err = fmt.Errorf("go build: %v\n%s", berr, out)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}
