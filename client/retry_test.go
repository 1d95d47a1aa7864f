package client

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

type scripted struct {
	statuses []int
	after    string
	bodies   []string
}

func (s *scripted) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		s.bodies = append(s.bodies, string(b))
	}
	st := s.statuses[0]
	if len(s.statuses) > 1 {
		s.statuses = s.statuses[1:]
	}
	h := http.Header{}
	if st != 200 && s.after != "" {
		h.Set("Retry-After", s.after)
	}
	return &http.Response{StatusCode: st, Header: h, Body: io.NopCloser(strings.NewReader("x")), Request: r}, nil
}

func TestRetryTransport(t *testing.T) {
	base := &scripted{statuses: []int{429, 503, 200}, after: "2"}
	var waits []time.Duration
	rt := &RetryTransport{Base: base, BaseDelay: time.Second, MaxDelay: 8 * time.Second, Rand: func() float64 { return 0.5 },
		Sleep: func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }}
	req, _ := http.NewRequest("POST", "http://x/", bytes.NewBufferString("payload"))
	req.Header.Set("Idempotency-Key", "k1") // a POST is retried on 503 only with one
	resp, err := rt.RoundTrip(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	// attempt 0: backoff 1s → jitter 750ms, Retry-After 2s wins; attempt 1: backoff 2s → 1.5s, 2s wins.
	if len(waits) != 2 || waits[0] != 2*time.Second || waits[1] != 2*time.Second {
		t.Errorf("waits %v", waits)
	}
	if len(base.bodies) != 3 || base.bodies[2] != "payload" {
		t.Errorf("bodies %q", base.bodies)
	}

	// Without Retry-After: capped exponential backoff with jitter.
	base = &scripted{statuses: []int{429}}
	waits = nil
	rt = &RetryTransport{Base: base, MaxRetries: 5, BaseDelay: time.Second, MaxDelay: 4 * time.Second, Rand: func() float64 { return 0 },
		Sleep: func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }}
	req, _ = http.NewRequest("GET", "http://x/", nil)
	resp, _ = rt.RoundTrip(req)
	if resp.StatusCode != 429 {
		t.Errorf("status %d", resp.StatusCode)
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}
	if len(waits) != len(want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	for i := range want {
		if waits[i] != want[i] {
			t.Errorf("waits %v, want %v", waits, want)
			break
		}
	}

	// A body that cannot be replayed is not retried.
	base = &scripted{statuses: []int{429, 200}}
	rt = &RetryTransport{Base: base, Sleep: func(context.Context, time.Duration) error { t.Error("slept"); return nil }}
	req, _ = http.NewRequest("POST", "http://x/", io.NopCloser(strings.NewReader("once")))
	req.GetBody = nil
	if resp, _ = rt.RoundTrip(req); resp.StatusCode != 429 {
		t.Errorf("non-replayable: status %d", resp.StatusCode)
	}
	// A 503 to a POST without an Idempotency-Key may have been acted on
	// (Weir's "outcome unknown"): returned, not sent again. A 429 is.
	for _, tc := range []struct {
		method string
		status int
		sends  int
	}{{"POST", 503, 1}, {"PATCH", 503, 1}, {"POST", 429, 2}, {"PUT", 503, 2}, {"DELETE", 503, 2}} {
		base = &scripted{statuses: []int{tc.status, 200}}
		rt = &RetryTransport{Base: base, Sleep: func(context.Context, time.Duration) error { return nil }}
		req, _ = http.NewRequest(tc.method, "http://x/", bytes.NewBufferString("body"))
		resp, _ = rt.RoundTrip(req)
		if len(base.bodies) != tc.sends {
			t.Errorf("%s answered %d: sent %d times, want %d (final status %d)", tc.method, tc.status, len(base.bodies), tc.sends, resp.StatusCode)
		}
	}
	// A Retry-After beyond MaxDelay is returned, not waited for.
	base = &scripted{statuses: []int{503, 200}, after: "3600"}
	rt = &RetryTransport{Base: base, MaxDelay: time.Second, Sleep: func(context.Context, time.Duration) error { t.Error("slept"); return nil }}
	req, _ = http.NewRequest("GET", "http://x/", nil)
	if resp, _ = rt.RoundTrip(req); resp.StatusCode != 503 {
		t.Errorf("long Retry-After: status %d", resp.StatusCode)
	}
}
