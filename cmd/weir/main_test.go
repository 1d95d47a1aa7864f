package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
	code := run(ctx, args, strings.NewReader(stdin), &out, &errOut, func(k string) string { return env[k] })
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
		{nil, "weir: missing command"},
		{[]string{"bogus"}, `weir: unknown command "bogus"`},
		{[]string{"help", "bogus"}, `no help for unknown command "bogus"`},
		{[]string{"rules"}, "weir rules: missing subcommand"},
		{[]string{"rules", "frob"}, `weir rules: unknown subcommand "frob"`},
		{[]string{"rules", "get"}, "weir: missing rule ID\nusage: weir rules get ID [flags]\nRun 'weir rules get --help' for details.\n"},
		{[]string{"rules", "get", "a", "b"}, `unexpected argument "b"`},
		{[]string{"rules", "delete"}, "missing rule ID"},
		{[]string{"rules", "diff", "1"}, "missing version V2"},
		{[]string{"rules", "diff"}, "missing version V1 and version V2"},
		{[]string{"rules", "rollback", "x"}, `"x" is not a version`},
		{[]string{"rules", "rollback", "0"}, `"0" is not a version`},
		{[]string{"rules", "apply"}, "missing -f FILE"},
		{[]string{"rules", "put", "x"}, "missing -f FILE"},
		{[]string{"rules", "history", "--limit", "-1"}, "--limit -1: must be > 0"},
		{[]string{"rules", "list", "--at", "v3"}, `invalid argument "v3" for "--at" flag`},
		{[]string{"check", "--key", "k"}, "missing --rule"},
		{[]string{"check", "--rule", "r"}, "missing --key"},
		{[]string{"check", "--key", "k", "--rule", "r", "--cost", "-1"}, "--cost -1: must be >= 0"},
		{[]string{"check", "--bogus"}, "weir: unknown flag: --bogus\nusage: weir check --key K --rule R [--cost N] [flags]\n"},
		{[]string{"members", "-o", "yaml"}, `-o "yaml": want table or json`},
		{[]string{"members", "--timeout", "soon"}, `invalid argument "soon" for "--timeout" flag`},
		{[]string{"members", "--timeout", "0s"}, "--timeout 0s: must be > 0"},
		{[]string{"status", "--addr", "ftp://h:1"}, "scheme must be http or https"},
		{[]string{"members", "extra"}, `unexpected argument "extra"`},
		{[]string{"node", "--data-dir", t.TempDir(), "--replication-interval", "soon"}, `invalid argument "soon" for "--replication-interval" flag`},
		{[]string{"node", "--data-dir", t.TempDir(), "--replication-interval", "0s"}, "--replication-interval 0s: must be > 0"},
		{[]string{"node", "--data-dir", t.TempDir(), "--region", "eu"}, "--region and --peer-regions go together"},
		{[]string{"node", "--data-dir", t.TempDir(), "--ring-layout", "round"}, `--partitions, --vnodes, --ring-layout: ring layout "round": want balanced or consistent`},
		{[]string{"node", "--data-dir", t.TempDir(), "--partitions", "0"}, "--partitions, --vnodes, --ring-layout: partitions 0: want 1 to 1048576"},
		{[]string{"node", "--data-dir", t.TempDir(), "--vnodes", "5000"}, "--partitions, --vnodes, --ring-layout: vnodes 5000: want 1 to 4096"},
		{[]string{"node", "--data-dir", t.TempDir(), "--region", "eu", "--peer-regions", "us"}, `--peer-regions "us": invalid regions setup: peer region "us": want name=host:port`},
		{[]string{"node", "--data-dir", t.TempDir(), "--region", "eu", "--peer-regions", "eu=h:1"}, `region "eu" lists itself as a peer`},
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
		{[]string{"memebrs"}, `weir: unknown command "memebrs" (did you mean members?)`},
		{[]string{"rules", "lsit"}, `weir rules: unknown subcommand "lsit" (did you mean list?)`},
		{[]string{"rules", "aply", "-f", "x"}, `weir rules: unknown subcommand "aply" (did you mean apply?)`},
		{[]string{"aply", "-f", "x"}, `weir: unknown command "aply"`},
		{[]string{"rules", "-f", "x"}, "unknown shorthand flag: 'f'"},
		{[]string{"rules", "apply", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"completion", "bash", "extra"}, `unknown command "extra"`},
		{[]string{"check", "--key", "k", "--rule", "r", "--cost", "many"}, `invalid argument "many" for "--cost" flag`},
		{[]string{"node", "--data-dir", t.TempDir(), "--log-level", "loud"}, `invalid argument "loud" for "--log-level" flag`},
		{[]string{"node", "--data-dir", t.TempDir(), "--bootstrap-expect", "three"}, `invalid argument "three" for "--bootstrap-expect" flag`},
		{[]string{"-help"}, "unknown shorthand flag"},
		{[]string{"bench", "--spawn", "1", "--lease", "some"}, `--lease "some": want auto, off or a count ≥ 1`},
		{[]string{"bench", "--spawn", "1", "--scenario", "hot", "--lease", "500"}, "lease 500 must be in [0, burst 100]"},
		{[]string{"bench", "--spawn", "1", "--node-procs", "-2"}, "--node-procs -2: a count ≥ 1, 0 (cores ÷ nodes) or -1 (Go's default)"},
		{[]string{"gateway", "--upstream", "http://127.0.0.1:1", "--cluster", "127.0.0.1:1", "--until-rules", "open"},
			`weir: --until-rules "open": want wait, deny or allow`},
		{[]string{"gateway", "--upstream", "http://127.0.0.1:1", "--cluster", "127.0.0.1:1", "--until-rules-timeout", "0s"},
			"weir: --until-rules-timeout 0s: must be > 0"},
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
		{[]string{"help"}, "Usage:\n  weir [command]\n"},
		{[]string{"-h"}, "Usage:\n  weir [command]\n"},
		{[]string{"--help"}, "Administer a cluster"},
		{[]string{"help", "rules"}, "Usage:\n  weir rules [command]\n\nAvailable Commands:\n  apply "},
		{[]string{"rules", "--help"}, "rollback "},
		{[]string{"rules", "help"}, "rollback "},
		{[]string{"help", "rules", "apply"}, "weir rules apply -f FILE"},
		{[]string{"rules", "get", "-h"}, "  weir rules get ID [flags]\n"},
		{[]string{"help", "overrides"}, "Remove the override"},
		{[]string{"override", "set", "--help"}, "--expires time"},
		{[]string{"help", "check"}, "exit code is 0"},
		{[]string{"help", "status"}, "  weir members [flags]\n"},
		{[]string{"members", "-h"}, "WEIR_ADDR"},
		{[]string{"node", "--help"}, "--replication-interval duration"},
		{[]string{"--version"}, "weir "},
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

