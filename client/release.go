package client

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// ReleaseTimeout bounds a release the middleware makes after the request.
const ReleaseTimeout = 2 * time.Second

// HoldsPermits reports whether d holds permits of concurrency rules, which
// Release gives back.
func (d Decision) HoldsPermits() bool {
	for i := range d.Limits {
		if d.Limits[i].Permit != nil {
			return true
		}
	}
	return false
}

// Release gives back the permits d holds (concurrency rules), in one
// Limiter.Release call through the owner of the first one's key (the node
// forwards the others to their owners). A permit that had expired is not
// an error. Call it once the request's work is done, whether d was allowed
// or not; Middleware does. A gateway that dies leaves its permits to
// expire after the rule's permit_ttl.
func (c *Client) Release(ctx context.Context, d Decision) error {
	var items []*weirv1.ReleaseItem
	for i := range d.Limits {
		if l := &d.Limits[i]; l.Permit != nil {
			items = append(items, &weirv1.ReleaseItem{Key: l.Key, Rule: l.Rule, Permit: l.Permit})
		}
	}
	if len(items) == 0 {
		return nil
	}
	if c.closed.Load() {
		return ErrClosed
	}
	nc, err := c.conn(c.route(items[0].Key))
	if err != nil {
		return err
	}
	resp, err := nc.lc.Release(ctx, &weirv1.ReleaseRequest{Items: items})
	if err != nil {
		c.stats.releaseFailures.Add(1)
		return fmt.Errorf("client: release: %w", err)
	}
	for i, r := range resp.GetResults() {
		if r.GetErrorCode() != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
			c.stats.releaseFailures.Add(1)
			return fmt.Errorf("client: release %s of rule %s: %s", items[i].Key, items[i].Rule, r.GetError())
		}
	}
	return nil
}

// releaseAfter arranges that the permits d holds are released once the
// request r ends: when the handler returns (the upstream answer ended) or
// when the client goes away (r's context ends), whichever comes first,
// once. The returned func is deferred by the caller.
func (c *Client) releaseAfter(r *http.Request, d Decision) (done func()) {
	var once sync.Once
	release := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
			defer cancel()
			if err := c.Release(ctx, d); err != nil {
				c.cfg.Logger.Warn("weir client: release failed; the permits expire after their permit_ttl", "err", err)
			}
		})
	}
	stop := context.AfterFunc(r.Context(), release)
	return func() {
		stop()
		release()
	}
}
