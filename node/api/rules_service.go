package api

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/authz"
	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/rulesraft/rules/rulespb"
)

// rulesService implements weirv1.RulesServer: each method reads its
// request into domain values, calls the Server's operation (core.go) and
// writes the answer back; every error goes out through GRPCError.
type rulesService struct {
	weirv1.UnimplementedRulesServer
	s *Server
}

var _ weirv1.RulesServer = (*rulesService)(nil)

// ListRules returns the rule set (overrides in force now): read-your-writes
// unless req.stale (consistent is the default, a no-op alias).
func (rs *rulesService) ListRules(ctx context.Context, req *weirv1.ListRulesRequest) (*weirv1.RuleSet, error) {
	set, _, err := rs.s.listRules(ctx, grpcCaller(ctx), req.GetStale())
	if err != nil {
		return nil, GRPCError(err)
	}
	return rulespb.SetToProto(set), nil
}

// GetRule returns one rule.
func (rs *rulesService) GetRule(ctx context.Context, req *weirv1.GetRuleRequest) (*weirv1.Rule, error) {
	r, _, err := rs.s.getRule(ctx, grpcCaller(ctx), req.GetId(), req.GetStale())
	if err != nil {
		return nil, GRPCError(err)
	}
	return rulespb.RuleToProto(r), nil
}

// ApplyRules validates the rules, and unless it is a dry run applies them
// on the leader (forwarding when this node is not it).
func (rs *rulesService) ApplyRules(ctx context.Context, req *weirv1.ApplyRulesRequest) (*weirv1.WriteResponse, error) {
	a, err := rs.s.authorize(grpcCaller(ctx))
	if err != nil {
		return nil, GRPCError(err)
	}
	in, err := rulespb.RulesFromProto(req.GetRules())
	if err != nil {
		return nil, GRPCError(err)
	}
	return writeResponse(rs.s.applyRules(ctx, a, in, req.GetReplaceAll(), req.GetDryRun(), req.GetAuthor()))
}

// DeleteRule deletes a rule and its overrides.
func (rs *rulesService) DeleteRule(ctx context.Context, req *weirv1.DeleteRuleRequest) (*weirv1.WriteResponse, error) {
	a, err := rs.s.authorize(grpcCaller(ctx))
	if err != nil {
		return nil, GRPCError(err)
	}
	return writeResponse(rs.s.deleteRule(ctx, a, req.GetId(), req.GetAuthor()))
}

// History lists versions, newest first (read-your-writes unless
// req.stale).
func (rs *rulesService) History(ctx context.Context, req *weirv1.HistoryRequest) (*weirv1.HistoryResponse, error) {
	hs, _, err := rs.s.history(ctx, grpcCaller(ctx), int(req.GetLimit()), req.GetStale())
	if err != nil {
		return nil, GRPCError(err)
	}
	out := &weirv1.HistoryResponse{Entries: make([]*weirv1.HistoryEntry, len(hs))}
	for i, h := range hs {
		out.Entries[i] = &weirv1.HistoryEntry{Version: h.Version, Author: h.Author, AtUnixMs: h.At.UnixMilli(), Summary: h.Summary}
	}
	return out, nil
}

// ReadIndex answers the leader's read index (rulesraft.Store.ReadIndex);
// a node that does not lead answers FailedPrecondition, never forwards.
func (rs *rulesService) ReadIndex(ctx context.Context, _ *weirv1.ReadIndexRequest) (*weirv1.ReadIndexResponse, error) {
	v, err := rs.s.b.Rules().ReadIndex(ctx)
	if err != nil {
		return nil, GRPCError(err)
	}
	return &weirv1.ReadIndexResponse{Version: v}, nil
}

// Rollback restores the rules and overrides of an earlier version as a new
// version.
func (rs *rulesService) Rollback(ctx context.Context, req *weirv1.RollbackRequest) (*weirv1.WriteResponse, error) {
	a, err := rs.s.authorize(grpcCaller(ctx))
	if err != nil {
		return nil, GRPCError(err)
	}
	return writeResponse(rs.s.rollback(ctx, a, req.GetVersion(), req.GetAuthor()))
}

// SetOverride creates or replaces one override.
func (rs *rulesService) SetOverride(ctx context.Context, req *weirv1.SetOverrideRequest) (*weirv1.WriteResponse, error) {
	a, err := rs.s.authorize(grpcCaller(ctx))
	if err != nil {
		return nil, GRPCError(err)
	}
	o, err := rulespb.OverrideFromProto(req.GetOverride())
	if err != nil {
		return nil, GRPCError(err)
	}
	return writeResponse(rs.s.setOverride(ctx, a, o, req.GetAuthor()))
}

