package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A write answered not_leader ("retry shortly": an election under way) is
// sent again until a leader takes it; one that keeps being answered so
// fails with that answer once the retry window is over.
func TestAPIClientRetriesNotLeader(t *testing.T) {
	var calls, failFirst atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= failFirst.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"this node is not the Raft leader and no leader is known yet; retry shortly","code":"not_leader"}`))
			return
		}
		_, _ = w.Write([]byte(`{"version":7}`))
	}))
	defer srv.Close()
	c := newAPIClient(srv.URL, "", 2*time.Second)
	defer c.close()

	failFirst.Store(2)
	var out struct{ Version uint64 }
	if _, err := c.do(context.Background(), http.MethodPost, "/v1/rules:apply", nil, []byte("rules: []"), "application/yaml", &out); err != nil || out.Version != 7 {
		t.Fatalf("after two not_leader answers: %v, version %d", err, out.Version)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d requests, want 3 (two answered not_leader, then the leader's)", n)
	}

	calls.Store(0)
	failFirst.Store(1 << 40)
	_, err := c.do(context.Background(), http.MethodPost, "/v1/rules:apply", nil, []byte("rules: []"), "application/yaml", nil)
	var ae *apiError
	if !errors.As(err, &ae) || ae.Code != "not_leader" {
		t.Fatalf("always not_leader: %v, want that answer", err)
	}
	if n := calls.Load(); n < 2 {
		t.Fatalf("%d requests: the not_leader answer was not retried", n)
	}
}
