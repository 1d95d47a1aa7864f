package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/api"
	"github.com/weirlimit/weir/node/authz"
)

// Gossip key rotation (weir keyring). An admin asks any node; it checks
// the change is safe for every live member, applies it to its own keyring,
// persists it in its data dir, and makes the same change on every other
// live member over HTTP (the same endpoints), each call carrying this
// node's proof bound to the request (peerauth.TokenFor over method, path
// and body digest) and the key sealed under the current keyring
// (peerauth.Seal): a key never crosses the wire in clear between nodes,
// and a proof seen on the wire is good for no other request. Without a
// gossip key there is no keyring to change.

// KeyringMember is one member's keyring: key fingerprints (the first 8
// bytes of the key's SHA-256, hex), never the keys.
type KeyringMember struct {
	Node    string   `json:"node"`
	Primary string   `json:"primary,omitempty"`
	Keys    []string `json:"keys,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// KeyringAnswer is the answer of every keyring endpoint.
type KeyringAnswer struct {
	Op      string          `json:"op,omitempty"`
	Key     string          `json:"key,omitempty"` // fingerprint
	Members []KeyringMember `json:"members"`
	// Error and Code are set when the change failed on some member.
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}

// KeyFingerprint names a key without revealing it.
func KeyFingerprint(k []byte) string {
	s := sha256.Sum256(k)
	return hex.EncodeToString(s[:8])
}

// errNoKeyring answers keyring calls to a node without a gossip key.
var errNoKeyring = limit.Errorf(limit.ErrInvalid, "node: gossip encryption is off (no --gossip-key-file): there is no keyring to change")

// keyringOps are the keyring changes.
var keyringOps = map[string]bool{"install": true, "use": true, "remove": true}

const (
	keyringBodyMax = 4 << 10
	keyringTimeout = 5 * time.Second
)

func (n *Node) handleKeyring(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/keyring", func(w http.ResponseWriter, r *http.Request) {
		if n.fromNode(r, nil) {
			if n.keyring == nil {
				writeKeyringError(w, errNoKeyring)
				return
			}
			writeKeyringJSON(w, http.StatusOK, KeyringAnswer{Members: []KeyringMember{n.localKeyring()}})
			return
		}
		if err := n.authorizeAdmin(r, "keyring lists"); err != nil {
			writeKeyringError(w, err)
			return
		}
		if n.keyring == nil {
			writeKeyringError(w, errNoKeyring)
			return
		}
		writeKeyringJSON(w, http.StatusOK, KeyringAnswer{Members: n.listKeyrings(r.Context())})
	})
	mux.HandleFunc("POST /v1/keyring/{op}", func(w http.ResponseWriter, r *http.Request) {
		op := r.PathValue("op")
		if r.Header.Get(peerauth.MetadataKey) != "" && n.auth != nil {
			n.memberKeyringChange(w, r, op)
			return
		}
		// An admin: the role first, the body after.
		if err := n.authorizeAdmin(r, "keyring changes"); err != nil {
			writeKeyringError(w, err)
			return
		}
		if !keyringOps[op] {
			writeKeyringError(w, limit.Errorf(limit.ErrNotFound, "no keyring operation %q: want install, use or remove", op))
			return
		}
		if err := requireJSON(r); err != nil {
			writeKeyringError(w, err)
			return
		}
		var body struct {
			Key string `json:"key"`
		}
		if err := readKeyringBody(w, r, &body); err != nil {
			writeKeyringError(w, err)
			return
		}
		key, err := peerauth.ParseKey(body.Key)
		if err != nil {
			writeKeyringError(w, limit.Errorf(limit.ErrInvalid, "%v", err))
			return
		}
		if n.keyring == nil {
			writeKeyringError(w, errNoKeyring)
			return
		}
		ans, err := n.rotate(r.Context(), op, key)
		if err != nil {
			code, name := api.HTTPStatus(err)
			ans.Error, ans.Code = err.Error(), name
			writeKeyringJSON(w, code, ans)
			return
		}
		writeKeyringJSON(w, http.StatusOK, ans)
	})
}

// memberKeyringChange is one member's part of a rotation, asked by the
// node an admin asked: the proof is bound to the operation and the body,
// and the key travels sealed under the current keyring.
func (n *Node) memberKeyringChange(w http.ResponseWriter, r *http.Request, op string) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, keyringBodyMax))
	if err != nil || !n.fromNode(r, b) {
		writeKeyringError(w, limit.Errorf(limit.ErrUnauthenticated, "keyring: no valid node proof for this request"))
		return
	}
	var body struct {
		Sealed string `json:"sealed"`
	}
	if !keyringOps[op] || json.Unmarshal(b, &body) != nil {
		writeKeyringError(w, limit.Errorf(limit.ErrInvalid, "keyring: bad member request"))
		return
	}
	key, err := n.auth.Open(body.Sealed)
	if err != nil {
		writeKeyringError(w, limit.Errorf(limit.ErrInvalid, "keyring: %v", err))
		return
	}
	if err := n.changeKeyring(op, key); err != nil {
		writeKeyringError(w, err)
		return
	}
	writeKeyringJSON(w, http.StatusOK, KeyringAnswer{Op: op, Key: KeyFingerprint(key), Members: []KeyringMember{n.localKeyring()}})
}

// keyringPurpose is what a member call's proof is bound to.
func keyringPurpose(method, path string, body []byte) string {
	d := sha256.Sum256(body)
	return method + " " + path + " " + hex.EncodeToString(d[:])
}

// fromNode reports whether r carries a node proof bound to it (body: the
// request body read).
func (n *Node) fromNode(r *http.Request, body []byte) bool {
	tok := r.Header.Get(peerauth.MetadataKey)
	if tok == "" || n.auth == nil {
		return false
	}
	_, ok := n.auth.VerifyTokenFor(tok, keyringPurpose(r.Method, r.URL.Path, body))
	return ok
}

func readKeyringBody(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, keyringBodyMax))
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		return limit.Errorf(limit.ErrInvalid, "body: want {\"key\": \"<base64 key>\"}")
	}
	return nil
}

// authorizeAdmin admits the admin role only, from any address: an admin
// certificate or the admin token, as node/authz found them in the request
// (whoever may change the keyring may let any process into the cluster).
// A node with neither TLS nor a token admits nobody. what names the call
// in the error ("keyring changes", "keyring lists").
func (n *Node) authorizeAdmin(r *http.Request, what string) error {
	c := authz.FromContext(r.Context())
	switch {
	case c.Admin:
		return nil
	case n.tls == nil && n.cfg.AdminToken == "":
		return limit.Errorf(limit.ErrUnauthenticated, "%s need the admin role, and this node has no admin credential: start it with --admin-token-file (or with TLS, and use an admin certificate)", what)
	case c.Any():
		return errForbidden{fmt.Errorf("%s need the admin role: an admin certificate or the admin token (caller: %s)", what, c)}
	case n.tls != nil:
		return limit.Errorf(limit.ErrUnauthenticated, "%s need the admin role: an admin certificate or the admin token", what)
	}
	return limit.Errorf(limit.ErrUnauthenticated, "%s need the admin token: send \"Authorization: Bearer <token>\"", what)
}

// errForbidden is a caller with a role, but not the one asked for (403).
type errForbidden struct{ error }

func (n *Node) localKeyring() KeyringMember {
	m := KeyringMember{Node: n.cfg.ID, Primary: KeyFingerprint(n.keyring.GetPrimaryKey())}
	for _, k := range n.keyring.GetKeys() {
		m.Keys = append(m.Keys, KeyFingerprint(k))
	}
	sort.Strings(m.Keys)
	return m
}

// changeKeyring applies one change to this node's keyring and persists
// the result in the data dir.
func (n *Node) changeKeyring(op string, key []byte) error {
	n.keyringMu.Lock()
	defer n.keyringMu.Unlock()
	var err error
	switch op {
	case "install":
		err = n.keyring.AddKey(key)
	case "use":
		err = n.keyring.UseKey(key)
	case "remove":
		err = n.keyring.RemoveKey(key)
	}
	if err != nil {
		return limit.Errorf(limit.ErrConflict, "node %s: keyring %s: %v", n.cfg.ID, op, err)
	}
	if err := peerauth.WriteKeyringFile(filepath.Join(n.cfg.DataDir, keyringFile), n.keyring.GetPrimaryKey(), n.keyring.GetKeys()); err != nil {
		return fmt.Errorf("node %s: keyring %s applied but not persisted: %w", n.cfg.ID, op, err)
	}
	n.log.Info("gossip keyring changed", "op", op, "key", KeyFingerprint(key))
	if op == "use" {
		// Re-sign this node's member proof with the new primary.
		if err := n.cluster.UpdateMeta(time.Second); err != nil {
			n.log.Warn("gossip update after a new primary key", "err", err)
		}
	}
	return nil
}

// listKeyrings asks every live member for its keyring.
func (n *Node) listKeyrings(ctx context.Context) []KeyringMember {
	return n.eachMember(ctx, func(ctx context.Context, id string, m member) KeyringMember {
		if id == n.cfg.ID {
			return n.localKeyring()
		}
		var ans KeyringAnswer
		if err := n.keyringCall(ctx, m.HTTP, http.MethodGet, "/v1/keyring", nil, &ans); err != nil {
			return KeyringMember{Node: id, Error: err.Error()}
		}
		if len(ans.Members) != 1 {
			return KeyringMember{Node: id, Error: "unexpected answer"}
		}
		return ans.Members[0]
	})
}

// rotate checks that op is safe for every live member (use: each holds the
// key; remove: none uses it as its primary), then applies it here and on
// every other live member.
func (n *Node) rotate(ctx context.Context, op string, key []byte) (KeyringAnswer, error) {
	fp := KeyFingerprint(key)
	ans := KeyringAnswer{Op: op, Key: fp}
	if op != "install" {
		for _, m := range n.listKeyrings(ctx) {
			switch {
			case m.Error != "":
				return ans, limit.Errorf(limit.ErrUnavailable, "member %s did not list its keyring (%s); nothing changed", m.Node, m.Error)
			case op == "use" && !containsString(m.Keys, fp):
				return ans, limit.Errorf(limit.ErrConflict, "member %s has not installed key %s; run `weir keyring install` first; nothing changed", m.Node, fp)
			case op == "remove" && m.Primary == fp:
				return ans, limit.Errorf(limit.ErrConflict, "member %s still uses key %s as its primary; run `weir keyring use` with another key first; nothing changed", m.Node, fp)
			}
		}
	}
	if err := n.changeKeyring(op, key); err != nil {
		return ans, err
	}
	body, _ := json.Marshal(map[string]string{"sealed": n.auth.Seal(key)})
	failed := 0
	ans.Members = n.eachMember(ctx, func(ctx context.Context, id string, m member) KeyringMember {
		if id == n.cfg.ID {
			return n.localKeyring()
		}
		var a KeyringAnswer
		if err := n.keyringCall(ctx, m.HTTP, http.MethodPost, "/v1/keyring/"+op, body, &a); err != nil {
			return KeyringMember{Node: id, Error: err.Error()}
		}
		if len(a.Members) != 1 {
			return KeyringMember{Node: id, Error: "unexpected answer"}
		}
		return a.Members[0]
	})
	var why []string
	for _, m := range ans.Members {
		if m.Error != "" {
			failed++
			why = append(why, m.Node+": "+m.Error)
		}
	}
	if failed > 0 {
		return ans, limit.Errorf(limit.ErrUnavailable, "keyring %s of key %s failed on %d of %d members (%s); run it again once they answer", op, fp, failed, len(ans.Members), strings.Join(why, "; "))
	}
	return ans, nil
}

// eachMember calls f for every live member at once and lists the results
// by node id.
func (n *Node) eachMember(ctx context.Context, f func(ctx context.Context, id string, m member) KeyringMember) []KeyringMember {
	ctx, cancel := context.WithTimeout(ctx, keyringTimeout)
	defer cancel()
	members := n.cluster.ReadMembers()
	if _, ok := members[n.cfg.ID]; !ok {
		members[n.cfg.ID] = member{ID: n.cfg.ID}
	}
	out := make([]KeyringMember, 0, len(members))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := f(ctx, id, m)
			r.Node = id
			mu.Lock()
			out = append(out, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// keyringCall makes one member-local keyring call with this node's proof.
func (n *Node) keyringCall(ctx context.Context, addr, method, path string, body []byte, out *KeyringAnswer) error {
	if addr == "" {
		return errors.New("no HTTP address in gossip")
	}
	scheme, tr := "http://", &http.Transport{DisableKeepAlives: true}
	if n.tls != nil { // members' HTTP is HTTPS: present this node's certificate
		scheme, tr.TLSClientConfig = "https://", n.tls.ClientConfig(tlsconf.RoleNode)
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+addr+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set(peerauth.MetadataKey, n.auth.TokenFor(n.cfg.ID, keyringPurpose(method, path, body)))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := &http.Client{Transport: tr}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return errors.New(e.Error)
		}
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return json.Unmarshal(b, out)
}

func writeKeyringError(w http.ResponseWriter, err error) {
	code, name := api.HTTPStatus(err)
	if errors.As(err, new(errForbidden)) {
		code, name = http.StatusForbidden, "forbidden"
	}
	writeKeyringJSON(w, code, KeyringAnswer{Members: []KeyringMember{}, Error: err.Error(), Code: name})
}

func writeKeyringJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// requireJSON refuses a request body that does not say it is JSON (a
// browser's cross-site form or text/plain POST cannot set it).
func requireJSON(r *http.Request) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return limit.Errorf(api.ErrUnsupportedMediaType, "Content-Type %q: want application/json", r.Header.Get("Content-Type"))
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