// DeleteOverride deletes one override.
func (rs *rulesService) DeleteOverride(ctx context.Context, req *weirv1.DeleteOverrideRequest) (*weirv1.WriteResponse, error) {
	a, err := rs.s.authorize(grpcCaller(ctx))
	if err != nil {
		return nil, GRPCError(err)
	}
	return writeResponse(rs.s.deleteOverride(ctx, a, req.GetKey(), req.GetRule(), req.GetAuthor()))
}

// writeResponse is a write's answer on the wire.
func writeResponse(w written, err error) (*weirv1.WriteResponse, error) {
	if err != nil {
		return nil, GRPCError(err)
	}
	return &weirv1.WriteResponse{Version: w.version, Diff: w.diff}, nil
}

// Watch streams the rule set: the full set, then every later version in
// order (each a full set).
func (rs *rulesService) Watch(req *weirv1.WatchRequest, stream grpc.ServerStreamingServer[weirv1.WatchEvent]) error {
	s := rs.s
	if !s.track() {
		return GRPCError(limit.Errorf(limit.ErrUnavailable, "node is shutting down"))
	}
	defer s.active.Done()
	if id := req.GetGatewayId(); id != "" {
		g, err := s.addGateway(stream.Context(), id)
		if err != nil {
			return err
		}
		defer s.removeGateway(g)
	}
	ctx, cancel := s.bound(stream.Context())
	defer cancel()
	events := s.b.Rules().Watch(ctx, req.GetFromVersion())
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
		return GRPCError(limit.Errorf(limit.ErrUnavailable, "node is shutting down; reconnect to another node"))
	}
	if err := ctx.Err(); err != nil {
		return GRPCError(err)
	}
	return GRPCError(limit.Errorf(limit.ErrUnavailable, "rules store closed"))
}

// gatewayWatches counts the gateways holding a Watch stream here, which
// size every gateway's fail-open share (a rule's burst over the
// gateways). A gateway is the pair (owner, gateway id), the owner being
// the caller's credential (authz.GatewayOwner: a certificate's name, the
// gateway token, or the connection when the node has none), and an owner
// holds at most its MaxIDs ids at once: one caller cannot pose as many
// gateways and shrink the others' shares. Guarded by Server.mu.
type gatewayWatches struct {
	streams map[gatewayKey]int // open Watch streams per gateway
	ids     map[string]int     // distinct gateway ids per owner
}

type gatewayKey struct{ owner, id string }

// maxGatewayID is the longest gateway id a Watch may carry.
const maxGatewayID = 128

// addGateway counts a Watch stream of gateway id for the caller in ctx;
// refused (a gRPC status) when the caller may not act as a gateway or its
// owner already holds MaxIDs other ids.
func (s *Server) addGateway(ctx context.Context, id string) (gatewayKey, error) {
	if len(id) > maxGatewayID {
		return gatewayKey{}, GRPCError(limit.Errorf(limit.ErrInvalid, "gateway_id: %d bytes; at most %d", len(id), maxGatewayID))
	}
	o, err := authz.GatewayOwnerFrom(ctx, "")
	if err != nil {
		return gatewayKey{}, err
	}
	k := gatewayKey{owner: o.Name, id: id}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &s.gateways
	if w.streams == nil {
		w.streams, w.ids = map[gatewayKey]int{}, map[string]int{}
	}
	if w.streams[k] == 0 {
		if w.ids[k.owner] >= o.MaxIDs {
			return gatewayKey{}, status.Errorf(codes.ResourceExhausted,
				"gateway_id %q: this caller (%s) already watches as %d gateway ids, the most one may (give each gateway replica its own certificate or connection)", id, o.Name, o.MaxIDs)
		}
		w.ids[k.owner]++
	}
	w.streams[k]++
	return k, nil
}

// removeGateway uncounts a Watch stream addGateway counted.
func (s *Server) removeGateway(k gatewayKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &s.gateways
	if w.streams[k]--; w.streams[k] > 0 {
		return
	}
	delete(w.streams, k)
	if w.ids[k.owner]--; w.ids[k.owner] <= 0 {
		delete(w.ids, k.owner)
	}
}
