package keyringapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/weirlimit/weir/internal/httpjson"
	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/api"
	"github.com/weirlimit/weir/node/authz"
	"github.com/weirlimit/weir/node/clusterview"
)

// Member is one member's keyring: key fingerprints
// (peerauth.Fingerprint), never the keys.
type Member struct {
	Node    string   `json:"node"`
	Primary string   `json:"primary,omitempty"`
	Keys    []string `json:"keys,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// Answer is the answer of every keyring endpoint.
type Answer struct {
	Op      string   `json:"op,omitempty"`
	Key     string   `json:"key,omitempty"` // fingerprint
	Members []Member `json:"members"`
	// Error and Code are set when the change failed on some member.
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}

// Keyring is this node's gossip keyring and node proofs (node/security's
// Guard).
type Keyring interface {
	// Keys is the keyring (a limit.ErrInvalid error without one).
	Keys() (primary []byte, keys [][]byte, err error)
	// ChangeKeyring applies and persists one change.
	ChangeKeyring(op string, key []byte) error
	// Authenticator makes and checks the proofs (nil without a keyring).
	Authenticator() *peerauth.Authenticator
	// PeerTLS is the client TLS of calls to members (nil without TLS).
	PeerTLS() *tls.Config
}

// Members lists the live members (membership).
type Members interface {
	Live() map[string]clusterview.Member
}

// Admins admits the admin role (node/authz's Authorizer).
type Admins interface {
	RequireAdmin(c authz.Caller, what string) error
}

// Config is what the API needs.
type Config struct {
	Self    string // this node's id
	Keyring Keyring
	Members Members
	Admins  Admins
}

// API serves the keyring endpoints.
type API struct{ cfg Config }

// New returns the keyring API.
func New(cfg Config) *API { return &API{cfg: cfg} }

// ops are the keyring changes.
var ops = map[string]bool{"install": true, "use": true, "remove": true}

const (
	bodyMax = 4 << 10
	timeout = 5 * time.Second
)

// Register adds the keyring endpoints to mux.
func (a *API) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/keyring", a.list)
	mux.HandleFunc("POST /v1/keyring/{op}", a.change)
}

func (a *API) list(w http.ResponseWriter, r *http.Request) {
	if a.fromNode(r, nil) {
		m, err := a.local()
		if err != nil {
			writeError(w, err)
			return
		}
		httpjson.Write(w, http.StatusOK, Answer{Members: []Member{m}})
		return
	}
	if err := a.cfg.Admins.RequireAdmin(authz.FromContext(r.Context()), "keyring lists"); err != nil {
		writeError(w, err)
		return
	}
	if _, _, err := a.cfg.Keyring.Keys(); err != nil {
		writeError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, Answer{Members: a.listAll(r.Context())})
}

func (a *API) change(w http.ResponseWriter, r *http.Request) {
	op := r.PathValue("op")
	if r.Header.Get(peerauth.MetadataKey) != "" && a.cfg.Keyring.Authenticator() != nil {
		a.memberChange(w, r, op)
		return
	}
	// An admin: the role first, the body after.
	if err := a.cfg.Admins.RequireAdmin(authz.FromContext(r.Context()), "keyring changes"); err != nil {
		writeError(w, err)
		return
	}
	if !ops[op] {
		writeError(w, limit.Errorf(limit.ErrNotFound, "no keyring operation %q: want install, use or remove", op))
		return
	}
	if err := api.RequireType(r, "application/json"); err != nil {
		writeError(w, err)
		return
	}
	var body struct {
		Key string `json:"key"`
	}
	if err := readBody(w, r, &body); err != nil {
		writeError(w, err)
		return
	}
	key, err := peerauth.ParseKey(body.Key)
	if err != nil {
		writeError(w, limit.Errorf(limit.ErrInvalid, "%v", err))
		return
	}
	if _, _, err := a.cfg.Keyring.Keys(); err != nil {
		writeError(w, err)
		return
	}
	ans, err := a.rotate(r.Context(), op, key)
	if err != nil {
		code, name := api.HTTPStatus(err)
		ans.Error, ans.Code = err.Error(), name
		httpjson.Write(w, code, ans)
		return
	}
	httpjson.Write(w, http.StatusOK, ans)
}

// memberChange is one member's part of a rotation, asked by the node an
// admin asked: the proof is bound to the operation and the body, and the
// key travels sealed under the current keyring.
func (a *API) memberChange(w http.ResponseWriter, r *http.Request, op string) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, bodyMax))
	if err != nil || !a.fromNode(r, b) {
		writeError(w, limit.Errorf(limit.ErrUnauthenticated, "keyring: no valid node proof for this request"))
		return
	}
	var body struct {
		Sealed string `json:"sealed"`
	}
	if !ops[op] || json.Unmarshal(b, &body) != nil {
		writeError(w, limit.Errorf(limit.ErrInvalid, "keyring: bad member request"))
		return
	}
	key, err := a.cfg.Keyring.Authenticator().Open(body.Sealed)
	if err != nil {
		writeError(w, limit.Errorf(limit.ErrInvalid, "keyring: %v", err))
		return
	}
	if err := a.cfg.Keyring.ChangeKeyring(op, key); err != nil {
		writeError(w, err)
		return
	}
	m, err := a.local()
	if err != nil {
		writeError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, Answer{Op: op, Key: peerauth.Fingerprint(key), Members: []Member{m}})
}

// purpose is what a member call's proof is bound to.
func purpose(method, path string, body []byte) string {
	d := sha256.Sum256(body)
	return method + " " + path + " " + hex.EncodeToString(d[:])
}

// fromNode reports whether r carries a node proof bound to it (body: the
// request body read).
func (a *API) fromNode(r *http.Request, body []byte) bool {
	tok := r.Header.Get(peerauth.MetadataKey)
	auth := a.cfg.Keyring.Authenticator()
	if tok == "" || auth == nil {
		return false
	}
	_, ok := auth.VerifyTokenFor(tok, purpose(r.Method, r.URL.Path, body))
	return ok
}

func readBody(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, bodyMax))
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		return limit.Errorf(limit.ErrInvalid, "body: want {\"key\": \"<base64 key>\"}")
	}
	return nil
}

// local is this node's keyring as a Member.
func (a *API) local() (Member, error) {
	primary, keys, err := a.cfg.Keyring.Keys()
	if err != nil {
		return Member{}, err
	}
	m := Member{Node: a.cfg.Self, Primary: peerauth.Fingerprint(primary)}
	for _, k := range keys {
		m.Keys = append(m.Keys, peerauth.Fingerprint(k))
	}
	sort.Strings(m.Keys)
	return m, nil
}

// localMember is local for a fan-out: an error in the Member.
func (a *API) localMember() Member {
	m, err := a.local()
	if err != nil {
		return Member{Node: a.cfg.Self, Error: err.Error()}
	}
	return m
}

// listAll asks every live member for its keyring.
func (a *API) listAll(ctx context.Context) []Member {
	return a.eachMember(ctx, func(ctx context.Context, id string, m clusterview.Member) Member {
		return a.ask(ctx, id, m, http.MethodGet, "/v1/keyring", nil)
	})
}

// ask makes one member's call, this node's own answered locally.
func (a *API) ask(ctx context.Context, id string, m clusterview.Member, method, path string, body []byte) Member {
	if id == a.cfg.Self {
		return a.localMember()
	}
	var ans Answer
	if err := a.call(ctx, m.HTTP, method, path, body, &ans); err != nil {
		return Member{Node: id, Error: err.Error()}
	}
	if len(ans.Members) != 1 {
		return Member{Node: id, Error: "unexpected answer"}
	}
	return ans.Members[0]
}

// rotate checks that op is safe for every live member (use: each holds the
// key; remove: none uses it as its primary), then applies it here and on
// every other live member.
func (a *API) rotate(ctx context.Context, op string, key []byte) (Answer, error) {
	fp := peerauth.Fingerprint(key)
	ans := Answer{Op: op, Key: fp}
	if op != "install" {
		for _, m := range a.listAll(ctx) {
			switch {
			case m.Error != "":
				return ans, limit.Errorf(limit.ErrUnavailable, "member %s did not list its keyring (%s); nothing changed", m.Node, m.Error)
			case op == "use" && !slices.Contains(m.Keys, fp):
				return ans, limit.Errorf(limit.ErrConflict, "member %s has not installed key %s; run `weir keyring install` first; nothing changed", m.Node, fp)
			case op == "remove" && m.Primary == fp:
				return ans, limit.Errorf(limit.ErrConflict, "member %s still uses key %s as its primary; run `weir keyring use` with another key first; nothing changed", m.Node, fp)
			}
		}
	}
	if err := a.cfg.Keyring.ChangeKeyring(op, key); err != nil {
		return ans, err
	}
	body, _ := json.Marshal(map[string]string{"sealed": a.cfg.Keyring.Authenticator().Seal(key)})
	ans.Members = a.eachMember(ctx, func(ctx context.Context, id string, m clusterview.Member) Member {
		return a.ask(ctx, id, m, http.MethodPost, "/v1/keyring/"+op, body)
	})
	var why []string
	for _, m := range ans.Members {
		if m.Error != "" {
			why = append(why, m.Node+": "+m.Error)
		}
	}
	if len(why) > 0 {
		return ans, limit.Errorf(limit.ErrUnavailable, "keyring %s of key %s failed on %d of %d members (%s); run it again once they answer", op, fp, len(why), len(ans.Members), strings.Join(why, "; "))
	}
	return ans, nil
}

// eachMember calls f for every live member at once and lists the results
// by node id.
func (a *API) eachMember(ctx context.Context, f func(ctx context.Context, id string, m clusterview.Member) Member) []Member {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	members := a.cfg.Members.Live()
	if _, ok := members[a.cfg.Self]; !ok {
		members[a.cfg.Self] = clusterview.Member{ID: a.cfg.Self}
	}
	out := make([]Member, 0, len(members))
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

// call makes one member-local keyring call with this node's proof.
func (a *API) call(ctx context.Context, addr, method, path string, body []byte, out *Answer) error {
	if addr == "" {
		return errors.New("no HTTP address in gossip")
	}
	scheme, tr := "http://", &http.Transport{DisableKeepAlives: true}
	if c := a.cfg.Keyring.PeerTLS(); c != nil { // members' HTTP is HTTPS: present this node's certificate
		scheme, tr.TLSClientConfig = "https://", c
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+addr+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set(peerauth.MetadataKey, a.cfg.Keyring.Authenticator().TokenFor(a.cfg.Self, purpose(method, path, body)))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e httpjson.ErrorBody
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return errors.New(e.Error)
		}
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return json.Unmarshal(b, out)
}

// writeError answers err as an Answer with no members, its status and
// code picked by api.HTTPStatus (ErrForbidden is 403).
func writeError(w http.ResponseWriter, err error) {
	code, name := api.HTTPStatus(err)
	httpjson.Write(w, code, Answer{Members: []Member{}, Error: err.Error(), Code: name})
}
