package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
	"github.com/weirlimit/weir/node/keyringapi"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/ring"
)

// Tests of the gossip keyring: who may join, who may call Peer, and key
// rotation on a live cluster.

func withKeys(keys ...[]byte) func(*node.Config) {
	return func(cfg *node.Config) { cfg.GossipKeys = keys }
}

// raftIDs lists the ids in n's Raft configuration.
func raftIDs(t *testing.T, n *node.Node) []string {
	t.Helper()
	servers, err := n.Store().Configuration()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range servers {
		ids = append(ids, s.ID)
	}
	sort.Strings(ids)
	return ids
}

// A process that reaches the gossip port without the cluster's key (no
// key, another key, the key under another cluster name) does not join:
// every node keeps its three members, its ring and its Raft
// configuration, and the counters are as they were. A node with the key
// then joins (the refusals are not a broken cluster).
func TestGossipKeyKeepsOutsidersOut(t *testing.T) {
	k1 := peerauth.GenerateKey()
	c := wrapCluster(t, testcluster.NewWith(t, 3, testcluster.Options{Config: withKeys(k1)}))
	c.ApplyRules(exactRules)
	keys := []string{"apikey:o1", "apikey:o2", "apikey:o3", "apikey:o4", "apikey:o5"}
	remaining := map[string]int64{}
	for _, k := range keys {
		remaining[k] = c.checkOnce(c.Nodes[0], k, "exact", 3).Remaining
	}
	ringBefore := c.Nodes[0].Members().RingVersion
	raftBefore := raftIDs(t, c.Nodes[0])
	if len(raftBefore) != 3 {
		t.Fatalf("raft configuration %v, want 3 servers", raftBefore)
	}

	var outsiders []*node.Node
	for _, o := range []struct {
		id, cluster string
		keys        [][]byte
	}{
		{"nokey", testcluster.Name, nil},
		{"wrongkey", testcluster.Name, [][]byte{peerauth.GenerateKey()}},
		{"othercluster", "other", [][]byte{k1}},
	} {
		cfg := testcluster.Config(t, o.id)
		cfg.ClusterName, cfg.GossipKeys = o.cluster, o.keys
		cfg.Join = []string{c.Nodes[0].GossipAddr(), c.Nodes[1].GossipAddr()}
		nd, err := node.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nd.Close() })
		if err := nd.Start(); err != nil {
			t.Fatal(err)
		}
		outsiders = append(outsiders, nd)
	}
	// Several join attempts and gossip rounds: nothing may change.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range c.Nodes {
			if k := testcluster.InRing(n); k != 3 {
				t.Fatalf("%s sees %d members with outsiders knocking, want 3: %+v", n.ID(), k, n.Members().Members)
			}
		}
		for _, o := range outsiders {
			if k := testcluster.InRing(o); k > 1 {
				t.Fatalf("outsider %s sees %d members, want none but itself", o.ID(), k)
			}
		}
		time.Sleep(100 * time.Millisecond) // sampling a window, not waiting for a state
	}
	for _, n := range c.Nodes {
		if v := n.Members().RingVersion; v != ringBefore {
			t.Errorf("%s ring version %d, was %d", n.ID(), v, ringBefore)
		}
		if ids := raftIDs(t, n); !slices.Equal(ids, raftBefore) {
			t.Errorf("%s raft configuration %v, was %v", n.ID(), ids, raftBefore)
		}
	}
	for _, k := range keys {
		if r := c.checkOnce(c.Nodes[1], k, "exact", 1); r.Remaining != remaining[k]-1 {
			t.Errorf("%s: remaining %d after one more token, want %d", k, r.Remaining, remaining[k]-1)
		}
	}

	c.Add() // with the key (the cluster's Options.Config): joins
	c.WaitStable(4)
	testwait.For(t, 10*time.Second, "the keyed node a Raft member", func() error {
		if ids := raftIDs(t, c.Nodes[0]); len(ids) != 4 {
			return fmt.Errorf("raft configuration %v", ids)
		}
		return nil
	})
}

// outsiderPeer dials addr's Peer service as an outsider would, with opts
// (per-RPC credentials or none).
func outsiderPeer(t *testing.T, addr string, opts ...grpc.DialOption) weirv1.PeerClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return weirv1.NewPeerClient(cc)
}

