package client

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryTransport is an http.RoundTripper for callers of a Weir-protected
// API. On 429 it waits and tries again, at most MaxRetries times, for
// requests whose body can be replayed (no body, or GetBody set); on 503
// only if the request is also idempotent: its method is (RFC 9110: GET,
// HEAD, OPTIONS, TRACE, PUT, DELETE) or it carries an Idempotency-Key
// header. A 429 says the request was not served; a 503 may come after
// the server acted on it (Weir's admin API answers 503 "outcome unknown"
// when a leader lost leadership after appending a write, which the next
// leader may still commit), so a POST is not sent twice on a guess. The
// wait is the larger of the server's Retry-After and a capped exponential
// backoff with jitter (BaseDelay×2^attempt, halved-to-full random, at most
// MaxDelay). A Retry-After longer than MaxDelay is not waited for: the
// response is returned to the caller.
type RetryTransport struct {
	Base       http.RoundTripper // nil: http.DefaultTransport
	MaxRetries int               // 0: 3
	BaseDelay  time.Duration     // 0: 100ms
	MaxDelay   time.Duration     // 0: 10s
	// Sleep waits d or until ctx ends (tests inject a fake). Nil: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a number in [0, 1) for jitter. Nil: math/rand/v2.
	Rand func() float64
	// Now is used to read HTTP-date Retry-After values. Nil: time.Now.
	Now func() time.Time
}

var _ http.RoundTripper = (*RetryTransport)(nil)

// RoundTrip sends req, retrying as described on RetryTransport.
func (t *RetryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	maxRetries, baseDelay, maxDelay := t.MaxRetries, t.BaseDelay, t.MaxDelay
	if maxRetries <= 0 {
		maxRetries = 3
	}
	if baseDelay <= 0 {
		baseDelay = 100 * time.Millisecond
	}
	if maxDelay <= 0 {
		maxDelay = 10 * time.Second
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	for attempt := 0; ; attempt++ {
		r := req
		if attempt > 0 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			r = req.Clone(req.Context())
			r.Body = body
		}
		resp, err := base.RoundTrip(r)
		if err != nil || !replayable || attempt >= maxRetries || !retryable(req, resp.StatusCode) {
			return resp, err
		}
		backoff := min(maxDelay, baseDelay<<min(attempt, 30))
		wait := backoff/2 + time.Duration(t.rand()*float64(backoff/2))
		if ra, ok := t.retryAfter(resp.Header.Get("Retry-After")); ok {
			if ra > maxDelay {
				return resp, nil
			}
			wait = max(wait, ra)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		if err := t.sleep(req.Context(), wait); err != nil {
			return nil, err
		}
	}
}

// retryable says whether an answer with status to req may be sent again.
func retryable(req *http.Request, status int) bool {
	switch status {
	case http.StatusTooManyRequests:
		return true
	case http.StatusServiceUnavailable:
		switch req.Method {
		case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
			return true
		}
		return req.Header.Get("Idempotency-Key") != ""
	}
	return false
}

func (t *RetryTransport) rand() float64 {
	if t.Rand != nil {
		return t.Rand()
	}
	return rand.Float64()
}

func (t *RetryTransport) sleep(ctx context.Context, d time.Duration) error {
	if t.Sleep != nil {
		return t.Sleep(ctx, d)
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryAfter reads delay-seconds or an HTTP-date.
func (t *RetryTransport) retryAfter(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > int64(1<<62/time.Second) {
			n = int64(1 << 62 / time.Second)
		}
		return time.Duration(n) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	return max(0, at.Sub(now())), true
}
