package api

import (
	"errors"
	"mime"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/weirlimit/weir/limit"
)

// ErrUnsupportedMediaType is a request body of a type the endpoint does
// not take (HTTP 415). State-changing endpoints take only JSON (and YAML
// where a rules file is uploaded): a browser cannot send those across
// sites without a CORS preflight, which Weir never answers, so a page on
// another site cannot write rules to a node without a token.
var ErrUnsupportedMediaType = errors.New("api: unsupported media type")

// CodeUnsupportedMediaType is the error code of a 415 answer.
const CodeUnsupportedMediaType = "unsupported_media_type"

// Body types of the state-changing endpoints.
var (
	jsonTypes = []string{"application/json"}
	fileTypes = []string{"application/json", "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"}
)

// accepts wraps h so that a request whose Content-Type is not one of types
// is refused before anything else is done.
func accepts(h handlerFunc, types ...string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := RequireType(r, types...); err != nil {
			return err
		}
		return h(w, r)
	}
}

// RequireType refuses (ErrUnsupportedMediaType) a request whose
// Content-Type is not one of types: a browser's cross-site form or
// text/plain POST cannot set application/json.
func RequireType(r *http.Request, types ...string) error {
	ct := r.Header.Get("Content-Type")
	if slices.Contains(types, ct) { // the usual exact type, without parsing it
		return nil
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil && slices.Contains(types, mt) {
		return nil
	}
	if ct == "" {
		ct = "none"
	}
	return limit.Errorf(ErrUnsupportedMediaType, "Content-Type %s: %s takes %s", truncate(ct, 100), r.URL.Path, strings.Join(types, ", "))
}

// maxErrorText bounds the error sentence of an answer: a malformed body
// can make a parser's message as large as the body or larger.
const maxErrorText = 2 << 10

// truncate cuts s to at most n bytes on a UTF-8 boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "… (cut)"
}
