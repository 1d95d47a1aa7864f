package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/weirlimit/weir/proto/weirv1"
)

// cacheFormat names the layout of a rules cache file. A file of another
// format is ignored (and replaced by the next set from the cluster).
const cacheFormat = "weir-gateway-rules/1"

// cacheFile is a rules cache on disk (Config.RulesCache), JSON:
//
//	{
//	  "format": "weir-gateway-rules/1",
//	  "version": 42,
//	  "saved_at": "2026-12-01T10:00:00Z",
//	  "gateway_id": "gw-1",
//	  "cluster": ["10.0.0.1:9090"],
//	  "rule_set": {"version": "42", "rules": [...], "overrides": [...]}
//	}
//
// rule_set is the weirv1.RuleSet the cluster sent, in protojson with the
// proto field names (those of the rules file: fail_mode, expires_at_ms).
// version repeats rule_set.version for people and tools; they must agree.
// gateway_id and cluster say who wrote it; they are not checked.
type cacheFile struct {
	Format    string          `json:"format"`
	Version   uint64          `json:"version"`
	SavedAt   time.Time       `json:"saved_at"`
	GatewayID string          `json:"gateway_id,omitempty"`
	Cluster   []string        `json:"cluster,omitempty"`
	RuleSet   json.RawMessage `json:"rule_set"`
}

// errNoCache is readRulesCache's answer for a file that does not exist
// (yet): not a problem to warn about.
var errNoCache = errors.New("client: no rules cache file")

// readRulesCache reads and checks the rules cache at path. The set still
// has to convert and compile (compileRuleSet).
func readRulesCache(path string) (*weirv1.RuleSet, cacheFile, error) {
	var f cacheFile
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, f, errNoCache
	}
	if err != nil {
		return nil, f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, f, fmt.Errorf("not a rules cache: %w", err)
	}
	if f.Format != cacheFormat {
		return nil, f, fmt.Errorf("format %q, want %q", f.Format, cacheFormat)
	}
	if len(f.RuleSet) == 0 {
		return nil, f, errors.New("no rule_set")
	}
	p := &weirv1.RuleSet{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(f.RuleSet, p); err != nil {
		return nil, f, fmt.Errorf("rule_set: %w", err)
	}
	if p.GetVersion() != f.Version {
		return nil, f, fmt.Errorf("version %d, but rule_set.version %d", f.Version, p.GetVersion())
	}
	return p, f, nil
}

// writeRulesCache writes p to path atomically: a temporary file in the
// same directory, synced, then renamed over path (and the directory
// synced, where the platform allows). A crash leaves the old file or the
// new one, never a mix. The file is readable by its owner only (overrides
// name keys, which may be API keys).
func writeRulesCache(path string, p *weirv1.RuleSet, gatewayID string, cluster []string, now time.Time) (err error) {
	set, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(p)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(cacheFile{
		Format: cacheFormat, Version: p.GetVersion(), SavedAt: now.UTC(),
		GatewayID: gatewayID, Cluster: cluster, RuleSet: set,
	}, "", "  ")
	if err != nil {
		return err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*") // mode 0600
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(append(b, '\n')); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync() // best effort: the rename survives a power cut
		_ = d.Close()
	}
	return nil
}
