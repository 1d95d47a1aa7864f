package test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testlog"
)

// quickstartMarker precedes, in README.md, the fenced block that
// TestReadmeQuickStart runs.
const quickstartMarker = "<!-- quickstart:"

// shellStep is one command of a README block and the comment lines after
// it (what the README says it prints).
type shellStep struct {
	cmd, expect string
}

// quickstartSteps returns the commands of the first fenced block after the
// quickstart marker in readme: each line that is not a comment is a
// command; comment lines that follow a command are its expected output.
func quickstartSteps(readme string) ([]shellStep, error) {
	_, rest, ok := strings.Cut(readme, quickstartMarker)
	if !ok {
		return nil, fmt.Errorf("README.md has no %q marker line", quickstartMarker)
	}
	var steps []shellStep
	in := false
	sc := bufio.NewScanner(strings.NewReader(rest))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "```") && !in:
			in = true
		case strings.HasPrefix(line, "```"):
			if len(steps) == 0 {
				return nil, errors.New("the quickstart block has no commands")
			}
			return steps, nil
		case !in || line == "":
		case strings.HasPrefix(line, "#"):
			if len(steps) > 0 {
				steps[len(steps)-1].expect += strings.TrimSpace(strings.TrimPrefix(line, "#")) + "\n"
			}
		default:
			steps = append(steps, shellStep{cmd: line})
		}
	}
	return nil, errors.New("the quickstart block is not closed")
}

// devProc is a `weir dev` process and the addresses it serves.
type devProc struct {
	cmd        *exec.Cmd
	out        *testlog.Buffer
	http, gw   string
	documented bool // on the ports README names
	exited     chan struct{}
	waitErr    error
}

// README's ports for `weir dev`: node HTTP, node gRPC, gateway.
var documentedDevPorts = [3]string{"127.0.0.1:8080", "127.0.0.1:9090", "127.0.0.1:8000"}

func portsFree(addrs ...string) bool {
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// startDev starts `weir dev` on README's ports when they are free (else
// on free ports) and waits for its help text. A start that loses the
// documented ports to another process in between is retried on free ones.
func startDev(t *testing.T) *devProc {
	t.Helper()
	documented := portsFree(documentedDevPorts[:]...)
	for {
		addrs := documentedDevPorts
		if !documented {
			addrs = [3]string{freeAddr(t), freeAddr(t), freeAddr(t)}
		}
		d := &devProc{out: &testlog.Buffer{}, http: addrs[0], gw: addrs[2], documented: documented, exited: make(chan struct{})}
		d.cmd = exec.Command(weirBin(t), "dev", "--http", addrs[0], "--grpc", addrs[1], "--gateway", addrs[2],
			"--raft", "127.0.0.1:0", "--gossip", "127.0.0.1:0", "--log-level", "error")
		d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
		if err := d.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { d.waitErr = d.cmd.Wait(); close(d.exited) }()
		err := d.waitHelp(90 * time.Second)
		if err == nil {
			t.Cleanup(d.stop)
			return d
		}
		d.stop()
		if !documented {
			t.Fatal(err)
		}
		t.Logf("on README's ports: %v; again on free ports", err)
		documented = false
	}
}

// waitHelp polls for the end of weir dev's help text until it exits or
// limit passes.
func (d *devProc) waitHelp(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for !strings.Contains(d.out.String(), "Stop with Ctrl-C.") {
		select {
		case <-d.exited:
			return fmt.Errorf("weir dev exited: %v\n%s", d.waitErr, d.out.String())
		case <-time.After(20 * time.Millisecond): // poll interval
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no help text after %v:\n%s", limit, d.out.String())
		}
	}
	return nil
}

func (d *devProc) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

// runShell runs line with bash (pipefail: a failing curl in a pipe fails
// it) in dir, with env added, and returns its output.
func runShell(dir string, env []string, line string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
	c.Dir, c.Env = dir, append(os.Environ(), env...)
	out, err := c.CombinedOutput()
	return string(out), err
}

// checkOutput holds what a step printed to what README says it prints: a
// JSON object printed is never an error answer, and has the keys (and the
// "allowed") of the JSON object README shows; a README that names a 429
// sees one.
func checkOutput(out, expect string) error {
	if strings.HasPrefix(strings.TrimSpace(out), "{") {
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			return fmt.Errorf("printed JSON that does not parse: %v", err)
		}
		if _, bad := got["error"]; bad {
			return errors.New("answered an error")
		}
		if i := strings.Index(expect, "{"); i >= 0 {
			var want map[string]any
			if err := json.Unmarshal([]byte(strings.TrimSpace(expect[i:])), &want); err != nil {
				return fmt.Errorf("README's answer does not parse: %v", err)
			}
			if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)); !slices.Equal(g, w) {
				return fmt.Errorf("answer has keys %v, README shows %v", g, w)
			}
			if got["allowed"] != want["allowed"] {
				return fmt.Errorf("answer allowed=%v, README shows %v", got["allowed"], want["allowed"])
			}
		}
	}
	if strings.Contains(expect, "429") && !strings.Contains(out, " 429") {
		return errors.New("README shows a 429; none was printed")
	}
	return nil
}

