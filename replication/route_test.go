package replication

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/weirlimit/weir/internal/scenario"
)

// TestRouteScenarios runs the scenario files in testdata/route: a story of
// one node's partition machine (the commands of testdata/partitions, whose
// output is the effects and the table after them) and of where that node
// routes the items of a check at each point. With -update the files are
// rewritten with what the router does now (go test -run RouteScenarios
// -update); review the diff.
//
// The node's view (its ring and member list) follows the machine's last
// ring command: owners by its place, members its live list (else its
// members, else everyone placed). view sets a different one, until the
// next ring: the node's ring can be newer or older than its hand-off's
// table for a moment. Commands of their own:
//
//	view place=a:b,-,... [live=a,b]     the node's view ("-" no owner)
//	route parts=0,1 [forwarded] [hops=N] [leaving]
//	pin parts=0,1 [forwarded] [hops=N] [leaving]
//
// route prints, for each partition, where an item of it goes (Router.Route
// over the machine as the table); forwarded marks the item as sent by a
// peer, hops its hop count, leaving the node as leaving the ring. pin is
// the check pinning what route said to decide here (Handoff.Pin): a
// partition moved since is rerouted (Router.Reroute), any other is pinned.
func TestRouteScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/route/*.txt")
	if err != nil || len(files) < 8 {
		t.Fatalf("want at least 8 scenarios, have %d: %v", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s := &routeScenario{}
			scenario.Run(t, f, *update, s.step)
		})
	}
}

// routeScenario is one scenario's node: its machine and its view.
type routeScenario struct {
	self string
	m    *Partitions
	view scenarioView
}

// scenarioView is a View over fixed owners and members.
type scenarioView struct {
	owners  []string // nil: no ring yet
	members map[string]bool
}

func (v *scenarioView) PartitionOwner(p uint32) string {
	if v.owners == nil {
		return ""
	}
	return v.owners[p]
}

func (v *scenarioView) Member(id string) bool { return v.members[id] }

var _ View = (*scenarioView)(nil)

func (s *routeScenario) step(t *testing.T, line string) string {
	t.Helper()
	fields := strings.Fields(line)
	if len(fields) == 0 {
		t.Fatal("empty command")
	}
	args, flags := map[string]string{}, map[string]bool{}
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			args[k] = v
		} else {
			flags[f] = true
		}
	}
	switch fields[0] {
	case "view":
		s.view = viewOf(t, args)
		return ""
	case "route", "pin":
		return s.route(t, fields[0] == "pin", args, flags)
	}
	var out string
	s.m, out = scenarioStep(t, s.m, line)
	switch fields[0] {
	case "new":
		s.self, s.view = args["self"], scenarioView{}
	case "ring":
		s.view = viewOf(t, args)
	}
	return out
}

// viewOf is the view a ring or view command describes.
func viewOf(t *testing.T, args map[string]string) scenarioView {
	place := parsePlace(t, args["place"])
	v := scenarioView{owners: make([]string, len(place)), members: map[string]bool{}}
	for p, a := range place {
		v.owners[p] = a.Owner
	}
	ids := args["live"]
	if _, ok := args["live"]; !ok {
		ids = args["members"]
	}
	if ids == "" {
		v.members = membersOf(place)
	}
	for _, id := range strings.Split(ids, ",") {
		if id != "" {
			v.members[id] = true
		}
	}
	return v
}

func (s *routeScenario) route(t *testing.T, pin bool, args map[string]string, flags map[string]bool) string {
	if s.m == nil {
		t.Fatal("route before new")
	}
	via := Via{Forwarded: flags["forwarded"]}
	if h, ok := args["hops"]; ok {
		n, err := strconv.ParseUint(h, 10, 32)
		if err != nil {
			t.Fatalf("hops=%q: %v", h, err)
		}
		via.Hops = uint32(n)
	}
	r := Router{Self: s.self, Leaving: flags["leaving"], Table: s.m, View: &s.view}
	var b strings.Builder
	for _, f := range strings.Split(args["parts"], ",") {
		n, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			t.Fatalf("parts=%q: %v", args["parts"], err)
		}
		p := uint32(n)
		var rt Route
		switch st, to := s.m.State(p); {
		case !pin:
			rt = r.Route(p, via)
		case st == PartMoved: // as Handoff.Pin fails
			rt = r.Reroute(p, to, via)
		default:
			fmt.Fprintf(&b, "p%d pinned\n", p)
			continue
		}
		fmt.Fprintf(&b, "p%d %s\n", p, formatRoute(rt))
	}
	return strings.TrimSpace(b.String())
}

func formatRoute(r Route) string {
	switch r.Do {
	case Forward:
		return "forward " + r.To
	case Unavailable:
		return "unavailable: " + r.Why
	}
	return r.Do.String()
}

// A Router reads the published Routes as its table as well as the machine.
var _ Table = (*Routes)(nil)
var _ Table = (*Partitions)(nil)

// Whatever the table, the view and the item, a forwarded item with MaxHops
// hops is never passed on, and nothing is forwarded to nobody or decided
// here after it moved away.
func TestRouteNeverLoopsNorDecidesMoved(t *testing.T) {
	states := []PartState{PartNone, PartReady, PartPending, PartMoved, PartReleased}
	ids := []string{"", "a", "b", "c"}
	for _, st := range states {
		for _, peer := range ids {
			if peer == "a" && (st == PartMoved || st == PartPending) {
				continue // never: a node does not hand off to, nor pull from, itself
			}
			for _, owner := range ids {
				for _, leaving := range []bool{false, true} {
					for _, via := range []Via{{}, {Forwarded: true}, {Forwarded: true, Hops: 1}, {Forwarded: true, Hops: MaxHops}, {Hops: MaxHops}} {
						tab := fixedTable{st: st, peer: peer}
						v := &scenarioView{owners: []string{owner}, members: map[string]bool{"a": true, "b": true}}
						r := Router{Self: "a", Leaving: leaving, Table: tab, View: v}
						got := r.Route(0, via)
						name := fmt.Sprintf("%s peer=%q owner=%q leaving=%v %+v: %+v", st, peer, owner, leaving, via, got)
						switch {
						case got.Do == Forward && via.Forwarded && via.Hops >= MaxHops:
							t.Errorf("%s: passed on at the hop limit", name)
						case got.Do == Forward && (got.To == "" || got.To == "a"):
							t.Errorf("%s: forwarded to nobody or to itself", name)
						case got.Do == Unavailable && got.Why == "":
							t.Errorf("%s: unavailable without a reason", name)
						case st == PartMoved && (got.Do == Decide || got.Do == Wait):
							t.Errorf("%s: decided here after it moved away", name)
						}
						if st == PartMoved {
							if re := r.Reroute(0, peer, via); re != got {
								t.Errorf("%s: Reroute %+v differs from Route", name, re)
							}
						}
					}
				}
			}
		}
	}
}

type fixedTable struct {
	st   PartState
	peer string
}

func (f fixedTable) State(uint32) (PartState, string) { return f.st, f.peer }
