//go:build weirbugs

package bug

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

var (
	envOnce sync.Once
	active  atomic.Pointer[map[string]bool]
)

// On reports whether the switch name is on. The first call (of On or Set)
// reads Env; an unknown name there, or a name On does not know, panics.
func On(name string) bool {
	if !slices.Contains(Names(), name) {
		panic(fmt.Sprintf("bug: On(%q): unknown switch; known: %s", name, strings.Join(Names(), ", ")))
	}
	load()
	return (*active.Load())[name]
}

// Set turns on exactly names (none: all off), replacing what Env or an
// earlier Set turned on, and returns a function that puts back what was on
// before. An unknown name panics.
func Set(names ...string) (restore func()) {
	load()
	on := parse("Set", names)
	prev := active.Swap(&on)
	return func() { active.Store(prev) }
}

func load() {
	envOnce.Do(func() {
		on := parse(Env, strings.Split(os.Getenv(Env), ","))
		active.Store(&on)
	})
}

// parse checks names (blank ones are skipped) against Names.
func parse(from string, names []string) map[string]bool {
	on := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !slices.Contains(Names(), n) {
			panic(fmt.Sprintf("bug: %s names an unknown switch %q; known: %s", from, n, strings.Join(Names(), ", ")))
		}
		on[n] = true
	}
	return on
}
