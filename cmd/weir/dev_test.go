package main

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testlog"

	"github.com/weirlimit/weir/internal/testwait"
)

// TestDevGatewayCountsDownTo429 runs `weir dev` in-process and drives its
// gateway as the printed help says: the example login.ip rule (5 per
// minute per IP) admits POSTs with the remaining count going down, then
// answers 429 with Retry-After; the echo upstream answers admitted ones.
func TestDevGatewayCountsDownTo429(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut testlog.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--raft", "127.0.0.1:0",
			"--gossip", "127.0.0.1:0", "--gateway", "127.0.0.1:0", "--log-level", "error"},
			strings.NewReader(""), &out, &errOut, func(string) string { return "" })
	}()
	defer func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("weir dev exited %d; stderr:\n%s", code, errOut.String())
		}
	}()
	gwRe := regexp.MustCompile(`Gateway (http://\S+)`)
	var gw string
	testwait.For(t, 60*time.Second, "weir dev to print its gateway", func() error {
		if m := gwRe.FindStringSubmatch(out.String()); m != nil {
			gw = m[1]
			return nil
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("weir dev exited %d early; stderr:\n%s", code, errOut.String())
		default:
		}
		return errors.New("no gateway line yet")
	})
	// login.ip is fail_mode closed with the default 5 ms timeout: on a busy
	// machine (the race detector) a check may miss it and get 503, which
	// may still have taken a token. So: at most 5 admitted, remaining
	// going down, then a 429.
	admitted, last := 0, 5
	for i := 1; ; i++ {
		if i > 30 {
			t.Fatalf("no 429 after 30 requests (%d admitted)", admitted)
		}
		resp, err := http.Post(gw+"/v1/login", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		switch resp.StatusCode {
		case http.StatusServiceUnavailable:
			continue
		case http.StatusOK:
			admitted++
			rem, err := strconv.Atoi(h.Get("X-RateLimit-Remaining"))
			if h.Get("Content-Type") != "application/json" || err != nil || rem >= last || admitted > 5 {
				t.Fatalf("admitted #%d: %q, X-RateLimit-Remaining %q after %d; want the echo upstream's JSON and a count going down, at most 5",
					admitted, h.Get("Content-Type"), h.Get("X-RateLimit-Remaining"), last)
			}
			last = rem
			continue
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		if h.Get("Retry-After") == "" || h.Get("X-RateLimit-Remaining") != "0" || admitted == 0 {
			t.Fatalf("429 after %d admitted: Retry-After %q remaining %q, want a Retry-After and 0",
				admitted, h.Get("Retry-After"), h.Get("X-RateLimit-Remaining"))
		}
		if !strings.Contains(h.Get("RateLimit-Policy"), `"login.ip";q=5;w=60`) {
			t.Fatalf("RateLimit-Policy %q", h.Get("RateLimit-Policy"))
		}
		return
	}
}
