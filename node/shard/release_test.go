package shard

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testwait"
)

// The releaser returns memory once ReleaseBytes were freed, and not again
// within ReleaseEvery however much more is freed.
func TestReleaserThresholdAndRate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReleaseBytes, cfg.ReleaseEvery = 100, time.Hour
	r := newReleaser(&cfg)
	var calls atomic.Int32
	r.release = func() { calls.Add(1) }
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() { r.run(quit); close(done) }()
	defer func() { close(quit); <-done }()

	r.freed(60)
	if len(r.kick) != 0 {
		t.Fatal("kicked below the threshold")
	}
	r.freed(60)
	testwait.Until(t, "a release", func() bool { return calls.Load() == 1 })
	if got := r.pending.Load(); got != 0 {
		t.Fatalf("pending %d after a release, want 0", got)
	}
	r.freed(500)
	testwait.Until(t, "the kick to be taken", func() bool { return len(r.kick) == 0 })
	r.freed(500) // queued while the first waits out ReleaseEvery
	if c := calls.Load(); c != 1 {
		t.Fatalf("%d releases within ReleaseEvery, want 1", c)
	}
}
