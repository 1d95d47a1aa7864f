package client

import (
	"testing"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// A report that could not be sent goes with the next: its counts are
// added, its events kept within maxReportEvents; take starts afresh.
func TestReporterTakeAndPutBack(t *testing.T) {
	var r reporter
	r.mu.Lock()
	r.count("a").LocalDenied = 2
	r.count("a").FailOpen = 1
	r.events = append(r.events, &weirv1.LimitEvent{Rule: "a", Key: "k1"})
	r.mu.Unlock()
	if !r.pending() {
		t.Fatal("nothing pending after counting")
	}
	rep := r.take("gw")
	if rep.GetGatewayId() != "gw" || len(rep.Counts) != 1 || len(rep.Events) != 1 || r.pending() {
		t.Fatalf("take = %v, pending after = %v", rep, r.pending())
	}
	r.mu.Lock()
	r.count("a").LocalDenied = 3
	r.mu.Unlock()
	r.putBack(rep)
	next := r.take("gw")
	if len(next.Counts) != 1 || next.Counts[0].LocalDenied != 5 || next.Counts[0].FailOpen != 1 || len(next.Events) != 1 {
		t.Fatalf("after putBack: %v", next)
	}
	for range maxReportEvents + 10 {
		next.Events = append(next.Events, &weirv1.LimitEvent{Rule: "a", Key: "k"})
	}
	r.putBack(next)
	if got := r.take("gw"); len(got.Events) != maxReportEvents {
		t.Fatalf("%d events kept, want at most %d", len(got.Events), maxReportEvents)
	}
	if empty := r.take("gw"); len(empty.Counts)+len(empty.Events) != 0 || empty.GetGatewayId() != "gw" {
		t.Fatalf("empty report = %v (it still names the gateway)", empty)
	}
}
