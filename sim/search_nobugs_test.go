//go:build !weirbugs

package sim_test

// switchesOff: without the weirbugs tag every switch is off already.
func switchesOff() (restore func()) { return func() {} }