// TestReadmeQuickStart runs README.md's quick start as a reader pastes
// it: every command of the block after the "<!-- quickstart:" marker line
// (in a directory where bin/weir is the weir binary, against a real `weir
// dev` process), then every curl line `weir dev`'s own help prints. Each
// must exit 0 and print what README says (checkOutput), so neither can
// drift from the API again.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl: the quick start uses it")
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps, err := quickstartSteps(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(weirBin(t), filepath.Join(dir, "bin", "weir")); err != nil {
		t.Fatal(err)
	}
	d := startDev(t)
	var env []string
	rewrite := func(s string) string { return s }
	if !d.documented {
		env = []string{"WEIR_ADDR=" + d.http}
		rewrite = strings.NewReplacer("localhost:8080", d.http, "127.0.0.1:8080", d.http,
			"localhost:8000", d.gw, "127.0.0.1:8000", d.gw).Replace
	}
	t.Logf("weir dev on %s, gateway %s (README's ports: %v)", d.http, d.gw, d.documented)
	for _, st := range steps {
		line := rewrite(st.cmd)
		var out string
		var err error
		// login.ip fails closed after the gateway's 5 ms check timeout: on
		// a busy machine a check may miss it (503), so a step that saw one
		// runs again (the bucket it spent stays spent: the 429 comes).
		for try := 0; try < 3 && (try == 0 || err != nil && strings.Contains(out, " 503 ")); try++ {
			out, err = runShell(dir, env, line)
			if err == nil {
				err = checkOutput(out, st.expect)
			}
		}
		if err != nil {
			t.Errorf("README: %s\n  %v; printed:\n%s", st.cmd, err, out)
		}
	}

	// The help weir dev prints: its curl lines, with their addresses.
	banner := regexp.MustCompile(`(?m)^\s+(curl .*)$`).FindAllStringSubmatch(d.out.String(), -1)
	if len(banner) == 0 {
		t.Fatalf("weir dev's help shows no curl line:\n%s", d.out.String())
	}
	for _, m := range banner {
		out, err := runShell(dir, env, m[1])
		if err == nil {
			err = checkOutput(out, "")
		}
		if err != nil {
			t.Errorf("weir dev's help: %s\n  %v; printed:\n%s", m[1], err, out)
		}
	}
}

// Every curl that sends a body (-d) to the API in the docs, the examples
// and weir dev's help says it is JSON: the API refuses other content types
// (415; it keeps cross-site form posts from spending callers' tokens).
func TestDocsCurlSendsJSON(t *testing.T) {
	files := []string{filepath.Join("..", "README.md"), filepath.Join("..", "cmd", "weir", "node.go")}
	for _, glob := range []string{"../docs/*.md", "../examples/*"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	body := regexp.MustCompile(`\bcurl\b.*\s(-d|--data\S*)\s`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if body.MatchString(line) && !strings.Contains(line, "Content-Type: application/json") {
				t.Errorf("%s:%d: curl sends a body without -H 'Content-Type: application/json': %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}
