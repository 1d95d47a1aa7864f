package replication

import (
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/weirlimit/weir/internal/scenario"
)

var update = flag.Bool("update", false, "rewrite the golden output of the scenario files (testdata/partitions, testdata/route)")

// TestPartitionScenarios runs the scenario files in testdata/partitions:
// each block is one command to the pure machine, then "----", then the
// effects and the states that follow (Partitions.String). With -update the
// files are rewritten with what the machine does now; review the diff.
//
// Commands (one per block; ids are single words, lists comma-separated):
//
//	new self=a partitions=4 grace=30 [settle=3]
//	ring now=T place=a:b,b:a,... [members=a,b] [live=a,b] [departed=c] [base=a:b,...]
//	arrived now=T parts=1,2 [copies=1]
//	ask [now=T] to=b parts=1,2
//	handback now=T to=b parts=1
//	tick now=T
//
// place lists each partition's owner then its other replicas, colon
// separated ("-" for nobody); members defaults to everyone placed, live to
// members (addresses are the ids).
func TestPartitionScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/partitions/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScenario(t, f) })
	}
}

func runScenario(t *testing.T, file string) {
	var m *Partitions
	scenario.Run(t, file, *update, func(t *testing.T, line string) string {
		var got string
		m, got = scenarioStep(t, m, line)
		return got
	})
}

func scenarioStep(t *testing.T, m *Partitions, line string) (*Partitions, string) {
	t.Helper()
	fields := strings.Fields(line)
	if len(fields) == 0 {
		t.Fatalf("empty command")
	}
	args := map[string]string{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("%q: want key=value", f)
		}
		args[k] = v
	}
	num := func(k string) int64 {
		n, err := strconv.ParseInt(args[k], 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", k, args[k], err)
		}
		return n
	}
	list := func(k string) []string {
		if args[k] == "" {
			return nil
		}
		return strings.Split(args[k], ",")
	}
	parts := func(k string) []uint32 {
		var out []uint32
		for _, s := range list(k) {
			n, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			out = append(out, uint32(n))
		}
		return out
	}
	var effects []Effect
	switch fields[0] {
	case "new":
		settle := int64(3)
		if _, ok := args["settle"]; ok {
			settle = num("settle")
		}
		return NewPartitions(args["self"], int(num("partitions")), num("grace"), settle), ""
	case "ring":
		place := parsePlace(t, args["place"])
		ev := RingChanged{Now: num("now"), Place: place, Members: list("members"), Departed: list("departed")}
		if ev.Members == nil {
			for id := range membersOf(place) {
				ev.Members = append(ev.Members, id)
			}
		}
		live := ev.Members
		if _, ok := args["live"]; ok {
			live = list("live")
		}
		ev.Live = map[string]string{}
		for _, id := range live {
			ev.Live[id] = id
		}
		if b, ok := args["base"]; ok {
			ev.Base = parsePlace(t, b)
		}
		effects = m.Step(ev)
	case "arrived":
		effects = m.Step(Arrived{Now: num("now"), Parts: parts("parts"), Copies: parts("copies")})
	case "ask":
		var now int64
		if _, ok := args["now"]; ok {
			now = num("now")
		}
		effects = m.Step(Ask{Now: now, To: args["to"], Parts: parts("parts")})
	case "handback":
		effects = m.Step(HandBack{Now: num("now"), To: args["to"], Parts: parts("parts")})
	case "tick":
		effects = m.Step(Tick{Now: num("now")})
	case "unreached":
		effects = m.Step(Unreached{Now: num("now"), Peer: args["peer"], Parts: parts("parts")})
	default:
		t.Fatalf("unknown command %q", fields[0])
	}
	var b strings.Builder
	for _, e := range effects {
		b.WriteString(formatEffect(e) + "\n")
	}
	b.WriteString(m.String())
	return m, strings.TrimSpace(b.String())
}

func parsePlace(t *testing.T, s string) []Assignment {
	var out []Assignment
	for _, p := range strings.Split(s, ",") {
		ids := strings.Split(p, ":")
		if ids[0] == "-" {
			out = append(out, Assignment{})
			continue
		}
		out = append(out, Assignment{Owner: ids[0], Replicas: ids})
	}
	return out
}

func formatEffect(e Effect) string {
	switch e := e.(type) {
	case Pull:
		var s []string
		for _, g := range e.Gain {
			s = append(s, fmt.Sprintf("p%d<-%v", g.Partition, g.From))
			if g.Gone != "" {
				s[len(s)-1] += " gone=" + g.Gone
			}
		}
		if e.Keep {
			s = append(s, "keep")
		}
		if e.Back {
			s = append(s, "back")
		}
		if len(e.Held) > 0 {
			s = append(s, fmt.Sprintf("held=%v", e.Held))
		}
		return "pull " + strings.Join(s, " ")
	case Resync:
		return fmt.Sprintf("resync %v", e.Parts)
	case Reply:
		var mv []string
		for _, m := range e.Moved {
			mv = append(mv, fmt.Sprintf("p%d->%s", m.Partition, m.To))
		}
		if len(e.Copies) > 0 {
			return fmt.Sprintf("reply held=%v copies=%v moved=%v", e.Held, e.Copies, mv)
		}
		return fmt.Sprintf("reply held=%v moved=%v", e.Held, mv)
	case DropCounters:
		return fmt.Sprintf("drop-counters %v", e.Parts)
	case DropReplicas:
		return fmt.Sprintf("drop-replicas %v", e.Parts)
	}
	return fmt.Sprintf("%T", e)
}
