package main

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testwait"
)

// syncBuffer is a strings.Builder safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDevGatewayCountsDownTo429 runs `weir dev` in-process and drives its
// gateway as the printed help says: the example login.ip rule (5 per
// minute per IP) admits 5 POSTs with the remaining count going down, then
// answers 429 with Retry-After; the echo upstream answers admitted ones.
func TestDevGatewayCountsDownTo429(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runStdin(ctx, []string{"dev", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--raft", "127.0.0.1:0",
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
	for i := 1; i <= 6; i++ {
		resp, err := http.Post(gw+"/v1/login", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		if i <= 5 {
			if resp.StatusCode != http.StatusOK || h.Get("Content-Type") != "application/json" {
				t.Fatalf("request %d: %d %q, want 200 from the echo upstream", i, resp.StatusCode, h.Get("Content-Type"))
			}
			if got, want := h.Get("X-RateLimit-Remaining"), string(rune('0'+5-i)); got != want {
				t.Fatalf("request %d: X-RateLimit-Remaining %q, want %q", i, got, want)
			}
			continue
		}
		if resp.StatusCode != http.StatusTooManyRequests || h.Get("Retry-After") == "" || h.Get("X-RateLimit-Remaining") != "0" {
			t.Fatalf("request 6: %d Retry-After %q remaining %q, want 429 with Retry-After and 0",
				resp.StatusCode, h.Get("Retry-After"), h.Get("X-RateLimit-Remaining"))
		}
		if !strings.Contains(h.Get("RateLimit-Policy"), `"login.ip";q=5;w=60`) {
			t.Fatalf("RateLimit-Policy %q", h.Get("RateLimit-Policy"))
		}
	}
}
