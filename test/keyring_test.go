package test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/node"
	"github.com/weirlimit/weir/node/keyringapi"
)

// Tests that the gossip keyring changes with the admin role only (issue
// 25, finding 5).

// keyringAs lists (op "") or changes n's keyring with hc over base
// ("https://" or "http://"), sending token when set.
func keyringAs(t *testing.T, hc *http.Client, base string, n *node.Node, token, op string, key []byte) (int, keyringapi.Answer, string) {
	t.Helper()
	method, path := http.MethodGet, "/v1/keyring"
	var body io.Reader
	if op != "" {
		method, path = http.MethodPost, "/v1/keyring/"+op
		b, _ := json.Marshal(map[string]string{"key": peerauth.EncodeKey(key)})
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, base+n.HTTPAddr()+path, body)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a keyringapi.Answer
	_ = json.Unmarshal(raw, &a)
	return resp.StatusCode, a, string(raw)
}

// Under TLS without an admin token, a gateway certificate (and a node
// certificate without a node's key proof) is refused every keyring call
// with 403, from loopback, and nothing changes on any member (each still
// lists the one key, no data dir holds a keyring); the admin certificate
// then installs, uses and removes keys on every member.
func TestKeyringNeedsAdminCertificate(t *testing.T) {
	k1, k2 := peerauth.GenerateKey(), peerauth.GenerateKey()
	var mu sync.Mutex
	var dirs []string
	c := testcluster.NewWith(t, 3, testcluster.Options{TLS: true, Config: func(cfg *node.Config) {
		cfg.GossipKeys = [][]byte{k1}
		mu.Lock()
		dirs = append(dirs, cfg.DataDir)
		mu.Unlock()
	}})
	admin := c.PKI.HTTPClient(tlsconf.RoleAdmin, "ops")
	onKeys := func(want ...[]byte) {
		t.Helper()
		code, a, raw := keyringAs(t, admin, "https://", c.Nodes[0], "", "", nil)
		if code != http.StatusOK || len(a.Members) != 3 {
			t.Fatalf("admin list: %d %s", code, raw)
		}
		var fps []string
		for _, k := range want {
			fps = append(fps, peerauth.Fingerprint(k))
		}
		for _, m := range a.Members {
			if m.Error != "" || m.Primary != fps[0] || strings.Join(m.Keys, ",") != strings.Join(slices.Sorted(slices.Values(fps)), ",") {
				t.Errorf("member %s: primary %s keys %v (%s); want primary %s keys %v", m.Node, m.Primary, m.Keys, m.Error, fps[0], slices.Sorted(slices.Values(fps)))
			}
		}
	}

	for name, hc := range map[string]*http.Client{
		"gateway certificate": c.PKI.HTTPClient(tlsconf.RoleGateway, "edge"),
		"node certificate":    c.PKI.HTTPClient(tlsconf.RoleNode, "n2"),
	} {
		for _, s := range []struct {
			op  string
			key []byte
		}{{"install", k2}, {"use", k1}, {"remove", k1}, {"", nil}} {
			for _, n := range c.Nodes {
				code, _, raw := keyringAs(t, hc, "https://", n, "", s.op, s.key)
				if code != http.StatusForbidden || !strings.Contains(raw, "admin role") {
					t.Errorf("%s: keyring %q on %s: %d %s; want 403 naming the admin role", name, s.op, n.ID(), code, raw)
				}
			}
		}
	}
	onKeys(k1)
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "gossip-keyring")); !os.IsNotExist(err) {
			t.Errorf("%s: a keyring was persisted after refused calls (%v)", d, err)
		}
	}

	for _, s := range []struct {
		op   string
		key  []byte
		want [][]byte
	}{{"install", k2, [][]byte{k1, k2}}, {"use", k2, [][]byte{k2, k1}}, {"remove", k1, [][]byte{k2}}} {
		code, a, raw := keyringAs(t, admin, "https://", c.Nodes[1], "", s.op, s.key)
		if code != http.StatusOK || len(a.Members) != 3 {
			t.Fatalf("admin keyring %s: %d %s", s.op, code, raw)
		}
		onKeys(s.want...)
	}
	c.WaitStable(3)
}

// Without TLS, keyring calls need the admin token from loopback too; a
// node without a token takes none (it says how to set one).
func TestKeyringNeedsAdminToken(t *testing.T) {
	k1, k2 := peerauth.GenerateKey(), peerauth.GenerateKey()
	const token = "keyring-admin"
	withToken := testcluster.NewWith(t, 1, testcluster.Options{Config: func(cfg *node.Config) {
		cfg.GossipKeys, cfg.AdminToken = [][]byte{k1}, token
	}})
	n := withToken.Nodes[0]
	for _, op := range []string{"install", ""} {
		for _, tok := range []string{"", "wrong"} {
			if code, _, raw := keyringAs(t, http.DefaultClient, "http://", n, tok, op, k2); code != http.StatusUnauthorized {
				t.Errorf("keyring %q from loopback with token %q: %d %s; want 401", op, tok, code, raw)
			}
		}
	}
	if code, _, raw := keyringAs(t, http.DefaultClient, "http://", n, token, "install", k2); code != http.StatusOK {
		t.Errorf("keyring install with the token: %d %s", code, raw)
	}

	noToken := testcluster.NewWith(t, 1, testcluster.Options{Config: withKeys(k1)})
	for _, op := range []string{"install", ""} {
		code, _, raw := keyringAs(t, http.DefaultClient, "http://", noToken.Nodes[0], "", op, k2)
		if code != http.StatusUnauthorized || !strings.Contains(raw, "--admin-token-file") {
			t.Errorf("keyring %q from loopback, node without a token: %d %s; want 401 saying how to set one", op, code, raw)
		}
	}
	if _, a, _ := keyringAs(t, http.DefaultClient, "http://", noToken.Nodes[0], "", "", nil); !strings.HasPrefix(a.Error, "keyring lists") {
		t.Errorf("refused list: %q; want it called a list, not a change", a.Error)
	}
}