func keyring(t *testing.T, keys ...[]byte) *memberlist.Keyring {
	t.Helper()
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// Peer calls (Handoff, Replicate, Forward) without a valid node proof are
// refused (probe findings 1 and 3): no proof, a proof from another key,
// from another cluster name, or a stale one. Nothing moves: every key is
// still answered by its owner. A valid proof gets through to the checks
// behind it: a Replicate naming a partition out of range is refused, and
// a node may not speak for another.
func TestPeerServiceRefusesOutsiders(t *testing.T) {
	k1 := peerauth.GenerateKey()
	c := wrapCluster(t, testcluster.NewWith(t, 3, testcluster.Options{Config: withKeys(k1)}))
	c.ApplyRules(exactRules)
	const victim = "apikey:victim"
	spent := c.checkOnce(c.Nodes[0], victim, "exact", 40).Remaining

	stale := peerauth.New(testcluster.Name, keyring(t, k1))
	stale.Now = func() time.Time { return time.Now().Add(-2 * peerauth.DefaultWindow) }
	outsiders := map[string][]grpc.DialOption{
		"no proof":      nil,
		"another key":   {grpc.WithPerRPCCredentials(peerauth.New(testcluster.Name, keyring(t, peerauth.GenerateKey())).Credentials("evil"))},
		"other cluster": {grpc.WithPerRPCCredentials(peerauth.New("other", keyring(t, k1)).Credentials("evil"))},
		"stale proof":   {grpc.WithPerRPCCredentials(stale.Credentials("evil"))},
	}
	all := make([]uint32, 271)
	for i := range all {
		all[i] = uint32(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for name, opts := range outsiders {
		for _, n := range c.Nodes {
			p := outsiderPeer(t, n.GRPCAddr(), opts...)
			_, err := p.Handoff(ctx, &weirv1.HandoffRequest{To: "evil", Partitions: all})
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s: Handoff on %s: %v, want Unauthenticated", name, n.ID(), err)
			}
			_, err = p.Replicate(ctx, &weirv1.ReplicateRequest{From: "evil", States: []*weirv1.CounterState{{Partition: 1, Id: 1, A: 1}}})
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s: Replicate on %s: %v, want Unauthenticated", name, n.ID(), err)
			}
			_, err = p.Forward(ctx, &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: victim, Rule: "exact", Cost: 1}}})
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s: Forward on %s: %v, want Unauthenticated", name, n.ID(), err)
			}
			st, err := p.ReplicateStream(ctx)
			if err == nil {
				_ = st.Send(&weirv1.ReplicateRequest{From: "evil"})
				_, err = st.Recv()
			}
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s: ReplicateStream on %s: %v, want Unauthenticated", name, n.ID(), err)
			}
		}
	}
	for _, n := range c.Nodes {
		if v := refusals(t, n, "peer_call"); v < 16 {
			t.Errorf("%s counted %v refused peer calls, want at least 16", n.ID(), v)
		}
	}
	if r := c.checkOnce(c.Nodes[2], victim, "exact", 1); r.Remaining != spent-1 {
		t.Errorf("victim: remaining %d, want %d (its counter moved or reset)", r.Remaining, spent-1)
	}
	for i := range 30 {
		c.checkOnce(c.Nodes[i%3], fmt.Sprintf("apikey:k%d", i), "exact", 1) // fails the test on an error (503 owner unreachable)
	}

	// A node's proof passes; the partition range check stands behind it.
	member := outsiderPeer(t, c.Nodes[0].GRPCAddr(), grpc.WithPerRPCCredentials(peerauth.New(testcluster.Name, keyring(t, k1)).Credentials("n2")))
	_, err := member.Replicate(ctx, &weirv1.ReplicateRequest{From: "n2", States: []*weirv1.CounterState{{Partition: 1 << 20, Id: 7, A: 1}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Replicate of partition 1<<20 with a valid proof: %v, want InvalidArgument", err)
	}
	// A node speaks for itself only.
	_, err = member.Replicate(ctx, &weirv1.ReplicateRequest{From: "n3", States: []*weirv1.CounterState{{Partition: 1, Id: 7, A: 1}}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Replicate from n2 as n3: %v, want PermissionDenied", err)
	}
	_, err = member.Handoff(ctx, &weirv1.HandoffRequest{To: "evil", Partitions: all})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Handoff from n2 for evil: %v, want PermissionDenied", err)
	}
}

// keyringCall posts one keyring change (or lists with op "") to n.
func keyringCall(t *testing.T, n *node.Node, token, op string, key []byte) (int, keyringapi.Answer) {
	t.Helper()
	method, path := http.MethodGet, "/v1/keyring"
	var body io.Reader
	if op != "" {
		method, path = http.MethodPost, "/v1/keyring/"+op
		b, _ := json.Marshal(map[string]string{"key": peerauth.EncodeKey(key)})
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+n.HTTPAddr()+path, body)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a keyringapi.Answer
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("keyring %s: %d %s", op, resp.StatusCode, raw)
	}
	return resp.StatusCode, a
}

