package opsapi

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/node/authz"
	"github.com/weirlimit/weir/node/events"
)

var (
	t0   = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cert = authz.GatewayOwner{Name: "cert:gw", MaxIDs: authz.MaxGatewayIDsPerCredential}
)

func admit(in *Intake, o authz.GatewayOwner, id string, now time.Time) error {
	_, err := in.Admit(o, &Report{Gateway: id}, now)
	return err
}

func TestIntakeRate(t *testing.T) {
	in := NewIntake()
	for i := 0; i < ReportBurst; i++ {
		if err := admit(in, cert, "gw-1", t0); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
	}
	if err := admit(in, cert, "gw-1", t0); !errors.Is(err, ErrReportRefused) {
		t.Fatalf("report past the burst: %v", err)
	}
	// Another gateway on the same certificate counts apart.
	if err := admit(in, cert, "gw-2", t0); err != nil {
		t.Fatal(err)
	}
	if err := admit(in, cert, "gw-1", t0.Add(ReportEvery)); err != nil {
		t.Fatalf("a second later: %v", err)
	}
}

func TestIntakeIDsPerOwner(t *testing.T) {
	in := NewIntake()
	for i := 0; i < cert.MaxIDs; i++ {
		if err := admit(in, cert, fmt.Sprint("gw-", i), t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := admit(in, cert, "one-more", t0); !errors.Is(err, ErrReportRefused) {
		t.Fatalf("id %d of one certificate: %v", cert.MaxIDs+1, err)
	}
	other := authz.GatewayOwner{Name: "cert:other", MaxIDs: 1}
	if err := admit(in, other, "one-more", t0); err != nil {
		t.Fatalf("another certificate: %v", err)
	}
	host := reportOwner(authz.GatewayOwner{Name: "conn:10.0.0.1:4000", MaxIDs: 1, Conn: true})
	if host.Name != "host:10.0.0.1" || host.MaxIDs != MaxGatewayIDsPerHost {
		t.Fatalf("report owner of a connection: %+v", host)
	}
}

// Fake gateways cannot lock out real ones: anonymous ones give their
// place first, credentialed ones once idle.
func TestIntakeFull(t *testing.T) {
	in := NewIntake()
	for i := 0; i < MaxTrackedGateways; i++ {
		o := authz.GatewayOwner{Name: fmt.Sprint("host:", i), MaxIDs: 1, Conn: true}
		if err := admit(in, o, "fake", t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := admit(in, cert, "real", t0); err != nil || in.Len() != MaxTrackedGateways {
		t.Fatalf("credentialed gateway into a table full of anonymous ones: %v (%d tracked)", err, in.Len())
	}
	in = NewIntake()
	for i := 0; i < MaxTrackedGateways; i++ {
		o := authz.GatewayOwner{Name: fmt.Sprint("cert:", i), MaxIDs: 1}
		if err := admit(in, o, "gw", t0); err != nil {
			t.Fatal(err)
		}
	}
	anon := authz.GatewayOwner{Name: "host:x", MaxIDs: 1, Conn: true}
	if err := admit(in, anon, "gw", t0.Add(time.Second)); !errors.Is(err, ErrReportRefused) {
		t.Fatalf("full of live gateways: %v", err)
	}
	if err := admit(in, anon, "gw", t0.Add(GatewayIdle)); err != nil {
		t.Fatalf("once one is idle: %v", err)
	}
}

func TestIntakeCutsCountsAndRestamps(t *testing.T) {
	in := NewIntake()
	rep := &Report{Gateway: "gw", Counts: []ReportCount{{Rule: "r", LocalAllowed: 10, FailOpen: 1 << 62}, {Rule: "s", FailOpen: 1 << 62}},
		Events: []events.Event{{Time: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}, {Time: t0.Add(-time.Second)}, {}}}
	a, err := in.Admit(cert, rep, t0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := uint64(MaxGatewayRate * MaxReportSpan.Seconds())
	var sum uint64
	for _, c := range rep.Counts {
		sum += c.LocalAllowed + c.LocalDenied + c.FailOpen + c.FailClosed
	}
	if sum != allowed || rep.Counts[0].LocalAllowed != 10 || a.Cut != 1<<63+10-allowed {
		t.Fatalf("counts %+v (sum %d, cut %d); want %d in all, local first", rep.Counts, sum, a.Cut, allowed)
	}
	if a.Restamped != 2 || !rep.Events[0].Time.Equal(t0) || !rep.Events[1].Time.Equal(t0.Add(-time.Second)) || !rep.Events[2].Time.Equal(t0) {
		t.Fatalf("events %+v, restamped %d", rep.Events, a.Restamped)
	}
	// Two seconds later, two seconds' worth.
	rep = &Report{Gateway: "gw", Counts: []ReportCount{{Rule: "r", FailOpen: 1 << 62}}}
	if _, err := in.Admit(cert, rep, t0.Add(2*time.Second)); err != nil || rep.Counts[0].FailOpen != 2*MaxGatewayRate {
		t.Fatalf("second report: %+v, %v", rep.Counts, err)
	}
}

func TestValidateReportBounds(t *testing.T) {
	for name, r := range map[string]Report{
		"huge key":  {Gateway: "g", Events: []events.Event{{Rule: "r", Key: strings.Repeat("k", 1300000), Decision: "denied"}}},
		"long rule": {Gateway: "g", Counts: []ReportCount{{Rule: strings.Repeat("r", MaxReportRule+1)}}},
	} {
		if err := r.Validate(); !errors.Is(err, ErrBadReport) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
