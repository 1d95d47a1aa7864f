package clusterview

import (
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	run "github.com/weirlimit/weir/internal/scenario"
	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/ring"
)

var update = flag.Bool("update", false, "rewrite the golden output of testdata/*.txt")

// TestScenarios runs the scenario files in testdata: each block is one
// command to one node's parts (its Book, Quorum, Policy, Leave and Join,
// wired as the node wires them), then "----", then what they decided. With
// -update the files are rewritten with what the parts do now; review the
// diff. Times are durations since the start (now=2.5s).
//
// Commands (one per block; lists comma-separated):
//
//	new self=c [partitions=4] [replicas=2] [join]
//	member now=T id=a [boot=1] [state=alive|suspect|dead|left] [leaving] [grpc=addr] [unproven]
//	view now=T [joined] [leaving]
//	leader now=T [until=T] [id=a] [answers=yes|no]
//	rejoin now=T [conflict=T]
//	left
//	raftaddr id=a
//	leave now=T [owned=0,1]
//	leave-step now=T [moved=0,1] [others=yes|no] [answers=yes|no] [probe=D]
//	join now=T
//	join-step now=T [alone=yes|no] [fail]
//
// view steps the Policy over the book's live members and, when it decides
// a change, publishes it (as the node does once the hand-off took it).
// leader feeds the Quorum one sample every QuorumSample from now to until,
// each with the same leader (none without id); the probes it asks for are
// answered with answers, and a run of them is printed on one line. leave takes
// this node's partitions in the published ring unless owned is given; a
// leave-step's probe, if one is due, takes D of the leave's clock.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScenario(t, f) })
	}
}

func runScenario(t *testing.T, file string) {
	var s *scenario
	run.Run(t, file, *update, func(t *testing.T, line string) string {
		if strings.HasPrefix(line, "new ") {
			s = newScenario(t, args(t, line))
			return ""
		}
		if s == nil {
			t.Fatalf("%s: %q before new", file, line)
		}
		return s.step(t, line)
	})
}

// scenario is one node's parts, wired as node wires them.
type scenario struct {
	self    string
	join    bool // a join is configured
	book    *Book
	quorum  Quorum
	lead    *leadership
	policy  *Policy
	ring    *ring.Ring // published
	members map[string]Member
	leave   *Leave
	clock   time.Time // the leave's
	joiner  *Join
	settle  *Settle // started with others: the first ring waits for a quiet member list
}

// leadership is what the node publishes of its Quorum for the Policy.
type leadership struct {
	q        *Quorum
	regained bool
}

func (l *leadership) LeaderlessFor() time.Duration { return l.q.LeaderlessFor() }
func (l *leadership) TakeRegained() bool {
	r := l.regained
	l.regained = false
	return r
}

func newScenario(t *testing.T, a map[string]string) *scenario {
	cfg := ring.LegacyConfig() // the placements in testdata are the legacy layout's
	cfg.PartitionCount = intArg(t, a, "partitions", 4)
	cfg.Replicas = intArg(t, a, "replicas", 2)
	s := &scenario{self: a["self"], book: NewBook(a["self"])}
	_, s.join = a["join"]
	if _, ok := a["settle"]; ok {
		s.settle = &Settle{Quiet: FirstRingQuiet, Wait: FirstRingWait}
	}
	s.lead = &leadership{q: &s.quorum}
	s.policy = &Policy{Self: s.self, Ring: cfg, Departures: s.book, Leader: s.lead}
	return s
}

func (s *scenario) step(t *testing.T, line string) string {
	a := args(t, line)
	now := at(t, a["now"])
	switch verb := strings.Fields(line)[0]; verb {
	case "member":
		m := Member{ID: a["id"], State: Alive, Gossip: a["id"] + ":gossip", GRPC: a["id"] + ":grpc", Raft: a["id"] + ":raft"}
		if st, ok := a["state"]; ok {
			m.State = st
		}
		if g, ok := a["grpc"]; ok {
			m.GRPC = g
		}
		m.Boot = uint64(intArg(t, a, "boot", 1))
		_, m.Leaving = a["leaving"]
		if _, ok := a["unproven"]; ok {
			s.book.Drop(m.ID)
		} else {
			s.book.Report(m, now)
		}
		return s.bookString()
	case "view":
		_, joined := a["joined"]
		_, leaving := a["leaving"]
		_, restoring := a["restoring"]
		in := Input{Now: int64(now.Sub(epoch)), Members: s.book.Live(), Leaving: leaving,
			Joining: s.join && !joined, Restoring: restoring, Ring: s.ring, Published: s.members}
		in.Settling = s.settle != nil && s.ring == nil && !in.Joining && s.settle.Settling(in.Now, in.Members)
		c, ok, err := s.policy.Step(in)
		switch {
		case err != nil:
			return "error " + err.Error()
		case !ok && in.Joining && s.ring == nil:
			return "hold: not joined yet"
		case !ok && in.Restoring && s.ring == nil:
			return "hold: restoring"
		case !ok && in.Settling && s.ring == nil:
			return "hold: members settling"
		case !ok:
			return "unchanged"
		}
		s.ring, s.members = c.Ring, c.Members
		return changeString(c)
	case "leader":
		until := now
		if u, ok := a["until"]; ok {
			until = at(t, u)
		}
		var events []string
		for ; !now.After(until); now = now.Add(QuorumSample) {
			probe, regained := s.quorum.Tick(a["id"] != "")
			if probe {
				ans, ok := a["answers"]
				if !ok {
					t.Fatalf("%s: a probe at %v and no answers= given", line, now.Sub(epoch))
				}
				regained = s.quorum.Answered(ans == "yes")
				events = append(events, fmt.Sprintf("probe answered=%s at %v", ans, now.Sub(epoch)))
			}
			if regained {
				s.lead.regained = true
				events = append(events, fmt.Sprintf("regained at %v", now.Sub(epoch)))
			}
		}
		return strings.Join(append(collapse(events), fmt.Sprintf("leaderless %v", s.quorum.LeaderlessFor())), "\n")
	case "rejoin":
		var out []string
		if c, ok := a["conflict"]; ok && Reannounce(now, at(t, c)) {
			out = append(out, "reannounce to "+strings.Join(s.book.PeerGossipAddrs(), ","))
		}
		return strings.Join(append(out, "rejoin "+list(s.book.LostDue(now))), "\n")
	case "left":
		return "left " + list(s.book.LeftMembers())
	case "raftaddr":
		addr, ok := s.book.RaftAddr(a["id"])
		return fmt.Sprintf("raft %s %v", addr, ok)
	case "leave":
		owned := parts(t, a["owned"])
		if _, ok := a["owned"]; !ok && s.ring != nil {
			owned = s.ring.OwnedBy(s.self)
		}
		s.clock = now
		s.leave = NewLeave(owned, func() time.Time { return s.clock })
		return fmt.Sprintf("owned %v", owned)
	case "leave-step":
		s.clock = now
		h := &fakeHandoff{moved: parts(t, a["moved"]), others: a["others"] != "no", answers: a["answers"] == "yes",
			clock: &s.clock}
		if d, ok := a["probe"]; ok {
			h.takes = dur(t, d)
		}
		out, left := s.leave.Step(h)
		probed := ""
		if h.probed {
			probed = " (probed)"
		}
		return fmt.Sprintf("%v left=%d%s", out, left, probed)
	case "join":
		s.joiner = NewJoin(now)
		return ""
	case "join-step":
		act := s.joiner.Step(now, a["alone"] != "no")
		if _, fail := a["fail"]; fail && act == JoinAttempt {
			return fmt.Sprintf("%v failed: next in %v", act, s.joiner.Failed(now))
		}
		return act.String()
	default:
		t.Fatalf("unknown command %q", verb)
	}
	return ""
}

