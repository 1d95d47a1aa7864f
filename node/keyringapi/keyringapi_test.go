package keyringapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/node/security"
	"github.com/weirlimit/weir/ring"
)

// alone is a membership of this node alone (the part membership owns,
// outside this package).
type alone struct{ self string }

func (a alone) Live() map[string]clusterview.Member {
	return map[string]clusterview.Member{a.self: {ID: a.self}}
}
func (a alone) Gossiped(id string) (clusterview.Member, bool) { return clusterview.Member{}, false }
func (a alone) Viewed(id string) (clusterview.Member, bool)   { return clusterview.Member{}, false }
func (a alone) Ring() *ring.Ring                              { return nil }
func (a alone) Leaving() bool                                 { return false }
func (a alone) Changed()                                      {}
func (a alone) Announce() error                               { return nil }

// newNode is a one-member node's keyring edge behind the security part's
// HTTP middleware, with admin token "adm" and gateway token "gw".
func newNode(t *testing.T, key []byte) (http.Handler, *security.Guard, string) {
	t.Helper()
	dir := t.TempDir()
	var kr *memberlist.Keyring
	if key != nil {
		var err error
		if kr, err = memberlist.NewKeyring(nil, key); err != nil {
			t.Fatal(err)
		}
	}
	g, err := security.New(security.Config{ID: "n1", ClusterName: "weir", DataDir: dir, Keyring: kr,
		AdminToken: "adm", GatewayToken: "gw", Ctx: context.Background(), Go: func(f func()) { go f() }}, alone{"n1"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	New(Config{Self: "n1", Keyring: g, Members: alone{"n1"}, Admins: g.Authorizer()}).Register(mux)
	return g.NewHTTPServer(mux).Handler, g, dir
}

func do(t *testing.T, h http.Handler, method, path, token, ctype, body string) (int, Answer) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		r.Header.Set("Content-Type", ctype)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var a Answer
	if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
		t.Fatalf("%s %s: body %q: %v", method, path, w.Body.String(), err)
	}
	return w.Code, a
}

func TestKeyringAPI(t *testing.T) {
	k1, k2 := peerauth.GenerateKey(), peerauth.GenerateKey()
	h, g, dir := newNode(t, k1)
	keyBody := `{"key":"` + peerauth.EncodeKey(k2) + `"}`

	for _, tc := range []struct {
		name, method, path, token, ctype, body string
		code                                   int
		errCode                                string
	}{
		{"list without a credential", "GET", "/v1/keyring", "", "", "", 401, "unauthorized"},
		{"list with the wrong token", "GET", "/v1/keyring", "nope", "", "", 401, "unauthorized"},
		{"list as a gateway", "GET", "/v1/keyring", "gw", "", "", 403, "forbidden"},
		{"change as a gateway", "POST", "/v1/keyring/install", "gw", "application/json", keyBody, 403, "forbidden"},
		{"unknown operation", "POST", "/v1/keyring/rotate", "adm", "application/json", keyBody, 404, "not_found"},
		{"not JSON", "POST", "/v1/keyring/install", "adm", "text/plain", keyBody, 415, "unsupported_media_type"},
		{"no key", "POST", "/v1/keyring/install", "adm", "application/json", `{"key":"%%"}`, 400, "invalid_argument"},
		{"use a key not installed", "POST", "/v1/keyring/use", "adm", "application/json", keyBody, 409, "conflict"},
	} {
		code, a := do(t, h, tc.method, tc.path, tc.token, tc.ctype, tc.body)
		if code != tc.code || a.Code != tc.errCode || a.Error == "" {
			t.Errorf("%s: %d %q (%s), want %d %q", tc.name, code, a.Code, a.Error, tc.code, tc.errCode)
		}
	}
	if _, keys, _ := g.Keys(); len(keys) != 1 {
		t.Fatalf("refused calls changed the keyring: %d keys", len(keys))
	}

	code, a := do(t, h, "POST", "/v1/keyring/install", "adm", "application/json", keyBody)
	fp1, fp2 := peerauth.Fingerprint(k1), peerauth.Fingerprint(k2)
	if code != 200 || a.Op != "install" || a.Key != fp2 || len(a.Members) != 1 || a.Members[0].Node != "n1" || a.Members[0].Primary != fp1 || !slices.Contains(a.Members[0].Keys, fp2) {
		t.Fatalf("install: %d %+v", code, a)
	}
	persisted, err := peerauth.ReadKeyringFile(filepath.Join(dir, security.KeyringFile))
	if err != nil || len(persisted) != 2 {
		t.Fatalf("install not persisted: %d keys, %v", len(persisted), err)
	}
	if code, a = do(t, h, "POST", "/v1/keyring/use", "adm", "application/json", keyBody); code != 200 || a.Members[0].Primary != fp2 {
		t.Fatalf("use: %d %+v", code, a)
	}
	if code, a = do(t, h, "POST", "/v1/keyring/remove", "adm", "application/json", keyBody); code != 409 || a.Code != "conflict" {
		t.Fatalf("remove of the primary: %d %+v, want 409 conflict", code, a)
	}
	if code, a = do(t, h, "GET", "/v1/keyring", "adm", "", ""); code != 200 || len(a.Members) != 1 || a.Members[0].Primary != fp2 || len(a.Members[0].Keys) != 2 {
		t.Fatalf("list: %d %+v", code, a)
	}
}

// A node without a gossip key has no keyring to list or change.
func TestKeyringAPIWithoutKey(t *testing.T) {
	h, _, _ := newNode(t, nil)
	key := `{"key":"` + peerauth.EncodeKey(peerauth.GenerateKey()) + `"}`
	if code, a := do(t, h, "GET", "/v1/keyring", "adm", "", ""); code != 400 || !strings.Contains(a.Error, "no keyring") {
		t.Errorf("list: %d %+v", code, a)
	}
	if code, a := do(t, h, "POST", "/v1/keyring/install", "adm", "application/json", key); code != 400 || !strings.Contains(a.Error, "no keyring") {
		t.Errorf("install: %d %+v", code, a)
	}
}
