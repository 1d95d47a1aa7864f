package opsapi

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/node/authz"
	"github.com/weirlimit/weir/node/events"
	"github.com/weirlimit/weir/proto/weirv1"
)

// RegisterGRPC registers the Ops service (this node's events and hot keys).
func (s *Server) RegisterGRPC(g *grpc.Server) {
	weirv1.RegisterOpsServer(g, opsService{s: s})
}

type opsService struct {
	weirv1.UnimplementedOpsServer
	s *Server
}

func eventToProto(e *events.Event) *weirv1.LimitEvent {
	return &weirv1.LimitEvent{
		TimeUnixMs: e.Time.UnixMilli(), Rule: e.Rule, RuleVersion: e.RuleVersion, Key: e.Key,
		Decision: e.Decision, Remaining: e.Remaining, Node: e.Node, Gateway: e.Gateway, Seq: e.Seq,
	}
}

// Events sends the buffered events that match (the newest limit), then,
// with follow, new ones until the client or the node goes away.
func (o opsService) Events(req *weirv1.EventsRequest, stream grpc.ServerStreamingServer[weirv1.LimitEvent]) error {
	f := events.Filter{Rule: req.GetRule(), Key: req.GetKey(), Decision: req.GetDecision()}
	if !events.ValidDecision(f.Decision) {
		return status.Errorf(codes.InvalidArgument, "decision %q: want allowed, denied or error", f.Decision)
	}
	if req.GetFollow() {
		if !o.s.follow() {
			return status.Error(codes.ResourceExhausted, o.s.tooManyFollowers())
		}
		defer o.s.unfollow()
	}
	buf := o.s.src.Events()
	evs, next, wake := buf.Since(0, f, int(req.GetLimit()))
	for {
		for i := range evs {
			if err := stream.Send(eventToProto(&evs[i])); err != nil {
				return err
			}
		}
		if !req.GetFollow() {
			return nil
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-o.s.cfg.Ctx.Done():
			return status.Error(codes.Unavailable, "node is shutting down")
		case <-wake:
			if buf.Closed() {
				return status.Error(codes.Unavailable, "node is shutting down")
			}
			evs, next, wake = buf.Since(next, f, 0)
		}
	}
}

// HotKeys answers this node's hottest keys.
func (o opsService) HotKeys(_ context.Context, req *weirv1.HotKeysRequest) (*weirv1.HotKeysResponse, error) {
	top := int(req.GetTop())
	if top == 0 {
		top = 10
	}
	out := &weirv1.HotKeysResponse{Node: o.s.src.Self()}
	for _, k := range MergeHotKeys(o.s.src.HotKeys(req.GetRule(), 0), top) {
		out.Keys = append(out.Keys, &weirv1.HotKey{Rule: k.Rule, Key: k.Key, Rate: k.Rate, ErrRate: k.ErrRate})
	}
	return out, nil
}

// Report takes a gateway's batch of gateway-side decisions.
func (o opsService) Report(ctx context.Context, req *weirv1.GatewayReport) (*weirv1.GatewayReportResponse, error) {
	owner, err := authz.GatewayOwnerFrom(ctx, "")
	if err != nil {
		return nil, err
	}
	rep := Report{Gateway: req.GetGatewayId()}
	for _, c := range req.GetCounts() {
		rep.Counts = append(rep.Counts, ReportCount{Rule: c.GetRule(), LocalAllowed: c.GetLocalAllowed(),
			LocalDenied: c.GetLocalDenied(), FailOpen: c.GetFailOpen(), FailClosed: c.GetFailClosed()})
	}
	for _, e := range req.GetEvents() {
		var at time.Time // zero: the node stamps it
		if ms := e.GetTimeUnixMs(); ms > 0 {
			at = time.UnixMilli(ms)
		}
		rep.Events = append(rep.Events, events.Event{Time: at, Rule: e.GetRule(),
			RuleVersion: e.GetRuleVersion(), Key: e.GetKey(), Decision: e.GetDecision(), Remaining: e.GetRemaining()})
	}
	switch err := o.s.takeReport(owner, &rep); {
	case errors.Is(err, ErrReportRefused):
		return nil, status.Error(codes.ResourceExhausted, err.Error())
	case err != nil:
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &weirv1.GatewayReportResponse{}, nil
}
