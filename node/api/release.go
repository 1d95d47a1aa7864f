package api

import (
	"context"
	"net/http"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/internal/httpjson"
	"github.com/weirlimit/weir/limit"
)

// releaseItem is one permit to give back, as an edge read it: bad is why
// its permit could not be read (the item is then answered CodeInvalid).
type releaseItem struct {
	key, rule string
	permit    bucket.PermitID
	bad       error
}

// release gives back permits of concurrency rules: each item becomes a
// release item (limit.Item.Release) decided on its key's owner like a
// check, so it frees exactly the permit it names. A result's Allowed says
// whether the permit was held.
func (s *Server) release(ctx context.Context, in []releaseItem) ([]limit.Result, error) {
	if len(in) > MaxItems {
		return nil, limit.Errorf(limit.ErrInvalid, "items: %d in one request; at most %d (split the batch)", len(in), MaxItems)
	}
	out := make([]limit.Result, len(in))
	var items []limit.Item
	var where []int
	for i := range in {
		if in[i].bad != nil {
			out[i] = limit.Result{Code: limit.CodeInvalid, Err: in[i].bad.Error()}
			continue
		}
		items = append(items, limit.Item{Key: in[i].key, Rule: in[i].rule, Release: &in[i].permit})
		where = append(where, i)
	}
	got := make([]limit.Result, len(items))
	if err := s.check(ctx, items, got); err != nil {
		return nil, err
	}
	for j, i := range where {
		out[i] = got[j]
	}
	return out, nil
}

// releaseJSON is the body of POST /v1/limits/release.
type releaseJSON struct {
	Key    string `json:"key"`
	Rule   string `json:"rule"`
	Permit string `json:"permit"`
}

// POST /v1/limits/release {key, rule, permit} → {"released": true|false}
// (false: the permit had expired or was released already).
func (s *Server) releaseHTTP(w http.ResponseWriter, r *http.Request) error {
	var body releaseJSON
	if err := s.decodeJSON(w, r, &body); err != nil {
		return err
	}
	it := releaseItem{key: body.Key, rule: body.Rule}
	it.permit, it.bad = limit.ParsePermit(body.Permit)
	res, err := s.release(r.Context(), []releaseItem{it})
	if err != nil {
		return err
	}
	if err := itemError(&res[0]); err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, struct {
		Released bool `json:"released"`
	}{res[0].Allowed})
	return nil
}
