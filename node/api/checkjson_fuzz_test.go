package api

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/bucket"
)

// FuzzCheckHTTP sends outside bytes as the body of POST /v1/limits/check
// to a real Server over a real rules Store (the rules of rulesYAML).
// Whatever the bytes: no panic and no 5xx; an answer other than 200
// changes no counter; a 200 is JSON with one result per item asked; the
// answer is bounded by the body asked (an error sentence is cut at 2 KiB).
func FuzzCheckHTTP(f *testing.F) {
	n := startNode(f, nodeOpts{bootstrap: true})
	h := n.srv.Handler()
	req := httptest.NewRequest(http.MethodPost, "/v1/rules:apply", strings.NewReader(rulesYAML))
	req.Header.Set("Content-Type", "application/yaml")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		f.Fatalf("apply: %d %s", rec.Code, rec.Body)
	}
	for _, s := range []string{
		`{"key":"apikey:ak_1","rule":"orders.write","cost":1}`,
		`{"key":"ip:10.0.0.1","rule":"search"}`,
		`{"items":[{"key":"apikey:ak_1","rule":"orders.write"},{"key":"ip:1","rule":"search","cost":2}]}`,
		`{"key":"apikey:ak_1","rule":"nope"}`,
		`{"key":"","rule":"search"}`,
		`{"key":"k","rule":"search","cost":-1}`,
		`{"key":"k","rule":"search","min_rule_version":99}`,
		`{"key":"k","rule":"search","items":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		before := n.b.counterStates()
		// A short deadline: a min_rule_version ahead of the rules waits for
		// it until then (MaxWait is 5 s).
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/limits/check", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		out := rec.Body.Bytes()
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%q: %d %s", body, rec.Code, out)
		}
		if max := 4<<10 + 200*len(body); len(out) > max {
			t.Fatalf("%q: answer of %d bytes, over %d", body, len(out), max)
		}
		if rec.Code != http.StatusOK {
			if after := n.b.counterStates(); !maps.Equal(before, after) {
				t.Fatalf("%q: refused with %d %s, but counters changed", body, rec.Code, out)
			}
			return
		}
		var ans struct {
			Allowed *bool             `json:"allowed"`
			Results []json.RawMessage `json:"results"`
		}
		if err := json.Unmarshal(out, &ans); err != nil {
			t.Fatalf("%q: 200 with an answer that is not JSON: %q", body, out)
		}
		var asked checkBody
		if err := decodeJSONBytes(body, &asked); err != nil {
			t.Fatalf("%q: 200, but the strict decoder refuses the body: %v", body, err)
		}
		if asked.Items == nil && ans.Allowed == nil || asked.Items != nil && len(ans.Results) != len(asked.Items) {
			t.Fatalf("%q: answer %s does not match the items asked", body, out)
		}
	})
}

// counterStates copies the fixture's counters.
func (b *testBackend) counterStates() map[string]bucket.State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.counters)
}
