package bench

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/weirlimit/weir/internal/testwait"
)

func startRedis(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (apt-get install redis-server)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	p, err := SpawnRedis(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p.Addr
}

// The Lua token bucket against a real redis-server: a fresh key holds the
// burst, then denies; a group is all-or-nothing; the hash expires when it
// would be full again.
func TestRedisLuaTokenBucket(t *testing.T) {
	addr := startRedis(t)
	ctx := context.Background()
	rules := []RuleSpec{
		{ID: "a", Rate: 1, Period: time.Hour, Burst: 5},
		{ID: "b", Rate: 1, Period: time.Hour, Burst: 3},
		{ID: "fast", Rate: 1000, Period: time.Second, Burst: 10},
	}
	tg := NewRedisTarget(addr, rules, 4)
	defer tg.Close()

	take := func(key string, rs []string, cost int64) bool {
		t.Helper()
		ok, err := tg.CheckGroup(ctx, key, rs, cost)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// Single rule: exactly the burst passes (refill 1/h is negligible).
	got := 0
	for i := 0; i < 8; i++ {
		if take("k1", []string{"a"}, 1) {
			got++
		}
	}
	if got != 5 {
		t.Fatalf("allowed %d of 8 on burst 5", got)
	}
	// Cost above what is left is denied and takes nothing.
	if take("k2", []string{"a"}, 6) {
		t.Fatal("cost 6 allowed on burst 5")
	}
	if !take("k2", []string{"a"}, 5) {
		t.Fatal("cost 5 denied on a full burst-5 bucket")
	}
	// Group a+b: b (burst 3) limits; once denied, a keeps its 2 tokens.
	got = 0
	for i := 0; i < 6; i++ {
		if take("k3", []string{"a", "b"}, 1) {
			got++
		}
	}
	if got != 3 {
		t.Fatalf("group allowed %d, want 3 (b's burst)", got)
	}
	if !take("k3", []string{"a"}, 2) || take("k3", []string{"a"}, 1) {
		t.Fatal("a should have exactly 2 tokens left after the denied group checks")
	}
	// TTL: the time to refill fully, here ≈ 3 tokens at 1/h for b.
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	ttl, err := rc.PTTL(ctx, "rl:b:k3").Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl < 3*time.Hour-time.Minute || ttl > 3*time.Hour {
		t.Fatalf("PTTL %v, want about 3h (3 tokens at 1/h)", ttl)
	}
	h, err := rc.HGetAll(ctx, "rl:b:k3").Result()
	if err != nil || h["tokens"] == "" || h["last_refill_ms"] == "" {
		t.Fatalf("hash %v, %v; want tokens and last_refill_ms", h, err)
	}
	// Refill by the server's clock: a drained fast bucket (1/ms) has tokens
	// again once the server's time moves on; poll, do not sleep-and-assert.
	for take("k4", []string{"fast"}, 1) {
	}
	testwait.Until(t, "the fast bucket to refill", func() bool { return take("k4", []string{"fast"}, 1) })
	if _, err := tg.Check(ctx, "k5", "nope", 1); err == nil {
		t.Fatal("unknown rule accepted")
	}
}