// Rotating the gossip key (install, use, remove) through one node while
// checks run on every node: every step reaches every member, no check
// fails or is lost (the counter holds each one), no member drops out of
// any ring, and each node's data dir holds the new keyring.
func TestGossipKeyRotationWithChecksRunning(t *testing.T) {
	const token = "rotate-me"
	k1, k2 := peerauth.GenerateKey(), peerauth.GenerateKey()
	var mu sync.Mutex
	dirs := map[string]string{}
	c := wrapCluster(t, testcluster.NewWith(t, 3, testcluster.Options{Config: func(cfg *node.Config) {
		cfg.GossipKeys, cfg.AdminToken = [][]byte{k1}, token
		mu.Lock()
		dirs[cfg.ID] = cfg.DataDir
		mu.Unlock()
	}}))
	applyWithToken(t, c.Cluster, token, `
rules:
  - {id: big, match: {route: /big}, key: apikey, rate: 1, period: 1h, burst: 100000}
`)

	var stop atomic.Bool
	var done sync.WaitGroup
	var decided, failed, minRing atomic.Int64
	minRing.Store(3)
	done.Add(1)
	go func() {
		defer done.Done()
		end := time.Now().Add(60 * time.Second)
		for i := 0; i < 50000 && !stop.Load() && time.Now().Before(end); i++ {
			n := c.Nodes[i%3]
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			resp, err := c.limiter(n).Check(ctx, &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: "apikey:rot", Rule: "big", Cost: 1}}})
			cancel()
			if err != nil || resp.Results[0].ErrorCode != 0 || !resp.Results[0].Allowed {
				failed.Add(1)
				continue
			}
			decided.Add(1)
			if k := int64(testcluster.InRing(n)); k < minRing.Load() {
				minRing.Store(k)
			}
		}
	}()

	if code, a := keyringCall(t, c.Nodes[0], "", "install", k2); code != http.StatusUnauthorized {
		t.Fatalf("install without the token: %d %+v", code, a)
	}
	if code, a := keyringCall(t, c.Nodes[0], token, "use", k2); code != http.StatusConflict {
		t.Fatalf("use of a key no member holds: %d %+v, want 409", code, a)
	}
	fp1, fp2 := peerauth.Fingerprint(k1), peerauth.Fingerprint(k2)
	steps := []struct {
		via, op string
		key     []byte
		primary string
		keys    []string
	}{
		{"install", "install", k2, fp1, sortedPair(fp1, fp2)},
		{"use", "use", k2, fp2, sortedPair(fp1, fp2)},
		{"remove", "remove", k1, fp2, []string{fp2}},
	}
	for i, s := range steps {
		code, a := keyringCall(t, c.Nodes[i%3], token, s.op, s.key)
		if code != http.StatusOK || len(a.Members) != 3 {
			t.Fatalf("%s: %d %+v", s.op, code, a)
		}
		time.Sleep(time.Second) // checks and gossip rounds between the steps
		_, list := keyringCall(t, c.Nodes[(i+1)%3], token, "", nil)
		if len(list.Members) != 3 {
			t.Fatalf("after %s: list %+v", s.op, list)
		}
		for _, m := range list.Members {
			if m.Error != "" || m.Primary != s.primary || !slices.Equal(m.Keys, s.keys) {
				t.Errorf("after %s: %s has primary %s keys %v (%s), want %s %v", s.op, m.Node, m.Primary, m.Keys, m.Error, s.primary, s.keys)
			}
		}
	}
	// Gossip on k2 alone for a few probe rounds.
	time.Sleep(2 * time.Second)
	stop.Store(true)
	done.Wait()
	if failed.Load() != 0 || decided.Load() == 0 {
		t.Errorf("%d checks failed, %d decided; want none failed", failed.Load(), decided.Load())
	}
	t.Logf("%d checks decided during the rotation", decided.Load())
	if minRing.Load() != 3 {
		t.Errorf("a node saw %d members during the rotation, want 3 throughout", minRing.Load())
	}
	c.WaitStable(3)
	if r := c.checkOnce(c.Nodes[0], "apikey:rot", "big", 1); r.Remaining != 100000-decided.Load()-1 {
		t.Errorf("remaining %d after %d checks, want %d: checks lost", r.Remaining, decided.Load()+1, 100000-decided.Load()-1)
	}
	for id, dir := range dirs {
		keys, err := peerauth.ReadKeyringFile(filepath.Join(dir, "gossip-keyring"))
		if err != nil || len(keys) != 1 || !bytes.Equal(keys[0], k2) {
			t.Errorf("%s persisted keyring %x, %v; want k2 alone", id, keys, err)
		}
	}
	// A restart keeps the rotated key: n3, restarted with its data dir and
	// the old key configured, rejoins on the new one.
	c.Kill(2)
	cfg := testcluster.Config(t, "n3")
	cfg.DataDir, cfg.GossipKeys, cfg.AdminToken = dirs["n3"], [][]byte{k1}, token
	cfg.Join = []string{c.Nodes[0].GossipAddr()}
	c.Start(cfg)
	c.WaitStable(3)
}

