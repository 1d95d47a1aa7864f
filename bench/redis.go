package bench

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// tokenBucketLua is the design every team starts with, as one atomic
// script: each KEYS[i] is a hash {tokens, last_refill_ms} for one rule on
// one key; ARGV is cost, then rate, period_ms, burst per key. Time is the
// server's TIME. The check passes only if every bucket holds cost tokens,
// and then takes cost from each (all-or-nothing). Each hash expires when
// it would be full again.
const tokenBucketLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cost = tonumber(ARGV[1])
local n = #KEYS
local tokens = {}
local ok = true
for i = 1, n do
  local rate = tonumber(ARGV[3*i-1])
  local period = tonumber(ARGV[3*i])
  local burst = tonumber(ARGV[3*i+1])
  local h = redis.call('HMGET', KEYS[i], 'tokens', 'last_refill_ms')
  local tk = tonumber(h[1])
  local last = tonumber(h[2])
  if tk == nil or last == nil then
    tk = burst
    last = now
  end
  local elapsed = now - last
  if elapsed < 0 then elapsed = 0 end
  tk = math.min(burst, tk + elapsed * rate / period)
  tokens[i] = tk
  if tk < cost then ok = false end
end
for i = 1, n do
  local rate = tonumber(ARGV[3*i-1])
  local period = tonumber(ARGV[3*i])
  local burst = tonumber(ARGV[3*i+1])
  local tk = tokens[i]
  if ok then tk = tk - cost end
  redis.call('HSET', KEYS[i], 'tokens', tostring(tk), 'last_refill_ms', now)
  local ttl = math.ceil((burst - tk) * period / rate)
  if ttl < 1 then ttl = 1 end
  redis.call('PEXPIRE', KEYS[i], ttl)
end
if ok then return 1 end
return 0
`

// RedisTarget checks token buckets in Redis with the Lua script (EVALSHA,
// falling back to EVAL once to load it).
type RedisTarget struct {
	client *redis.Client
	script *redis.Script
	rules  map[string][3]int64 // id -> rate, period ms, burst
}

var (
	_ Target       = (*RedisTarget)(nil)
	_ GroupChecker = (*RedisTarget)(nil)
)

// NewRedisTarget connects to addr with a pool of poolSize connections and
// knows the given rules.
func NewRedisTarget(addr string, rules []RuleSpec, poolSize int) *RedisTarget {
	t := &RedisTarget{
		client: redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize, MinIdleConns: poolSize}),
		script: redis.NewScript(tokenBucketLua),
		rules:  map[string][3]int64{},
	}
	for _, r := range rules {
		t.rules[r.ID] = [3]int64{r.Rate, r.Period.Milliseconds(), r.Burst}
	}
	return t
}

// RedisFactory returns a Factory of gateways, each its own client pool.
func RedisFactory(addr string, rules []RuleSpec, poolSize int) Factory {
	return func(int) (Target, error) { return NewRedisTarget(addr, rules, poolSize), nil }
}

func (t *RedisTarget) Check(ctx context.Context, key, rule string, cost int64) (bool, error) {
	return t.CheckGroup(ctx, key, []string{rule}, cost)
}

func (t *RedisTarget) CheckGroup(ctx context.Context, key string, rules []string, cost int64) (bool, error) {
	keys := make([]string, len(rules))
	args := make([]any, 1, 1+3*len(rules))
	args[0] = strconv.FormatInt(cost, 10)
	for i, r := range rules {
		spec, ok := t.rules[r]
		if !ok {
			return false, fmt.Errorf("%w: unknown rule %q", ErrUndecided, r)
		}
		keys[i] = "rl:" + r + ":" + key
		args = append(args, spec[0], spec[1], spec[2])
	}
	n, err := t.script.Run(ctx, t.client, keys, args...).Int64()
	if err != nil {
		return false, fmt.Errorf("bench: redis: %w", err)
	}
	return n == 1, nil
}

// Close closes the connection pool.
func (t *RedisTarget) Close() error { return t.client.Close() }
