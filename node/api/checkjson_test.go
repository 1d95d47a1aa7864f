package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/limit"
)

type checkBody struct {
	checkItemJSON
	Items []checkItemJSON `json:"items"`
}

// checkFastAgrees fails t unless parseCheckFast either declines b or reads
// exactly what the strict reflective path reads from it.
func checkFastAgrees(t *testing.T, b []byte) (fast bool) {
	t.Helper()
	c, ok := parseCheckFast(b)
	var slow checkBody
	err := decodeJSONBytes(b, &slow)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("%q: the fast path read %+v, the strict path refuses it: %v", b, c, err)
	}
	if slow.Items != nil || !reflect.DeepEqual(slow.checkItemJSON, c) {
		t.Fatalf("%q: the fast path read %+v, the strict path %+v", b, c, slow)
	}
	return true
}

// TestCheckFastMatchesReflective: the bodies a gateway sends take the fast
// path and read as the strict path reads them; every other body is left to
// the strict path (which accepts or refuses it as before).
func TestCheckFastMatchesReflective(t *testing.T) {
	fast := []string{
		`{"key":"apikey:ak_1","rule":"r","cost":1}`,
		` { "key" : "apikey:ak_1" , "rule" : "r" } ` + "\n",
		`{"rule":"r","key":"k","cost":-3,"min_rule_version":42}`,
		`{"key":"ключ","rule":"r","cost":0}`,
		`{}`,
		`{"cost":9223372036854775807}`,
		`{"key":"","rule":""}`,
	}
	for _, b := range fast {
		if !checkFastAgrees(t, []byte(b)) {
			t.Errorf("%q: took the strict path; want the fast path", b)
		}
	}
	strict := []string{
		``, `{`, `[]`, `null`, `{"key":"a"}{}`, `{"key":"a",}`, `{"key":"a" "rule":"b"}`,
		`{"Key":"a"}`, `{"KEY":"a"}`, `{"key":"a","key":"b"}`, `{"cost":1,"cost":2}`,
		`{"key":"a\"b"}`, `{"key":"\u00e9"}`, `{"key":"a` + "\x01" + `"}`, "{\"key\":\"\xff\"}",
		`{"cost":1.0}`, `{"cost":1e3}`, `{"cost":01}`, `{"cost":-}`, `{"cost":null}`, `{"cost":"1"}`,
		`{"cost":9223372036854775808}`, `{"min_rule_version":-1}`, `{"items":[{"key":"a","rule":"r"}]}`,
		`{"key":"a","extra":1}`, `{"key":1}`,
	}
	for _, b := range strict {
		if checkFastAgrees(t, []byte(b)) {
			t.Errorf("%q: took the fast path; want the strict path", b)
		}
	}
}

func FuzzCheckFast(f *testing.F) {
	for _, s := range []string{`{"key":"apikey:ak_1","rule":"r","cost":1}`, `{"key":"a","key":"b"}`, `{"cost":-0}`, `{"min_rule_version":18446744073709551615}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkFastAgrees(t, b) })
}

// TestAppendResultJSON: the hand-written answer is byte for byte what
// encoding/json writes for it; results with an error text are left to it.
func TestAppendResultJSON(t *testing.T) {
	for _, r := range []limit.Result{
		{Allowed: true, Remaining: 9, Limit: 10, Reset: 100 * time.Millisecond},
		{Allowed: false, Remaining: 0, Limit: 10, Reset: 1500 * time.Millisecond, RetryAfter: 99 * time.Millisecond},
		{Allowed: true, Remaining: -1, Limit: 1 << 40, Window: time.Hour, Shadow: true},
		{Allowed: true, Remaining: 3, Limit: 5, Shadow: true, RuleVersion: 42},
		{Allowed: false, Limit: 5, RetryAfter: time.Second, RuleVersion: 1 << 40},
	} {
		got, ok := appendResultJSON(nil, &r)
		want, _ := json.Marshal(resultJSON(&r))
		if !ok || string(got) != string(want)+"\n" {
			t.Errorf("%+v: %q (%v), want %q", r, got, ok, want)
		}
	}
	for _, r := range []limit.Result{{Err: "x <y>"}, {Code: limit.CodeUnknownRule}} {
		if got, ok := appendResultJSON(nil, &r); ok {
			t.Errorf("%+v: wrote %q; want it left to encoding/json", r, got)
		}
	}
	if !strings.HasPrefix(string(contentTypeJSON[0]), "application/json") {
		t.Fatal(contentTypeJSON)
	}
}
