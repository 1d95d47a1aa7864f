//go:build !weirbugs

package bug

// On reports whether the switch name is on: never in a normal build. It is
// a constant the compiler inlines, so `if bug.On(...)` is dead code.
func On(name string) bool { return false }
