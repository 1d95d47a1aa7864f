package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
)

// HTTPFactory returns a Factory of gateways that use the nodes' HTTP check
// API: one JSON `POST /v1/limits/check {key, rule, cost}` per check. Like a
// gateway behind a load balancer, each gateway spreads its checks over
// every node in turn (a node forwards to the owner), so no gateway is
// favoured by sitting next to an owner. Each gateway has its own
// keep-alive http.Client keeping up to conns idle connections per node
// (size it to the gateway's callers).
func HTTPFactory(addrs []string, conns int, tc *tls.Config) Factory {
	return func(i int) (Target, error) {
		if len(addrs) == 0 {
			return nil, fmt.Errorf("%w: no HTTP addresses", ErrInput)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = max(conns, 1) * len(addrs)
		tr.MaxIdleConnsPerHost = max(conns, 1)
		g := &httpGateway{hc: &http.Client{Transport: tr}}
		scheme := "http://"
		if tc != nil {
			tr.TLSClientConfig, scheme = tc, "https://"
		}
		for j := range addrs {
			g.urls = append(g.urls, scheme+addrs[(i+j)%len(addrs)]+"/v1/limits/check")
		}
		return g, nil
	}
}

// httpGateway is one simulated gateway without the SDK.
type httpGateway struct {
	urls []string
	next atomic.Uint64
	hc   *http.Client
}

var _ Target = (*httpGateway)(nil)

type httpCheck struct {
	Key  string `json:"key"`
	Rule string `json:"rule"`
	Cost int64  `json:"cost"`
}

type httpResult struct {
	Allowed bool `json:"allowed"`
}

func (g *httpGateway) Check(ctx context.Context, key, rule string, cost int64) (bool, error) {
	body, err := json.Marshal(httpCheck{Key: key, Rule: rule, Cost: cost})
	if err != nil {
		return false, err
	}
	url := g.urls[g.next.Add(1)%uint64(len(g.urls))]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("bench: http: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body) // read to the end: the connection is reused
	if err != nil {
		return false, fmt.Errorf("bench: http: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%w: http %d %s", ErrUndecided, resp.StatusCode, bytes.TrimSpace(b))
	}
	var r httpResult
	if err := json.Unmarshal(b, &r); err != nil {
		return false, fmt.Errorf("bench: http: decoding %q: %w", b, err)
	}
	return r.Allowed, nil
}

// Close drops the gateway's idle connections.
func (g *httpGateway) Close() error {
	g.hc.CloseIdleConnections()
	return nil
}
