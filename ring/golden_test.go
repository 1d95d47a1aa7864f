package ring

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// TestGoldenOwners pins who owns a few keys for a few member sets. Every
// node and every gateway, whatever version it runs, must compute the same
// owner, so any change here (hash, partition formula, consistent's
// distribution, replica order) is a wire-compatibility break, not a
// refactor. owners.golden is the legacy shape, owners-2039.golden the
// default. Regenerate with -update only on purpose.
func TestGoldenOwners(t *testing.T) {
	sets := [][]string{
		{"node-a"},
		{"node-a", "node-b", "node-c"},
		{"node-a", "node-b", "node-c", "node-d"},
		{"10.0.0.1:7946", "10.0.0.2:7946", "10.0.0.3:7946", "10.0.0.4:7946", "10.0.0.5:7946"},
	}
	keys := []string{"apikey:ak_42", "user:alice", "ip:203.0.113.7", "header:X-Tenant:acme", "global"}
	for _, g := range []struct {
		file string
		cfg  Config
	}{{"owners.golden", LegacyConfig()}, {"owners-2039.golden", DefaultConfig()}} {
		g.cfg.Replicas = 3
		checkGolden(t, g.file, sets, keys, g.cfg)
	}
}

func checkGolden(t *testing.T, file string, sets [][]string, keys []string, cfg Config) {
	var b strings.Builder
	for _, set := range sets {
		r := mustNew(t, set, cfg)
		fmt.Fprintf(&b, "members %s\n", strings.Join(set, " "))
		for _, k := range keys {
			fmt.Fprintf(&b, "  %-22s partition %3d  replicas %s\n", k, r.Partition(k), strings.Join(r.Replicas(k, 3), " "))
		}
		for _, id := range set {
			fmt.Fprintf(&b, "  %-22s owns %3d  holds %3d\n", id, len(r.OwnedBy(id)), len(r.HeldBy(id)))
		}
	}
	path := filepath.Join("testdata", file)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGoldenOwners -update)", err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("ownership changed; got:\n%s\nwant:\n%s", got, want)
	}
}
