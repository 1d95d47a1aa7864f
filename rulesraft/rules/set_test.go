package rules

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSetLookups(t *testing.T) {
	s := NewSet(7,
		[]Rule{rule("c", "/c", "GET", "", KeyIP), rule("a", "/a", "GET", "", KeyIP), rule("b", "/b", "GET", "", KeyIP)},
		[]Override{{Rule: "b", Key: "k2", Rate: 2}, {Rule: "a", Key: "k9", Rate: 9}, {Rule: "b", Key: "k1", Rate: 1}})
	if s.Version != 7 {
		t.Fatalf("Version = %d", s.Version)
	}
	var ids []string
	for _, r := range s.Rules {
		ids = append(ids, r.ID)
	}
	if !reflect.DeepEqual(ids, []string{"a", "b", "c"}) {
		t.Fatalf("rules not sorted: %q", ids)
	}
	var ovs []string
	for _, o := range s.Overrides {
		ovs = append(ovs, o.Rule+"/"+o.Key)
	}
	if !reflect.DeepEqual(ovs, []string{"a/k9", "b/k1", "b/k2"}) {
		t.Fatalf("overrides not sorted: %q", ovs)
	}
	for _, id := range []string{"a", "b", "c"} {
		if r, ok := s.Rule(id); !ok || r.ID != id {
			t.Errorf("Rule(%q) = %v, %v", id, r.ID, ok)
		}
	}
	if _, ok := s.Rule("bb"); ok {
		t.Error("Rule(bb) found")
	}
	if o, ok := s.Override("b", "k2"); !ok || o.Rate != 2 {
		t.Errorf("Override(b, k2) = %+v, %v", o, ok)
	}
	if _, ok := s.Override("a", "k1"); ok {
		t.Error("Override(a, k1) found")
	}
}

func TestDiffSets(t *testing.T) {
	keep := rule("keep", "/k", "GET", "", KeyIP)
	keepExplicit := Normalize(keep) // defaults written out: no change
	gone := rule("gone", "/g", "GET", "", KeyIP)
	added := rule("added", "/n", "GET", "", KeyIP)
	changed := rule("changed", "/c", "GET", "", KeyIP)
	changed2 := changed
	changed2.Rate, changed2.Period, changed2.FailMode, changed2.Match.Plan = 20, Duration(time.Minute), FailClosed, "pro"

	got := DiffSets([]Rule{keep, gone, changed}, []Rule{changed2, added, keepExplicit})
	want := []string{
		"+ added",
		"~ changed: match.plan * -> pro",
		"~ changed: rate 10 -> 20",
		"~ changed: period 1s -> 1m",
		"~ changed: burst 10 -> 20", // burst absent: follows the rate
		"~ changed: fail_mode open -> closed",
		"- gone",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DiffSets =\n%q\nwant\n%q", got, want)
	}
	if d := DiffSets([]Rule{keep}, []Rule{keepExplicit}); d != nil {
		t.Fatalf("no-op diff = %q", d)
	}
}

func TestDiffOverrides(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	old := []Override{
		{Rule: "b", Key: "same", Rate: 5},
		{Rule: "b", Key: "gone", Block: true},
		{Rule: "a", Key: "changed", Rate: 10, Burst: 15},
		{Rule: "a", Key: "blocked", Rate: 10},
		{Rule: "a", Key: "expiry", Block: true, ExpiresAt: at},
	}
	nw := []Override{
		{Rule: "b", Key: "same", Rate: 5, Burst: 5},                                            // burst 0 meant the rate: no change
		{Rule: "a", Key: "expiry", Block: true, ExpiresAt: at.In(time.FixedZone("CET", 3600))}, // same instant
		{Rule: "a", Key: "blocked", Block: true},
		{Rule: "a", Key: "changed", Rate: 20, ExpiresAt: at},
		{Rule: "a", Key: "added", Rate: 1},
	}
	got := DiffOverrides(old, nw)
	want := []string{
		"+ override added for rule a",
		"~ override blocked for rule a: rate 10 -> 0",
		"~ override blocked for rule a: burst 10 -> 0",
		"~ override blocked for rule a: block false -> true",
		"~ override changed for rule a: rate 10 -> 20",
		"~ override changed for rule a: burst 15 -> 20",
		"~ override changed for rule a: expires_at never -> 2026-12-01T00:00:00Z",
		"- override gone for rule b",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DiffOverrides =\n%q\nwant\n%q", got, want)
	}
	if d := DiffOverrides(old, old); d != nil {
		t.Fatalf("no-op diff = %q", d)
	}
	if d := DiffOverrides(nil, nil); d != nil {
		t.Fatalf("empty diff = %q", d)
	}
}

func TestMerge(t *testing.T) {
	cur := []Rule{Normalize(rule("a", "/a", "GET", "", KeyIP)), Normalize(rule("c", "/c", "GET", "", KeyIP))}
	ids := func(rs []Rule) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}

	// Upsert: c replaced, b added, a kept; sorted, the new ones normalized.
	c2 := rule("c", "/c", "GET", "", KeyIP)
	c2.Rate = 99
	got, err := Merge(cur, []Rule{c2, rule("b", "/b", "", "", KeyIP)}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids(got), []string{"a", "b", "c"}) || got[2].Rate != 99 || !got[1].Equal(Normalize(rule("b", "/b", "", "", KeyIP))) {
		t.Fatalf("upsert: %+v", got)
	}
	if cur[1].Rate != 10 {
		t.Fatal("Merge changed cur")
	}
	// Replace all: exactly in; an empty list deletes every rule.
	if got, err := Merge(cur, []Rule{rule("b", "/b", "", "", KeyIP)}, true); err != nil || !reflect.DeepEqual(ids(got), []string{"b"}) {
		t.Fatalf("replace all: %v %v", ids(got), err)
	}
	if got, err := Merge(cur, nil, true); err != nil || len(got) != 0 {
		t.Fatalf("replace all with none: %v %v", got, err)
	}

	// Refusals name the caller's indexes.
	bad := rule("x", "nope", "", "", KeyIP)
	for _, c := range []struct {
		in      []Rule
		mention string
	}{
		{nil, "none given"},
		{[]Rule{rule("b", "/b", "", "", KeyIP), bad}, "rules[1].match.route"},
		{[]Rule{rule("b", "/b", "", "", KeyIP), rule("b", "/b2", "", "", KeyIP)}, "rules[1].id"},
	} {
		_, err := Merge(cur, c.in, false)
		var ve *ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%v: %v, want a validation error mentioning %q", ids(c.in), err, c.mention)
		}
	}
}
