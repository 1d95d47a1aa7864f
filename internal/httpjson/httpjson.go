// Package httpjson writes the JSON answers of the node's HTTP edges: one
// writer and one error body for all of them (node/api, node/opsapi,
// node/keyringapi, node/forwardauth).
package httpjson

import (
	"encoding/json"
	"net/http"
)

// ErrorBody is the body of an error answer: the sentence and its code
// ("invalid_argument", "not_found", ...).
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Write answers v as JSON with status code and a final newline. A value
// that does not encode is a 500 with an ErrorBody saying so.
func Write(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorBody{Error: "encoding the response: " + err.Error(), Code: "internal"})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// WriteError answers an ErrorBody with status code.
func WriteError(w http.ResponseWriter, code int, name, msg string) {
	Write(w, code, ErrorBody{Error: msg, Code: name})
}
