package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// scrapeForwards reads the forward histogram's count and sum from a
// node's /metrics text and nothing else; a node without it reads zero.
func TestScrapeForwards(t *testing.T) {
	page := `# HELP weir_forward_batch_items Items per forwarded RPC.
# TYPE weir_forward_batch_items histogram
weir_forward_batch_items_bucket{le="1"} 10
weir_forward_batch_items_bucket{le="+Inf"} 12
weir_forward_batch_items_sum 17
weir_forward_batch_items_count 12
weir_forwarded_items_total 17
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(page))
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	f, err := scrapeForwards(context.Background(), nil, host)
	if err != nil {
		t.Fatal(err)
	}
	if f != (Forwards{Msgs: 12, Items: 17}) {
		t.Errorf("got %+v, want 12 messages carrying 17 items", f)
	}
	page = "weir_checks_total 3\n"
	if f, err = scrapeForwards(context.Background(), nil, host); err != nil || f != (Forwards{}) {
		t.Errorf("a node that forwarded nothing: %+v, %v; want zero", f, err)
	}
}
