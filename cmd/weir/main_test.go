package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
)

// result is what one in-process run printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the command line in-process with the given stdin and
// environment (nil: empty).
func runCLI(t *testing.T, stdin string, env map[string]string, args ...string) result {
	t.Helper()
	var out, errOut strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := runStdin(ctx, args, strings.NewReader(stdin), &out, &errOut, func(k string) string { return env[k] })
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// recorded is one request a fakeAPI saw.
type recorded struct {
	Method, URI, Auth, Author, ContentType, Body string
}

// fakeAPI is an HTTP server answering canned JSON per "METHOD /path" (the
// query is not part of the route), recording every request. It stands in
// for node/api's HTTP contract in tests of request shapes and output; the
// end-to-end tests in /test run the CLI against real nodes.
type fakeAPI struct {
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []recorded
	routes map[string]cannedAnswer
}

type cannedAnswer struct {
	status int
	body   string
	// byQuery, when set, picks the answer by the request's raw query.
	byQuery map[string]string
}

func newFakeAPI(t *testing.T, routes map[string]cannedAnswer) *fakeAPI {
	t.Helper()
	f := &fakeAPI{routes: routes}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{
			Method: r.Method, URI: r.URL.RequestURI(), Auth: r.Header.Get("Authorization"), Author: r.Header.Get(authorHeader),
			ContentType: r.Header.Get("Content-Type"), Body: string(body),
		})
		f.mu.Unlock()
		a, ok := f.routes[r.Method+" "+r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"no such endpoint","code":"not_found"}`)
			return
		}
		body2 := a.body
		if a.byQuery != nil {
			body2 = a.byQuery[r.URL.RawQuery]
		}
		w.Header().Set("Content-Type", "application/json")
		if a.status != 0 {
			w.WriteHeader(a.status)
		}
		io.WriteString(w, body2)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) addr() string { return f.srv.URL }

func (f *fakeAPI) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

func TestUsageErrorsExit2AndSendNothing(t *testing.T) {
	api := newFakeAPI(t, nil)
	env := map[string]string{envAddr: api.addr()}
	tests := []struct {
		args []string
		want string // in stderr
	}{
		{nil, "weir: no command given"},
		{[]string{"bogus"}, `weir: unknown command "bogus"`},
		{[]string{"help", "bogus"}, `no help for unknown command "bogus"`},
		{[]string{"rules"}, "weir rules: missing subcommand"},
		{[]string{"rules", "frob"}, `weir rules: unknown subcommand "frob"`},
		{[]string{"rules", "get"}, "weir: missing rule ID\nusage: weir rules get ID [flags]\nRun 'weir rules get -h' for details.\n"},
		{[]string{"rules", "get", "a", "b"}, `unexpected argument "b"`},
		{[]string{"rules", "delete"}, "missing rule ID"},
		{[]string{"rules", "diff", "1"}, "missing version V2"},
		{[]string{"rules", "diff"}, "missing version V1 and version V2"},
		{[]string{"rules", "rollback", "x"}, `"x" is not a version`},
		{[]string{"rules", "rollback", "0"}, `"0" is not a version`},
		{[]string{"rules", "apply"}, "missing -f FILE"},
		{[]string{"rules", "put", "x"}, "missing -f FILE"},
		{[]string{"rules", "history", "--limit", "-1"}, "--limit -1: must be > 0"},
		{[]string{"rules", "list", "--at", "v3"}, `invalid value "v3" for flag -at`},
		{[]string{"check", "--key", "k"}, "missing --rule"},
		{[]string{"check", "--rule", "r"}, "missing --key"},
		{[]string{"check", "--key", "k", "--rule", "r", "--cost", "-1"}, "--cost -1: must be >= 0"},
		{[]string{"check", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"members", "-o", "yaml"}, `-o "yaml": want table or json`},
		{[]string{"members", "--timeout", "soon"}, `invalid value "soon" for flag -timeout`},
		{[]string{"members", "--timeout", "0s"}, "--timeout 0s: must be > 0"},
		{[]string{"status", "--addr", "ftp://h:1"}, "scheme must be http or https"},
		{[]string{"members", "extra"}, `unexpected argument "extra"`},
		{[]string{"node", "--data-dir", t.TempDir(), "--replication-interval", "soon"}, `--replication-interval "soon": want a positive duration`},
		{[]string{"node", "--data-dir", t.TempDir(), "--replication-interval", "0s"}, `--replication-interval "0s": want a positive duration`},
		{[]string{"overrides"}, "weir overrides: missing subcommand"},
		{[]string{"overrides", "set", "--rate", "5"}, "missing --key and --rule"},
		{[]string{"overrides", "set", "--key", "k", "--rule", "r"}, "missing --rate N (or --block to deny the key)"},
		{[]string{"overrides", "set", "--key", "k", "--rule", "r", "--rate", "5", "--block"}, "--block takes no --rate or --burst"},
		{[]string{"overrides", "set", "--key", "k", "--rule", "r", "--rate", "0"}, "invalid override: rate: must be > 0"},
		{[]string{"overrides", "set", "--key", "k", "--rule", "r", "--block", "--ttl", "1h", "--expires", "2999-01-01T00:00:00Z"}, "give --ttl or --expires, not both"},
		{[]string{"overrides", "set", "--key", "k", "--rule", "r", "--block", "--expires", "2001-01-01T00:00:00Z"}, "is in the past"},
		{[]string{"overrides", "set", "--key", "k", "--rule", "r", "--block", "--expires", "tomorrow"}, "want an RFC 3339 time"},
		{[]string{"overrides", "set", "--key", "k", "--rule", "r", "--block", "--ttl", "-1h"}, "--ttl -1h0m0s: must be > 0"},
		{[]string{"overrides", "delete", "--key", "k"}, "missing --key or --rule"},
		{[]string{"version", "now"}, `unexpected argument "now"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			r := runCLI(t, "", env, tt.args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d; stderr:\n%s", r.code, exitUsage, r.stderr)
			}
			if !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr does not hold %q:\n%s", tt.want, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout should be empty, got:\n%s", r.stdout)
			}
			if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
				t.Errorf("stderr looks like a crash:\n%s", r.stderr)
			}
		})
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("usage errors sent %d requests to the node; want none: %+v", n, api.requests())
	}
}

