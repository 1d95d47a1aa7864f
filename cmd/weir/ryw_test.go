package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
)

// TestCLIReadsYourWritesAcrossNodes (issue 12): `rules apply` through one
// follower, then `rules list` through the other shows the new version; a
// rollback likewise. Before read-your-writes, list answered the older
// version without the new rule.
func TestCLIReadsYourWritesAcrossNodes(t *testing.T) {
	c := testcluster.New(t, 3)
	var fs []*node.Node
	testwait.For(t, 10*time.Second, "two followers that know the leader", func() error {
		fs = fs[:0]
		for _, n := range c.Live() {
			if id, _ := n.Store().Leader(); !n.Store().IsLeader() && id != "" {
				fs = append(fs, n)
			}
		}
		if len(fs) != 2 {
			return fmt.Errorf("%d followers", len(fs))
		}
		return nil
	})
	writer, reader := "http://"+fs[0].HTTPAddr(), "http://"+fs[1].HTTPAddr()
	applied := regexp.MustCompile(`rules version (\d+)`)
	version := func(r result) uint64 {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
		}
		m := applied.FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("no version in %q", r.stdout)
		}
		v, _ := strconv.ParseUint(m[1], 10, 64)
		return v
	}
	type listJSON struct {
		Version uint64 `json:"version"`
		Rules   []struct {
			ID string `json:"id"`
		} `json:"rules"`
		Read string `json:"read"`
	}
	list := func(extra ...string) listJSON {
		t.Helper()
		r := runCLI(t, "", nil, append([]string{"rules", "list", "-o", "json", "--addr", reader}, extra...)...)
		if r.code != 0 {
			t.Fatalf("list: exit %d: %s", r.code, r.stderr)
		}
		var l listJSON
		if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		return l
	}

	var first uint64
	for i := range 5 {
		file := writeTemp(t, fmt.Sprintf("r%d.yaml", i), fmt.Sprintf("rules:\n  - id: cli.%d\n    match: {route: /cli/%d}\n    key: apikey\n    rate: 5\n    period: 1s\n", i, i))
		v := version(runCLI(t, "", nil, "rules", "apply", "-f", file, "--addr", writer))
		if first == 0 {
			first = v
		}
		l := list()
		if l.Version < v || l.Rules[len(l.Rules)-1].ID != fmt.Sprintf("cli.%d", i) || l.Read != "consistent" {
			t.Fatalf("try %d: applied version %d through one node; list through another: %+v", i, v, l)
		}
	}
	rb := version(runCLI(t, "", nil, "rules", "rollback", strconv.FormatUint(first, 10), "--addr", writer))
	if l := list(); l.Version < rb || len(l.Rules) != 1 || l.Rules[0].ID != "cli.0" {
		t.Fatalf("rolled back to %d as version %d; list through another node: %+v", first, rb, l)
	}

	// Text output says how the read was served.
	r := runCLI(t, "", nil, "rules", "list", "--addr", reader)
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("read: consistent (version %d)", rb)) {
		t.Fatalf("text list: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if l := list("--stale"); l.Read != "stale" {
		t.Fatalf("--stale: %+v", l)
	}
	for _, args := range [][]string{
		{"rules", "get", "cli.0"}, {"rules", "history", "--limit", "1"}, {"overrides", "list"},
	} {
		r := runCLI(t, "", nil, append(args, "--addr", reader)...)
		if r.code != 0 || !strings.Contains(r.stdout, "read: consistent (version ") {
			t.Fatalf("%v: exit %d: %s%s", args, r.code, r.stdout, r.stderr)
		}
		r = runCLI(t, "", nil, append(args, "--addr", reader, "--stale")...)
		if r.code != 0 || !strings.Contains(r.stdout, "read: stale (version ") {
			t.Fatalf("%v --stale: exit %d: %s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := runCLI(t, "", nil, "rules", "list", "--stale", "--consistent", "--addr", reader); r.code != 2 {
		t.Fatalf("--stale --consistent: exit %d, want 2 (usage)", r.code)
	}
}
