package rulecache

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// A value is compiled once per version, shared by concurrent readers, and
// rebuilt when the version changes (a nil set is version 0).
func TestCompiledOncePerVersion(t *testing.T) {
	var compiles atomic.Int32
	c := New(func(set *rules.Set) *int {
		compiles.Add(1)
		n := 0
		if set != nil {
			n = len(set.Rules)
		}
		return &n
	})
	if got := *c.Get(nil); got != 0 {
		t.Fatalf("nil set: %d rules, want 0", got)
	}
	v1 := &rules.Set{Version: 1, Rules: []rules.Rule{{ID: "a"}}}
	var wg sync.WaitGroup
	vals := make([]*int, 8)
	for i := range vals {
		wg.Add(1)
		go func() { defer wg.Done(); vals[i] = c.Get(v1) }()
	}
	wg.Wait()
	for i, v := range vals {
		if v != vals[0] || *v != 1 {
			t.Fatalf("reader %d got %p=%d, want the one value %p=1", i, v, *v, vals[0])
		}
	}
	if got := compiles.Load(); got != 2 {
		t.Fatalf("%d compiles, want 2 (nil, version 1)", got)
	}
	if got := *c.Get(&rules.Set{Version: 2, Rules: []rules.Rule{{ID: "a"}, {ID: "b"}}}); got != 2 {
		t.Fatalf("version 2: %d rules, want 2", got)
	}
	if got := compiles.Load(); got != 3 {
		t.Fatalf("%d compiles, want 3", got)
	}
}