func TestHelpExits0OnStdout(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"help"}, "usage: weir <command>"},
		{[]string{"-h"}, "usage: weir <command>"},
		{[]string{"--help"}, "Administer a cluster"},
		{[]string{"help", "rules"}, "usage: weir rules <subcommand>"},
		{[]string{"rules", "--help"}, "rollback V"},
		{[]string{"help", "rules", "apply"}, "usage: weir rules apply -f FILE"},
		{[]string{"rules", "get", "-h"}, "usage: weir rules get ID [flags]"},
		{[]string{"help", "overrides"}, "delete --key K --rule R"},
		{[]string{"overrides", "set", "-h"}, "-expires time"},
		{[]string{"help", "check"}, "exit code is 0"},
		{[]string{"help", "status"}, "usage: weir status [flags]"},
		{[]string{"members", "-h"}, "WEIR_ADDR"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			r := runCLI(t, "", nil, tt.args...)
			if r.code != exitOK {
				t.Errorf("exit %d, want 0; stderr:\n%s", r.code, r.stderr)
			}
			if !strings.Contains(r.stdout, tt.want) {
				t.Errorf("stdout does not hold %q:\n%s", tt.want, r.stdout)
			}
			if r.stderr != "" {
				t.Errorf("stderr should be empty, got:\n%s", r.stderr)
			}
		})
	}
}

// closedAddr returns a 127.0.0.1 address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestDownNodeIsAClearError(t *testing.T) {
	addr := closedAddr(t)
	want := "weir: cannot reach node at http://" + addr +
		": connection refused (is `weir node` running? set --addr or WEIR_ADDR)\n"
	cases := []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"flag", nil, []string{"members", "--addr", addr}},
		{"env", map[string]string{envAddr: addr}, []string{"rules", "list"}},
		{"url flag", nil, []string{"check", "--key", "k", "--rule", "r", "--addr", "http://" + addr + "/"}},
		{"flag after positional", nil, []string{"rules", "get", "orders.write", "--addr", addr}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, "", tc.env, tc.args...)
			if r.code != exitError {
				t.Errorf("exit %d, want %d", r.code, exitError)
			}
			if r.stderr != want {
				t.Errorf("stderr:\n%q\nwant:\n%q", r.stderr, want)
			}
			if r.stdout != "" {
				t.Errorf("stdout should be empty, got %q", r.stdout)
			}
		})
	}
}

func TestTimeoutIsAClearError(t *testing.T) {
	// A listener that accepts but never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { <-done; c.Close() }()
		}
	}()
	r := runCLI(t, "", nil, "members", "--addr", ln.Addr().String(), "--timeout", "50ms")
	if r.code != exitError {
		t.Errorf("exit %d, want %d", r.code, exitError)
	}
	want := "weir: node did not answer in time: http://" + ln.Addr().String() + " did not answer within 50ms"
	if !strings.HasPrefix(r.stderr, want) {
		t.Errorf("stderr:\n%q\nwant prefix:\n%q", r.stderr, want)
	}
}

func TestNormalizeAddr(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"127.0.0.1:8080", "http://127.0.0.1:8080", ""},
		{":9000", "http://127.0.0.1:9000", ""},
		{"node1:8080", "http://node1:8080", ""},
		{" http://node1:8080/ ", "http://node1:8080", ""},
		{"https://weir.example.com/base/", "https://weir.example.com/base", ""},
		{"[::1]:8080", "http://[::1]:8080", ""},
		{"", "", "empty address"},
		{"ftp://x:1", "", "scheme must be http or https"},
		{"http://", "", "has no host"},
		{"http://h:1/?x=1", "", "query or fragment"},
		{"http://h:1:2:3 x", "", "not a host:port or URL"},
	}
	for _, tt := range tests {
		got, err := normalizeAddr(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("normalizeAddr(%q) error %v, want one holding %q", tt.in, err, tt.err)
		case tt.err == "" && err != nil:
			t.Errorf("normalizeAddr(%q): %v", tt.in, err)
		case got != tt.want:
			t.Errorf("normalizeAddr(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestVersionString(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Version: "v0.3.1"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "24dde71bf0e1c909e50c6e20892739164856cc94"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	got := versionString(bi, true)
	if want := "weir v0.3.1 (rev 24dde71bf0e1, modified) go1.26.8 "; !strings.HasPrefix(got, want) {
		t.Errorf("versionString = %q, want prefix %q", got, want)
	}
	if got := versionString(nil, false); !strings.HasPrefix(got, "weir (devel) go") {
		t.Errorf("versionString without build info = %q", got)
	}
	r := runCLI(t, "", nil, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "weir ") {
		t.Errorf("weir version: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