// TestEveryCommandHelpShowsDoubleDashFlags asks every command and
// subcommand for --help: it exits 0 and lists each of its flags as --name,
// none in the single-dash form of the standard flag package.
func TestEveryCommandHelpShowsDoubleDashFlags(t *testing.T) {
	singleDash := regexp.MustCompile(`(?m)^\s+-[a-z][a-z-]+\b`)
	var walk func(cmd *cobra.Command)
	n := 0
	walk = func(cmd *cobra.Command) {
		args := append(strings.Fields(cmd.CommandPath())[1:], "--help")
		r := runCLI(t, "", nil, args...)
		if r.code != exitOK || !strings.Contains(r.stdout, "Usage:\n  "+cmd.CommandPath()) {
			t.Errorf("weir %s: exit %d, stdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if !strings.Contains(r.stdout, "--"+f.Name+" ") {
				t.Errorf("weir %s does not show --%s:\n%s", strings.Join(args, " "), f.Name, r.stdout)
			}
		})
		if m := singleDash.FindString(r.stdout); m != "" {
			t.Errorf("weir %s shows a single-dash flag %q:\n%s", strings.Join(args, " "), m, r.stdout)
		}
		n++
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk((&cli{getenv: func(string) string { return "" }}).newRoot())
	if n < 20 {
		t.Errorf("walked %d commands, want every one (20 or more)", n)
	}
}

func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "__start_weir",
		"zsh":  "#compdef weir",
		"fish": "complete -c weir",
	} {
		r := runCLI(t, "", nil, "completion", shell)
		if r.code != exitOK || !strings.Contains(r.stdout, want) || r.stderr != "" {
			t.Errorf("weir completion %s: exit %d, stderr %q, stdout (%d bytes) without %q", shell, r.code, r.stderr, len(r.stdout), want)
		}
	}
	// The scripts call `weir __complete ARGS`; it answers from the tree.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"ru"}, []string{"rules\t"}},
		{[]string{"rules", ""}, []string{"apply\t", "diff\t", "rollback\t"}},
		{[]string{"node", "--repl"}, []string{"--replication-interval\t"}},
		{[]string{"rules", "list", "--"}, []string{"--addr\t", "--output\t", "--consistent\t"}},
	} {
		r := runCLI(t, "", nil, append([]string{"__complete"}, tc.args...)...)
		for _, w := range tc.want {
			if r.code != exitOK || !strings.Contains(r.stdout, w) {
				t.Errorf("weir __complete %q: exit %d, stdout without %q:\n%s", tc.args, r.code, w, r.stdout)
			}
		}
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

// The spawned nodes' GOMAXPROCS: the cores shared among them by default,
// Go's own choice with -1 or a GOMAXPROCS already in the environment.
func TestNodeGOMAXPROCS(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	share := max(1, runtime.NumCPU()/3)
	for _, tt := range []struct{ flag, n, want int }{{0, 3, share}, {0, 0, runtime.NumCPU()}, {2, 3, 2}, {-1, 3, 0}} {
		if got := nodeGOMAXPROCS(tt.flag, tt.n); got != tt.want {
			t.Errorf("nodeGOMAXPROCS(%d, %d) = %d, want %d", tt.flag, tt.n, got, tt.want)
		}
	}
	t.Setenv("GOMAXPROCS", "4")
	if got := nodeGOMAXPROCS(0, 3); got != 0 {
		t.Errorf("with GOMAXPROCS=4 in the environment: %d, want 0 (inherit it)", got)
	}
}
