//go:build weirbugs

package sim_test

import "github.com/weirlimit/weir/internal/bug"

// switchesOff turns every bug switch off until restore is called.
func switchesOff() (restore func()) { return bug.Set() }
