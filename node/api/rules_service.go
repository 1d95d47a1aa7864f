package api

import (
	"context"

	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/rulesraft"
	"github.com/weirlimit/weir/rulesraft/rules"
	"github.com/weirlimit/weir/rulesraft/rules/rulespb"
)

// rulesService implements weirv1.RulesServer.
type rulesService struct {
	weirv1.UnimplementedRulesServer
	s *Server
}

var _ weirv1.RulesServer = (*rulesService)(nil)

// invalid is an InvalidArgument status carrying err's full message (every
// problem of a *rules.ValidationError).
func invalid(err error) error {
	return status.Error(codes.InvalidArgument, err.Error())
}

// current returns the local set, or for a consistent read the leader's:
// after a barrier on the leader, or forwarded to it.
func (rs *rulesService) current(ctx context.Context, consistent bool) (*rules.Set, error) {
	st := rs.s.b.Store()
	if consistent {
		if !st.IsLeader() {
			c, fctx, err := rs.s.leaderClient(ctx)
			if err != nil {
				return nil, err
			}
			p, err := c.ListRules(fctx, &weirv1.ListRulesRequest{Consistent: true})
			if err != nil {
				return nil, err
			}
			set, err := rulespb.SetFromProto(p)
			if err != nil {
				return nil, status.Error(codes.Internal, "leader sent a rule set this node cannot read: "+err.Error())
			}
			return set, nil
		}
		if err := st.Barrier(ctx); err != nil {
			return nil, grpcError(err)
		}
	}
	return st.Current(), nil
}

// activeSet returns set without overrides that expired by now. It shares
// set when nothing expired.
func activeSet(set *rules.Set, now func() time.Time) *rules.Set {
	t := now()
	n := 0
	for _, o := range set.Overrides {
		if o.Active(t) {
			n++
		}
	}
	if n == len(set.Overrides) {
		return set
	}
	out := &rules.Set{Version: set.Version, Rules: set.Rules, Overrides: make([]rules.Override, 0, n)}
	for _, o := range set.Overrides {
		if o.Active(t) {
			out.Overrides = append(out.Overrides, o)
		}
	}
	return out
}

// ListRules returns the rule set (overrides in force now).
func (rs *rulesService) ListRules(ctx context.Context, req *weirv1.ListRulesRequest) (*weirv1.RuleSet, error) {
	set, err := rs.current(ctx, req.GetConsistent())
	if err != nil {
		return nil, err
	}
	return rulespb.SetToProto(activeSet(set, rs.s.cfg.Now)), nil
}

// GetRule returns one rule.
func (rs *rulesService) GetRule(ctx context.Context, req *weirv1.GetRuleRequest) (*weirv1.Rule, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id: must not be empty")
	}
	set, err := rs.current(ctx, req.GetConsistent())
	if err != nil {
		return nil, err
	}
	r, ok := set.Rule(req.GetId())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "rule %q not found (version %d)", req.GetId(), set.Version)
	}
	return rulespb.RuleToProto(r), nil
}

// ApplyRules validates the rules, and unless it is a dry run applies them
// on the leader (forwarding when this node is not it).
func (rs *rulesService) ApplyRules(ctx context.Context, req *weirv1.ApplyRulesRequest) (*weirv1.WriteResponse, error) {
	if err := rs.s.authorize(ctx); err != nil {
		return nil, err
	}
	in, err := rulespb.RulesFromProto(req.GetRules())
	if err != nil {
		return nil, invalid(err)
	}
	cur := rs.s.b.Store().Current()
	next, err := rules.Merge(cur.Rules, in, req.GetReplaceAll())
	if err != nil {
		return nil, invalid(err)
	}
	for i := range in {
		in[i] = rules.Normalize(in[i])
	}
	diff := rules.DiffSets(cur.Rules, next)
	if req.GetDryRun() {
		return &weirv1.WriteResponse{Version: cur.Version, Diff: diff}, nil
	}
	if req.GetAuthor() == "" {
		req.Author = authorFrom(ctx)
	}
	resp, err := rs.s.write(ctx, rulesraft.Command{Op: rulesraft.OpApply, Rules: in, ReplaceAll: req.GetReplaceAll(), Author: req.GetAuthor()},
		func(c weirv1.RulesClient, fctx context.Context) (*weirv1.WriteResponse, error) {
			return c.ApplyRules(fctx, req)
		})
	if err != nil {
		return nil, err
	}
	if resp.Diff == nil { // applied here; forwarded answers carry the leader's diff
		resp.Diff = diff
	}
	return resp, nil
}

// DeleteRule deletes a rule and its overrides.
func (rs *rulesService) DeleteRule(ctx context.Context, req *weirv1.DeleteRuleRequest) (*weirv1.WriteResponse, error) {
	if err := rs.s.authorize(ctx); err != nil {
		return nil, err
	}
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id: must not be empty")
	}
	if req.GetAuthor() == "" {
		req.Author = authorFrom(ctx)
	}
	return rs.s.write(ctx, rulesraft.Command{Op: rulesraft.OpDeleteRule, ID: req.GetId(), Author: req.GetAuthor()},
		func(c weirv1.RulesClient, fctx context.Context) (*weirv1.WriteResponse, error) {
			return c.DeleteRule(fctx, req)
		})
}

// History lists versions, newest first.
func (rs *rulesService) History(_ context.Context, req *weirv1.HistoryRequest) (*weirv1.HistoryResponse, error) {
	hs := rs.s.b.Store().History(int(req.GetLimit()))
	out := &weirv1.HistoryResponse{Entries: make([]*weirv1.HistoryEntry, len(hs))}
	for i, h := range hs {
		out.Entries[i] = &weirv1.HistoryEntry{Version: h.Version, Author: h.Author, AtUnixMs: h.At.UnixMilli(), Summary: h.Summary}
	}
	return out, nil
}