func sortedPair(a, b string) []string {
	s := []string{a, b}
	sort.Strings(s)
	return s
}

// applyWithToken writes a rules file through the first node with the admin
// token and waits until every node has it.
func applyWithToken(t *testing.T, c *testcluster.Cluster, token, yaml string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+c.Nodes[0].HTTPAddr()+"/v1/rules:apply", bytes.NewBufferString(yaml))
	req.Header.Set("Content-Type", "application/yaml")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Version uint64 `json:"version"`
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil {
		t.Fatalf("apply: %d %s", resp.StatusCode, b)
	}
	testwait.For(t, 10*time.Second, "the rules on every node", func() error {
		for _, n := range c.Live() {
			if s := n.Store().Current(); s == nil || s.Version < out.Version {
				return fmt.Errorf("%s has not applied version %d", n.ID(), out.Version)
			}
		}
		return nil
	})
}

// rawMeta is a gossip delegate that announces fixed metadata.
type rawMeta struct{ meta []byte }

func (d rawMeta) NodeMeta(int) []byte                  { return d.meta }
func (rawMeta) NotifyMsg([]byte)                       {}
func (rawMeta) GetBroadcasts(int, int) [][]byte        { return nil }
func (rawMeta) LocalState(bool) []byte                 { return nil }
func (rawMeta) MergeRemoteState(buf []byte, join bool) {}

// A gossip member that holds the key but carries no valid member proof in
// its metadata (a stock memberlist announcing Weir's addresses) is in the
// gossip but never in a ring nor the Raft configuration.
func TestMemberWithoutProofIgnored(t *testing.T) {
	k1 := peerauth.GenerateKey()
	c := wrapCluster(t, testcluster.NewWith(t, 3, testcluster.Options{Config: withKeys(k1)}))
	raftBefore := raftIDs(t, c.Nodes[0])
	// Both gossip the cluster's ring shape: refused for the missing or
	// bad proof, not for another shape (refused earlier, uncounted).
	shape := strconv.Quote(ring.DefaultConfig().Shape())
	for name, meta := range map[string]string{
		"noproof":  `{"g":"127.0.0.1:1","h":"127.0.0.1:2","r":"127.0.0.1:3","s":` + shape + `}`,
		"badproof": `{"g":"127.0.0.1:1","h":"127.0.0.1:2","r":"127.0.0.1:3","b":7,"p":"AAAAAAAAAAAAAAAAAAAAAA","s":` + shape + `}`,
	} {
		mc := memberlist.DefaultLANConfig()
		mc.Name, mc.BindAddr, mc.BindPort, mc.AdvertisePort = name, "127.0.0.1", 0, 0
		mc.Label, mc.Keyring = testcluster.Name, keyring(t, k1)
		mc.Delegate = rawMeta{[]byte(meta)}
		mc.LogOutput = io.Discard
		ml, err := memberlist.Create(mc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ml.Shutdown() })
		if _, err := ml.Join([]string{c.Nodes[0].GossipAddr()}); err != nil {
			t.Fatalf("%s: gossip join with the key: %v", name, err)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range c.Nodes {
			if k := testcluster.InRing(n); k != 3 {
				t.Fatalf("%s has %d members in its ring, want 3: %+v", n.ID(), k, n.Members().Members)
			}
		}
		time.Sleep(100 * time.Millisecond) // sampling a window, not waiting for a state
	}
	for _, n := range c.Nodes {
		if ids := raftIDs(t, n); !slices.Equal(ids, raftBefore) {
			t.Errorf("%s raft configuration %v, was %v", n.ID(), ids, raftBefore)
		}
	}
	if v := refusals(t, c.Nodes[0], "gossip_member"); v < 2 {
		t.Errorf("n1 counted %v unproven gossip members, want at least 2", v)
	}
}

// refusals reads weir_node_proof_refusals_total{kind} from n's /metrics.
func refusals(t *testing.T, n *node.Node, kind string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	prefix := `weir_node_proof_refusals_total{kind="` + kind + `"} `
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", prefix)
	return 0
}
