package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Forwards is the forwarding the nodes did so far, summed over them, from
// their /metrics (weir_forward_batch_items: one observation per forward
// message a node wrote to an owner, its items summed).
type Forwards struct {
	Msgs, Items float64
}

// Forwards reads every node's forward counters.
func (s *Spawned) Forwards(ctx context.Context) (Forwards, error) {
	var sum Forwards
	for _, n := range s.Nodes() {
		f, err := scrapeForwards(ctx, s.AdminTLS, n.HTTP)
		if err != nil {
			return Forwards{}, err
		}
		sum.Msgs += f.Msgs
		sum.Items += f.Items
	}
	return sum, nil
}

// scrapeForwards reads one node's forward counters (absent: zero).
func scrapeForwards(ctx context.Context, tc *tls.Config, host string) (Forwards, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	hc, url := http.DefaultClient, "http://"+host+"/metrics"
	if tc != nil {
		tr := &http.Transport{TLSClientConfig: tc}
		defer tr.CloseIdleConnections()
		hc, url = &http.Client{Transport: tr}, "https://"+host+"/metrics"
	}
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, url, nil)
	if err != nil {
		return Forwards{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Forwards{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Forwards{}, fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	var f Forwards
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "weir_forward_batch_items_count":
			dst = &f.Msgs
		case "weir_forward_batch_items_sum":
			dst = &f.Items
		default:
			continue
		}
		if *dst, err = strconv.ParseFloat(strings.TrimSpace(val), 64); err != nil {
			return Forwards{}, fmt.Errorf("GET %s: %s: %w", url, name, err)
		}
	}
	return f, sc.Err()
}
