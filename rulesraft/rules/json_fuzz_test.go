package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// decodeStrict decodes one JSON value as the HTTP API does (unknown
// fields refused, nothing after the value).
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the value")
	}
	return nil
}

// FuzzRuleJSON reads outside bytes as the JSON body of PUT /v1/rules/{id}
// (one rule) and of PUT /v1/overrides (one override). What decodes and
// validates must stay valid once normalized, survive a JSON round trip
// unchanged, and for a rule read back the same from the rules file
// MarshalFile writes; a rule Validate refuses is refused by MarshalFile
// too, with a *ValidationError.
func FuzzRuleJSON(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","match":{"route":"/v1/orders","method":"POST"},"key":"apikey","rate":10,"period":"1s","burst":20}`,
		`{"id":"d","match":{"domain":"envoy","descriptor":[{"key":"ip"}]},"key":"global","rate":1,"period":"1h","lease":"off","unlimited":false}`,
		`{"id":"s","match":{"route":"/v1/*"},"key":"header:X-Tenant","algorithm":"sliding_log","rate":100,"period":"1m","lease":4,"shadow":true,"fail_mode":"closed","timeout":"5ms","events":{"sample":0.5}}`,
		`{"id":"c","match":{"route":"/v1/{id}"},"key":"user","rate":5,"period":"24h","cost_header":"X-Cost","scope":"region","replaces":["a"],"max_keys":10}`,
		`{"key":"apikey:ak_1","rule":"a","rate":100,"burst":5,"expires_at":"2030-01-01T00:00:00Z"}`,
		`{"key":"apikey:ak_1","rule":"a","block":true}`,
		`{"id":"a","period":1}`,
	} {
		f.Add([]byte(s))
	}
	if data, err := os.ReadFile("../../examples/rules.yaml"); err == nil {
		if rs, err := ParseFile(data); err == nil {
			for _, r := range rs {
				if b, err := json.Marshal(r); err == nil {
					f.Add(b)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Rule
		if decodeStrict(b, &r) == nil {
			checkRuleJSON(t, r)
		}
		var o Override
		if decodeStrict(b, &o) == nil && o.Validate() == nil {
			j, err := json.Marshal(o)
			if err != nil {
				t.Fatalf("marshal override %+v: %v", o, err)
			}
			var back Override
			if err := decodeStrict(j, &back); err != nil || back.Key != o.Key || back.Rule != o.Rule || back.Rate != o.Rate ||
				back.Burst != o.Burst || back.Block != o.Block || !back.ExpiresAt.Equal(o.ExpiresAt) {
				t.Fatalf("override round trip: %s -> %+v (%v), want %+v", j, back, err, o)
			}
		}
	})
}

func checkRuleJSON(t *testing.T, r Rule) {
	t.Helper()
	if err := Validate([]Rule{r}); err != nil {
		var ve *ValidationError
		if !errors.As(err, &ve) || len(ve.Problems) == 0 || !errors.Is(err, ErrInvalid) {
			t.Fatalf("Validate(%+v) = %v (%T), not a non-empty *ValidationError", r, err, err)
		}
		if out, err := MarshalFile([]Rule{r}); err == nil {
			t.Fatalf("MarshalFile wrote an invalid rule %+v:\n%s", r, out)
		}
		return
	}
	n := Normalize(r)
	if err := Validate([]Rule{n}); err != nil {
		t.Fatalf("valid rule %+v is invalid once normalized: %v", r, err)
	}
	if !Normalize(n).Equal(n) {
		t.Fatalf("Normalize is not idempotent on %+v", n)
	}
	j, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("marshal %+v: %v", r, err)
	}
	var back Rule
	if err := decodeStrict(j, &back); err != nil || !back.Equal(r) {
		t.Fatalf("JSON round trip: %s -> %+v (%v), want %+v", j, back, err, r)
	}
	file, err := MarshalFile([]Rule{r})
	if err != nil {
		t.Fatalf("MarshalFile(%+v): %v", r, err)
	}
	rs, err := ParseFile(file)
	if err != nil || len(rs) != 1 || !rs[0].Equal(n) {
		t.Fatalf("file round trip of %+v: %+v, %v\n%s", r, rs, err, file)
	}
}
