package api

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkHTTPCheckHandler is the node's own cost of one POST
// /v1/limits/check, without the network: routing, reading and decoding
// the body, the decision (the test backend), encoding and writing the
// answer, and the request metric.
func BenchmarkHTTPCheckHandler(b *testing.B) {
	n := startNode(b, nodeOpts{bootstrap: true})
	req := httptest.NewRequest("POST", "/v1/rules:apply", strings.NewReader(rulesYAML))
	req.Header.Set("Content-Type", "application/yaml")
	rec := httptest.NewRecorder()
	h := n.srv.Handler()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("apply: %d %s", rec.Code, rec.Body)
	}
	bodies := make([]string, 1024)
	for i := range bodies {
		bodies[i] = `{"key":"apikey:ak_` + strconv.Itoa(i) + `","rule":"orders.write","cost":1}`
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		req := httptest.NewRequest("POST", "/v1/limits/check", strings.NewReader(bodies[i%len(bodies)]))
		req.Header["Content-Type"] = jsonTypes
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("check: %d %s", rec.Code, rec.Body)
		}
	}
}