// Rollback restores the rules and overrides of an earlier version as a new
// version.
func (rs *rulesService) Rollback(ctx context.Context, req *weirv1.RollbackRequest) (*weirv1.WriteResponse, error) {
	if err := rs.s.authorize(ctx); err != nil {
		return nil, err
	}
	if req.GetVersion() == 0 {
		return nil, status.Error(codes.InvalidArgument, "version: must be > 0 (see the history for versions)")
	}
	if req.GetAuthor() == "" {
		req.Author = authorFrom(ctx)
	}
	return rs.s.write(ctx, rulesraft.Command{Op: rulesraft.OpRollback, Version: req.GetVersion(), Author: req.GetAuthor()},
		func(c weirv1.RulesClient, fctx context.Context) (*weirv1.WriteResponse, error) {
			return c.Rollback(fctx, req)
		})
}

// SetOverride creates or replaces one override.
func (rs *rulesService) SetOverride(ctx context.Context, req *weirv1.SetOverrideRequest) (*weirv1.WriteResponse, error) {
	if err := rs.s.authorize(ctx); err != nil {
		return nil, err
	}
	o, err := rulespb.OverrideFromProto(req.GetOverride())
	if err != nil {
		return nil, invalid(err)
	}
	if r, ok := rs.s.b.Store().Current().Rule(o.Rule); ok {
		err = o.ValidateFor(r)
	} else {
		err = o.Validate()
	}
	if err != nil {
		return nil, invalid(err)
	}
	if req.GetAuthor() == "" {
		req.Author = authorFrom(ctx)
	}
	return rs.s.write(ctx, rulesraft.Command{Op: rulesraft.OpSetOverride, Override: &o, Author: req.GetAuthor()},
		func(c weirv1.RulesClient, fctx context.Context) (*weirv1.WriteResponse, error) {
			return c.SetOverride(fctx, req)
		})
}

// DeleteOverride deletes one override.
func (rs *rulesService) DeleteOverride(ctx context.Context, req *weirv1.DeleteOverrideRequest) (*weirv1.WriteResponse, error) {
	if err := rs.s.authorize(ctx); err != nil {
		return nil, err
	}
	var missing []string
	if req.GetKey() == "" {
		missing = append(missing, "key")
	}
	if req.GetRule() == "" {
		missing = append(missing, "rule")
	}
	if len(missing) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "%s: must not be empty", strings.Join(missing, " and "))
	}
	if req.GetAuthor() == "" {
		req.Author = authorFrom(ctx)
	}
	return rs.s.write(ctx, rulesraft.Command{Op: rulesraft.OpDeleteOverride, Key: req.GetKey(), Rule: req.GetRule(), Author: req.GetAuthor()},
		func(c weirv1.RulesClient, fctx context.Context) (*weirv1.WriteResponse, error) {
			return c.DeleteOverride(fctx, req)
		})
}

// write applies cmd on the local store when this node is the leader (the
// Store stamps At with the leader's clock); otherwise it sends the original
// request to the leader with forward. A node that loses leadership during
// Apply does not forward (the outcome is unknown, and a retry could apply
// twice): the caller gets FailedPrecondition (not_leader) and retries.
func (s *Server) write(ctx context.Context, cmd rulesraft.Command, forward func(weirv1.RulesClient, context.Context) (*weirv1.WriteResponse, error)) (*weirv1.WriteResponse, error) {
	st := s.b.Store()
	if !st.IsLeader() {
		c, fctx, err := s.leaderClient(ctx)
		if err == nil {
			var resp *weirv1.WriteResponse
			if resp, err = forward(c, fctx); err == nil {
				s.metrics.ruleWrites.WithLabelValues(cmd.Op, writeForwarded).Inc()
				return resp, nil
			}
		}
		s.metrics.ruleWrites.WithLabelValues(cmd.Op, writeError).Inc()
		return nil, err
	}
	cmd.At = s.cfg.Now()
	v, err := st.Apply(ctx, cmd)
	if err != nil {
		s.metrics.ruleWrites.WithLabelValues(cmd.Op, writeError).Inc()
		return nil, grpcError(err)
	}
	s.metrics.ruleWrites.WithLabelValues(cmd.Op, writeOK).Inc()
	return &weirv1.WriteResponse{Version: v}, nil
}

// Watch streams the rule set: the full set, then every later version in
// order (each a full set).
func (rs *rulesService) Watch(req *weirv1.WatchRequest, stream grpc.ServerStreamingServer[weirv1.WatchEvent]) error {
	s := rs.s
	if !s.track() {
		return status.Error(codes.Unavailable, "node is shutting down")
	}
	defer s.active.Done()
	if id := req.GetGatewayId(); id != "" {
		s.addGateway(id)
		defer s.removeGateway(id)
	}
	ctx, cancel := s.bound(stream.Context())
	defer cancel()
	events := s.b.Store().Watch(ctx, req.GetFromVersion())
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return endOfStream(s, stream.Context())
			}
			set := activeSet(ev.Set, s.cfg.Now)
			if err := stream.Send(&weirv1.WatchEvent{Full: rulespb.SetToProto(set), Version: set.Version, Gateways: s.b.Gateways()}); err != nil {
				return err
			}
		case <-ctx.Done():
			return endOfStream(s, stream.Context())
		}
	}
}

// endOfStream is the status a stream handler returns once its source ends.
func endOfStream(s *Server, ctx context.Context) error {
	if s.ctx.Err() != nil {
		return status.Error(codes.Unavailable, "node is shutting down; reconnect to another node")
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unavailable, "rules store closed")
}
