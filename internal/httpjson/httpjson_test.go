package httpjson

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int
		v    any
		want string
		// wantCode is the status answered.
		wantCode int
	}{
		{"value", http.StatusOK, map[string]int{"a": 1}, "{\"a\":1}\n", http.StatusOK},
		{"error", http.StatusNotFound, ErrorBody{Error: "no rule x", Code: "not_found"}, "{\"error\":\"no rule x\",\"code\":\"not_found\"}\n", http.StatusNotFound},
		{"unencodable", http.StatusOK, math.NaN(), "{\"error\":\"encoding the response: json: unsupported value: NaN\",\"code\":\"internal\"}\n", http.StatusInternalServerError},
	} {
		rec := httptest.NewRecorder()
		Write(rec, tc.code, tc.v)
		if rec.Code != tc.wantCode || rec.Body.String() != tc.want || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q %q, want %d %q application/json", tc.name, rec.Code, rec.Body.String(), rec.Header().Get("Content-Type"), tc.wantCode, tc.want)
		}
	}
	rec := httptest.NewRecorder()
	WriteError(rec, http.StatusBadRequest, "invalid_argument", "bad")
	if rec.Code != http.StatusBadRequest || rec.Body.String() != "{\"error\":\"bad\",\"code\":\"invalid_argument\"}\n" {
		t.Errorf("WriteError: %d %q", rec.Code, rec.Body.String())
	}
}