// collapse prints a run of like events ("probe answered=no at 2s", ...)
// as one line: "probe answered=no at 2s..4.5s (6)".
func collapse(events []string) []string {
	var out []string
	for i := 0; i < len(events); {
		what, first, _ := strings.Cut(events[i], " at ")
		j, last := i+1, first
		for ; j < len(events); j++ {
			w, at, _ := strings.Cut(events[j], " at ")
			if w != what {
				break
			}
			last = at
		}
		if j-i == 1 {
			out = append(out, events[i])
		} else {
			out = append(out, fmt.Sprintf("%s at %s..%s (%d)", what, first, last, j-i))
		}
		i = j
	}
	return out
}

// fakeHandoff is what a leave watches, as the test sets it.
type fakeHandoff struct {
	moved   []uint32
	others  bool
	answers bool
	probed  bool
	clock   *time.Time
	takes   time.Duration // how long a probe waits for its answers
}

func (h *fakeHandoff) Moved(p uint32) bool { return slices.Contains(h.moved, p) }
func (h *fakeHandoff) OthersInRing() bool  { return h.others }
func (h *fakeHandoff) PeersAnswer() bool {
	h.probed = true
	*h.clock = h.clock.Add(h.takes)
	return h.answers
}

func (s *scenario) bookString() string {
	var live []string
	for id, m := range s.book.Live() {
		if m.Leaving {
			id += "(leaving)"
		}
		live = append(live, id)
	}
	var gone []string
	for id, st := range s.book.Departed() {
		gone = append(gone, id+":"+st)
	}
	return "live " + list(live) + "\ndeparted " + list(gone)
}

func changeString(c Change) string {
	kind := "same ring"
	if c.Rebuilt {
		kind = "new ring"
	}
	var live []string
	for id, addr := range c.Event.Live {
		live = append(live, id+"="+addr)
	}
	out := []string{
		fmt.Sprintf("%s %s", kind, list(c.Event.Members)),
		"place " + placeString(c.Event.Place),
		"live " + list(live),
		"departed " + list(c.Event.Departed),
	}
	if c.Base != NoBase {
		out = append(out, fmt.Sprintf("base %v from %s: %s", c.Base, list(c.BaseOf), placeString(c.Event.Base)))
	}
	return strings.Join(out, "\n")
}

func placeString(place []replication.Assignment) string {
	var ps []string
	for _, a := range place {
		ps = append(ps, strings.Join(a.Replicas, ":"))
	}
	return strings.Join(ps, ",")
}

// list prints ids sorted ("-" for none).
func list(ids []string) string {
	if len(ids) == 0 {
		return "-"
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return strings.Join(ids, ",")
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(t *testing.T, s string) time.Time {
	if s == "" {
		return epoch
	}
	return epoch.Add(dur(t, s))
}

func dur(t *testing.T, s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

func parts(t *testing.T, s string) []uint32 {
	var out []uint32
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		p, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			t.Fatalf("partition %q: %v", f, err)
		}
		out = append(out, uint32(p))
	}
	return out
}

func intArg(t *testing.T, a map[string]string, k string, def int) int {
	v, ok := a[k]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", k, v, err)
	}
	return n
}

// args reads "verb k=v flag ..." into a map (a flag maps to "").
func args(t *testing.T, line string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(line)[1:] {
		k, v, _ := strings.Cut(f, "=")
		if _, dup := out[k]; dup {
			t.Fatalf("%q: %s given twice", line, k)
		}
		out[k] = v
	}
	return out
}
