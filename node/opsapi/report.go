package opsapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/weirlimit/weir/node/events"
)

// Report is one batch of a gateway's decisions made without asking the
// owner: answered from a lease or the blocked-until cache (Local), or by
// the rule's fail mode when the owner could not be reached in time.
type Report struct {
	Gateway string        `json:"gateway"`
	Counts  []ReportCount `json:"counts"`
	Events  []ReportEvent `json:"events,omitempty"`
}

// ReportCount is one rule's decisions since the gateway's last report.
type ReportCount struct {
	Rule         string `json:"rule"`
	LocalAllowed uint64 `json:"local_allowed,omitempty"`
	LocalDenied  uint64 `json:"local_denied,omitempty"`
	FailOpen     uint64 `json:"fail_open,omitempty"`
	FailClosed   uint64 `json:"fail_closed,omitempty"`
}

// ReportEvent is one sampled gateway-side decision.
type ReportEvent struct {
	Time        time.Time `json:"time"`
	Rule        string    `json:"rule"`
	RuleVersion uint64    `json:"rule_version"`
	Key         string    `json:"key"`
	Decision    string    `json:"decision"`
	Remaining   int64     `json:"remaining"`
}

// Limits on a report.
const (
	MaxReportCounts = 10000
	MaxReportEvents = 1000
	MaxGatewayID    = 128
)

// ErrBadReport marks a report that is refused whole.
var ErrBadReport = errors.New("opsapi: bad report")

// Validate checks a report's shape; nothing of a bad report is applied.
func (r *Report) Validate() error {
	switch {
	case r.Gateway == "" || len(r.Gateway) > MaxGatewayID:
		return fmt.Errorf("%w: gateway: want an id of 1 to %d bytes", ErrBadReport, MaxGatewayID)
	case len(r.Counts) > MaxReportCounts:
		return fmt.Errorf("%w: counts: %d, at most %d", ErrBadReport, len(r.Counts), MaxReportCounts)
	case len(r.Events) > MaxReportEvents:
		return fmt.Errorf("%w: events: %d, at most %d", ErrBadReport, len(r.Events), MaxReportEvents)
	}
	for i, c := range r.Counts {
		if c.Rule == "" {
			return fmt.Errorf("%w: counts[%d].rule: must not be empty", ErrBadReport, i)
		}
	}
	for i, e := range r.Events {
		if e.Rule == "" || e.Key == "" || (e.Decision != events.Allowed && e.Decision != events.Denied && e.Decision != events.Error) {
			return fmt.Errorf("%w: events[%d]: want rule, key and a decision of allowed, denied or error", ErrBadReport, i)
		}
	}
	return nil
}

// POST /v1/gateways/report
func (s *Server) postReport(w http.ResponseWriter, r *http.Request) {
	var rep Report
	dec := json.NewDecoder(io.LimitReader(r.Body, 4<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		badRequest(w, "malformed report: %v", err)
		return
	}
	if err := rep.Validate(); err != nil {
		badRequest(w, "%v", err)
		return
	}
	if err := s.src.Report(rep); err != nil {
		badRequest(w, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		OK bool `json:"ok"`
	}{true})
}
