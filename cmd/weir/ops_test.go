package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testlog"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node/events"
)

const opsCLIRules = `
rules:
  - id: burst2
    match: {route: /b}
    key: apikey
    rate: 1
    period: 1h
    burst: 2
    events: {sample: 1}
  - id: glob
    match: {route: /g}
    key: global
    rate: 10
    period: 1m
`

// weir limits, events (listed and followed) and top against real nodes.
func TestOpsCommands(t *testing.T) {
	c := testcluster.New(t, 2)
	c.ApplyRules(opsCLIRules)
	addr := "http://" + c.Nodes[0].HTTPAddr()
	check := func(key string) {
		resp, err := http.Post("http://"+c.Nodes[1].HTTPAddr()+"/v1/limits/check", "application/json",
			strings.NewReader(`{"key":"`+key+`","rule":"burst2"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for i := 0; i < 3; i++ {
		check("apikey:a")
	}

	r := runCLI(t, "", nil, "limits", "apikey:a", "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "burst2") || strings.Contains(r.stdout, "glob") {
		t.Fatalf("weir limits apikey:a: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", nil, "limits", "apikey:a", "-o", "json", "--addr", addr)
	var la limitsAnswer
	if err := json.Unmarshal([]byte(r.stdout), &la); err != nil || len(la.Limits) != 1 || la.Limits[0].Remaining != 0 {
		t.Fatalf("limits -o json: %v %+v", err, la)
	}
	if _, err := time.Parse(time.RFC3339, la.Limits[0].ResetAt); err != nil {
		t.Fatalf("reset_at %q: %v", la.Limits[0].ResetAt, err)
	}
	if r := runCLI(t, "", nil, "limits", "--addr", addr); r.code != exitUsage {
		t.Fatalf("weir limits without a key: exit %d, want usage", r.code)
	}

	r = runCLI(t, "", nil, "events", "--rule", "burst2", "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "apikey:a") || !strings.Contains(r.stdout, "denied") {
		t.Fatalf("weir events: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", nil, "events", "--decision", "nope", "--addr", addr); r.code != exitUsage {
		t.Fatalf("--decision nope: exit %d, want usage", r.code)
	}

	// --follow -o json prints a new denial as one JSON line.
	pr, pw := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"events", "--follow", "--limit", "0", "--rule", "burst2", "-o", "json", "--addr", addr},
			strings.NewReader(""), pw, io.Discard, func(string) string { return "" })
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	go func() {
		for ctx.Err() == nil { // until the follower has seen one (bounded by ctx)
			check("apikey:follow")
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	var e events.Event
	for lines.Scan() {
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Fatalf("followed line %q: %v", lines.Text(), err)
		}
		if e.Key == "apikey:follow" {
			break
		}
	}
	cancel()
	go io.Copy(io.Discard, pr) //nolint:errcheck // drain until the command returns
	if code := <-done; code != 0 || e.Key != "apikey:follow" || e.Decision != "denied" {
		t.Fatalf("follow: exit %d, last event %+v", code, e)
	}

	r = runCLI(t, "", nil, "top", "--rule", "burst2", "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "RULE") || !strings.Contains(r.stderr, "from a sample") {
		t.Fatalf("weir top: exit %d (want the table and, on stderr, that it samples)\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// With no events yet, weir events says so and how events are sampled, and
// weir events --follow prints its header and says it is waiting (issue
// 30, item 5: it printed nothing until an event came).
func TestEventsSaysItWaits(t *testing.T) {
	c := testcluster.New(t, 1)
	c.ApplyRules(opsCLIRules)
	addr := "http://" + c.Nodes[0].HTTPAddr()
	r := runCLI(t, "", nil, "events", "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stderr, "no events held; events are sampled") {
		t.Fatalf("weir events with none held: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut testlog.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"events", "--follow", "--addr", addr}, strings.NewReader(""), &out, &errOut,
			func(string) string { return "" })
	}()
	testwait.For(t, 20*time.Second, "weir events --follow to say it waits", func() error {
		if !strings.Contains(errOut.String(), "waiting for events (Ctrl-C to stop); events are sampled") {
			return fmt.Errorf("stderr %q", errOut.String())
		}
		return nil
	})
	cancel()
	if code := <-done; code != 0 || !strings.HasPrefix(out.String(), "TIME  RULE  VERSION") {
		t.Fatalf("follow: exit %d, stdout %q (want the header)", code, out.String())
	}
}

func TestLogFormat(t *testing.T) {
	var b strings.Builder
	newLogger(&b, logJSON, slog.LevelInfo).Info("hello", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal([]byte(b.String()), &rec); err != nil || rec["msg"] != "hello" {
		t.Fatalf("json log line %q: %v", b.String(), err)
	}
	b.Reset()
	newLogger(&b, logText, slog.LevelInfo).Info("hello")
	if !strings.Contains(b.String(), "msg=hello") {
		t.Fatalf("text log line %q", b.String())
	}
	for _, cmd := range []string{"node", "gateway"} {
		r := runCLI(t, "", nil, cmd, "--log-format", "yaml")
		if r.code != exitUsage || !strings.Contains(r.stderr, "want json or text") {
			t.Fatalf("weir %s --log-format yaml: exit %d %s", cmd, r.code, r.stderr)
		}
		r = runCLI(t, "", map[string]string{"WEIR_LOG_FORMAT": "xml"}, cmd)
		if r.code != exitUsage || !strings.Contains(r.stderr, "WEIR_LOG_FORMAT") {
			t.Fatalf("weir %s with WEIR_LOG_FORMAT=xml: exit %d %s", cmd, r.code, r.stderr)
		}
	}
}
