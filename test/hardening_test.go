package test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/node"
)

// Tests of the HTTP API's hardening (probe findings 5, 7 and 8).

func httpDo(t *testing.T, method, url, ctype, token string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// aliasBomb is a small rules file whose parse error names every one of
// thousands of aliased entries: 25 KB in, 364 KB of error text.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("x: &a [" + strings.Repeat(`"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",`, 200) + `"z"]` + "\nrules: [")
	for range 5000 {
		b.WriteString("*a,")
	}
	b.WriteString("*a]\n")
	return b.String()
}

// Writes check the admin token before they read the body: a request
// without the token is refused 401 whatever its body (an unparsable file,
// one over the size limit), and the rules stay as they were.
func TestHTTPTokenBeforeBody(t *testing.T) {
	const token = "t0ken"
	c := testcluster.NewWith(t, 1, testcluster.Options{Config: func(cfg *node.Config) { cfg.AdminToken = token }})
	n := c.Nodes[0]
	base := "http://" + n.HTTPAddr()
	before := n.Store().Current().Version
	for name, body := range map[string]string{
		"alias bomb":   aliasBomb(),
		"over 1 MiB":   strings.Repeat("#", 2<<20),
		"invalid yaml": "rules: [",
	} {
		code, b := httpDo(t, http.MethodPost, base+"/v1/rules:apply", "application/yaml", "", strings.NewReader(body))
		if code != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d %.200s, want 401", name, code, b)
		}
	}
	code, b := httpDo(t, http.MethodPut, base+"/v1/rules/x", "application/json", "", strings.NewReader(`{"match":`))
	if code != http.StatusUnauthorized {
		t.Errorf("PUT rule with a malformed body, no token: %d %s, want 401", code, b)
	}
	code, b = httpDo(t, http.MethodPut, base+"/v1/overrides", "application/json", "", strings.NewReader(`{`))
	if code != http.StatusUnauthorized {
		t.Errorf("PUT override with a malformed body, no token: %d %s, want 401", code, b)
	}
	if v := n.Store().Current().Version; v != before {
		t.Errorf("rules version %d, was %d", v, before)
	}
}

// An error answer is bounded in size, however large the parser's message.
func TestHTTPErrorBodyBounded(t *testing.T) {
	c := testcluster.New(t, 1) // no token, as under weir dev
	n := c.Nodes[0]
	code, b := httpDo(t, http.MethodPost, "http://"+n.HTTPAddr()+"/v1/rules:apply", "application/yaml", "", strings.NewReader(aliasBomb()))
	if code != http.StatusBadRequest || len(b) > 4<<10 {
		t.Fatalf("alias bomb: %d with %d bytes of body, want 400 with at most 4 KiB", code, len(b))
	}
	if !strings.Contains(string(b), "(cut)") {
		t.Errorf("error body does not say it was cut: %.300s", b)
	}
}

// State-changing endpoints take JSON (and YAML for a rules file) only: a
// body a browser may send across sites without a preflight (text/plain, a
// form, no type) is refused 415 and changes nothing.
func TestHTTPContentTypeRequired(t *testing.T) {
	c := testcluster.New(t, 1) // no token: the case a cross-site page could exploit
	n := c.Nodes[0]
	base := "http://" + n.HTTPAddr()
	before := n.Store().Current().Version
	file := "rules:\n  - {id: csrf, match: {route: /csrf}, key: ip, rate: 1, period: 1s}\n"
	rule := `{"match":{"route":"/csrf"},"key":"ip","rate":1,"period":"1s"}`
	for _, tc := range []struct{ method, path, ctype, body string }{
		{http.MethodPost, "/v1/rules:apply", "text/plain", file},
		{http.MethodPost, "/v1/rules:apply", "application/x-www-form-urlencoded", file},
		{http.MethodPost, "/v1/rules:apply", "multipart/form-data; boundary=x", file},
		{http.MethodPost, "/v1/rules:apply", "", file},
		{http.MethodPut, "/v1/rules/csrf", "text/plain", rule},
		{http.MethodPut, "/v1/rules/csrf", "application/yaml", rule},
		{http.MethodPut, "/v1/overrides", "text/plain", `{"key":"ip:1","rule":"csrf","rate":0}`},
		{http.MethodPost, "/v1/rules:rollback", "text/plain", `{"version":1}`},
		{http.MethodPost, "/v1/limits/check", "text/plain", `{"key":"ip:1","rule":"csrf"}`},
	} {
		code, b := httpDo(t, tc.method, base+tc.path, tc.ctype, "", strings.NewReader(tc.body))
		if code != http.StatusUnsupportedMediaType || !strings.Contains(string(b), "unsupported_media_type") {
			t.Errorf("%s %s as %q: %d %s, want 415", tc.method, tc.path, tc.ctype, code, b)
		}
	}
	if v := n.Store().Current().Version; v != before {
		t.Fatalf("rules version %d, was %d", v, before)
	}
	for _, ctype := range []string{"application/yaml", "text/yaml; charset=utf-8"} {
		if code, b := httpDo(t, http.MethodPost, base+"/v1/rules:apply", ctype, "", strings.NewReader(file)); code != http.StatusOK {
			t.Errorf("apply as %s: %d %s", ctype, code, b)
		}
	}
	if code, b := httpDo(t, http.MethodPut, base+"/v1/rules/csrf", "application/json; charset=utf-8", "", strings.NewReader(rule)); code != http.StatusOK {
		t.Errorf("PUT rule as JSON: %d %s", code, b)
	}
}

// A client that sends its headers and never its body is dropped after the
// read timeout (probe finding 7: such connections were held forever).
func TestHTTPBodyThatNeverArrivesIsDropped(t *testing.T) {
	c := testcluster.NewWith(t, 1, testcluster.Options{Config: func(cfg *node.Config) { cfg.HTTPReadTimeout = time.Second }})
	n := c.Nodes[0]
	conn, err := net.Dial("tcp", n.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/limits/check HTTP/1.1\r\nHost: weir\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(conn)
	var readErr error
	for readErr == nil {
		_, readErr = rd.ReadString('\n') // an error answer, then the close
	}
	if ne := (net.Error)(nil); errors.As(readErr, &ne) && ne.Timeout() || errors.Is(readErr, os.ErrDeadlineExceeded) {
		t.Fatalf("connection still open after %s: the body that never came is waited for", time.Since(start).Round(time.Millisecond))
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("dropped after %s, want about the 1 s read timeout", d)
	}
}
