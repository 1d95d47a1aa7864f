package api

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
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

// TestCheckRouteAsTheMux holds the check's direct route to what the mux
// did: the route label of its metric, the Content-Type rule (an exact type,
// one with parameters, a wrong one), and a check path the mux cleans.
func TestCheckRouteAsTheMux(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	h := n.srv.Handler()
	do := func(path, ct, body string) int {
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		req.Header.Set("Content-Type", ct)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := do("/v1/rules:apply", "application/yaml", rulesYAML); code != http.StatusOK {
		t.Fatalf("apply: %d", code)
	}
	body := `{"key":"apikey:ak_1","rule":"orders.write","cost":1}`
	for _, c := range []struct {
		path, ct string
		want     int
	}{
		{"/v1/limits/check", "application/json", http.StatusOK},
		{"/v1/limits/check", "application/JSON; charset=utf-8", http.StatusOK},
		{"/v1/limits/check", "text/plain", http.StatusUnsupportedMediaType},
		{"/v1/limits/./check", "application/json", http.StatusTemporaryRedirect},
	} {
		if code := do(c.path, c.ct, body); code != c.want {
			t.Errorf("POST %s (%s): %d, want %d", c.path, c.ct, code, c.want)
		}
	}
	for code, want := range map[string]float64{"200": 2, "415": 1} {
		var m dto.Metric
		if err := n.srv.metrics.httpRequests.WithLabelValues(checkPattern, code).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got != want {
			t.Errorf("weir_http_requests_total{route=%q,code=%s} = %v, want %v", checkPattern, code, got, want)
		}
	}
}
