package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// HTTPFactory returns a Factory of gateways that use a node's HTTP check
// API: one JSON `POST /v1/limits/check {key, rule, cost}` per check.
// Gateway i talks to addrs[i % len(addrs)] (the node forwards to the
// owner) over its own keep-alive http.Client that keeps up to conns idle
// connections (size it to the gateway's callers).
func HTTPFactory(addrs []string, conns int) Factory {
	return func(i int) (Target, error) {
		if len(addrs) == 0 {
			return nil, fmt.Errorf("%w: no HTTP addresses", ErrInput)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = max(conns, 1)
		tr.MaxIdleConnsPerHost = max(conns, 1)
		return &httpGateway{
			url: "http://" + addrs[i%len(addrs)] + "/v1/limits/check",
			hc:  &http.Client{Transport: tr},
		}, nil
	}
}

// httpGateway is one simulated gateway without the SDK.
type httpGateway struct {
	url string
	hc  *http.Client
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
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, bytes.NewReader(body))
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
