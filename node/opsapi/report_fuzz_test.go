package opsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/weirlimit/weir/node/events"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// reports stands in for the node: it keeps the reports it is given.
type reports struct {
	mu  sync.Mutex
	got []Report
}

func (s *reports) Self() string                 { return "n1" }
func (s *reports) Events() *events.Buffer       { return nil }
func (s *reports) HotKeys(string, int) []HotKey { return nil }
func (s *reports) Rates() []RuleRate            { return nil }
func (s *reports) Gateways() []Gateway          { return nil }
func (s *reports) Cluster() (Cluster, Rules)    { return Cluster{}, Rules{} }
func (s *reports) Peers() map[string]string     { return nil }
func (s *reports) Permits(context.Context) ([]RulePermits, error) {
	return nil, nil
}
func (s *reports) Report(r Report) error {
	s.mu.Lock()
	s.got = append(s.got, r)
	s.mu.Unlock()
	return nil
}
func (s *reports) take() []Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.got
	s.got = nil
	return g
}

var reportSeeds = []Report{
	{Gateway: "g1", Counts: []ReportCount{{Rule: "orders.write", LocalAllowed: 12, LocalDenied: 3, FailOpen: 1}}},
	{Gateway: "edge-1", Counts: []ReportCount{{Rule: "r", FailClosed: 2}}, Events: []events.Event{
		{Time: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Rule: "r", RuleVersion: 7, Key: "apikey:ak_1", Decision: events.Denied, Remaining: 0},
		{Rule: "r", Key: "ip:10.0.0.1", Decision: events.Error}}},
	{Gateway: "", Counts: []ReportCount{{Rule: "r"}}},
	{Gateway: "g", Events: []events.Event{{Rule: "r", Key: "k", Decision: "maybe"}}},
}

// checkReported fails t unless an accepted report reached the node once,
// valid, and a refused one not at all.
func checkReported(t *testing.T, src *reports, accepted bool, in []byte) {
	t.Helper()
	got := src.take()
	switch {
	case !accepted && len(got) > 0:
		t.Fatalf("%q: refused, but the node took %+v", in, got)
	case accepted && len(got) != 1:
		t.Fatalf("%q: accepted, and the node took %d reports", in, len(got))
	case accepted:
		if err := got[0].Validate(); err != nil {
			t.Fatalf("%q: the node took a report that does not validate: %v", in, err)
		}
	}
}

// FuzzReportHTTP posts outside bytes to POST /v1/gateways/report. Whatever
// the bytes: no panic; 200 with a valid report passed to the node once, or
// 400 with nothing passed on; the answer is JSON of bounded size.
func FuzzReportHTTP(f *testing.F) {
	src := &reports{}
	for _, r := range reportSeeds {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"gateway":"g","counts":[],"extra":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		// A server per input: the intake's bounds per gateway and per
		// caller (report.go) would otherwise refuse later inputs for what
		// earlier ones did.
		mux := http.NewServeMux()
		New(Config{}, src).Register(mux)
		req := httptest.NewRequest(http.MethodPost, "/v1/gateways/report", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("%q: %d %s", body, rec.Code, rec.Body)
		}
		if n := rec.Body.Len(); n > 4<<10 {
			t.Fatalf("%q: a %d-byte answer", body, n)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%q: answer is not JSON: %q", body, rec.Body)
		}
		checkReported(t, src, rec.Code == http.StatusOK, body)
	})
}

// FuzzReportGRPC reads outside bytes as the GatewayReport of Ops.Report.
// Whatever the bytes: no panic; a valid report passed to the node once,
// or InvalidArgument with nothing passed on.
func FuzzReportGRPC(f *testing.F) {
	src := &reports{}
	for _, r := range reportSeeds {
		pb := &weirv1.GatewayReport{GatewayId: r.Gateway}
		for _, c := range r.Counts {
			pb.Counts = append(pb.Counts, &weirv1.GatewayRuleCounts{Rule: c.Rule, LocalAllowed: c.LocalAllowed, LocalDenied: c.LocalDenied, FailOpen: c.FailOpen, FailClosed: c.FailClosed})
		}
		for _, e := range r.Events {
			pb.Events = append(pb.Events, &weirv1.LimitEvent{TimeUnixMs: e.Time.UnixMilli(), Rule: e.Rule, RuleVersion: e.RuleVersion, Key: e.Key, Decision: e.Decision, Remaining: e.Remaining})
		}
		b, err := proto.Marshal(pb)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var req weirv1.GatewayReport
		if proto.Unmarshal(raw, &req) != nil {
			return // gRPC refuses it before the service sees it
		}
		ops := opsService{s: New(Config{}, src)} // a server per input, as FuzzReportHTTP
		_, err := ops.Report(context.Background(), &req)
		if err != nil && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%q: %v, want InvalidArgument or nil", raw, err)
		}
		checkReported(t, src, err == nil, raw)
	})
}
