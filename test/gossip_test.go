package test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/node"
)

// Tests that gossip cannot be forged (issue 25, finding 1).

// forgedDead is a memberlist `dead` message about member id, as a stranger
// would send it in one UDP packet: the cluster's label header, message
// type 5 (deadMsg), then the msgpack map {Incarnation: 2^32-1, Node: id,
// From: "x"}. The highest incarnation makes the victim's refutation wrap
// to 0, which every member ignores.
func forgedDead(t *testing.T, label, id string) []byte {
	t.Helper()
	str := func(b []byte, s string) []byte { return append(append(b, 0xa0|byte(len(s))), s...) } // fixstr
	msg := []byte{5, 0x83}                                                                       // deadMsg, fixmap of 3
	msg = str(msg, "Incarnation")
	msg = binary.BigEndian.AppendUint32(append(msg, 0xce), 1<<32-1) // uint32
	msg = str(str(msg, "Node"), id)
	msg = str(str(msg, "From"), "x")
	pkt, err := memberlist.AddLabelHeaderToPacket(msg, label)
	if err != nil {
		t.Fatal(err)
	}
	return pkt
}

// sendUDP sends pkt to the gossip address of each node.
func sendUDP(t *testing.T, pkt []byte, to ...*node.Node) {
	t.Helper()
	for _, n := range to {
		conn, err := net.Dial("udp", n.GossipAddr())
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Write(pkt)
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// inRing reports whether n's ring holds member id.
func inRing(n *node.Node, id string) bool {
	for _, m := range n.Members().Members {
		if m.ID == id {
			return m.State == "alive" || m.State == "suspect"
		}
	}
	return false
}

// A forged `dead` packet about n2, sent to n1 and n3 of a TLS cluster with
// a gossip key (the configuration docs/security.md and the README give),
// takes n2 out of no ring: the packet is not encrypted under the key, so
// memberlist drops it. The same packets sent to a TLS cluster without a
// key (what the README showed before; still allowed on loopback) take n2
// out of the others' rings: the control that the packet is a working
// forgery.
func TestForgedGossipDeadIgnoredWithKey(t *testing.T) {
	cluster := testcluster.Name // the cluster name, and the gossip label
	attack := func(c *testcluster.Cluster) {
		sendUDP(t, forgedDead(t, cluster, "n2"), c.Nodes[0], c.Nodes[2])
	}
	others := func(c *testcluster.Cluster) []*node.Node { return []*node.Node{c.Nodes[0], c.Nodes[2]} }

	keyless := testcluster.NewWith(t, 3, testcluster.Options{TLS: true})
	start := time.Now()
	var took time.Duration
	deadline := start.Add(30 * time.Second)
	for took == 0 {
		if time.Now().After(deadline) {
			t.Fatal("control: the forged packet did not take n2 out of a keyless TLS cluster's rings in 30 s; the forgery is broken, so the keyed case proves nothing")
		}
		attack(keyless)
		time.Sleep(100 * time.Millisecond) // packets are resent until they work (UDP may drop one)
		if !inRing(keyless.Nodes[0], "n2") || !inRing(keyless.Nodes[2], "n2") {
			took = time.Since(start)
		}
	}
	t.Logf("keyless TLS cluster: n2 out of a ring %v after the first forged packet", took.Round(time.Millisecond))
	keyless.Close()

	key := peerauth.GenerateKey()
	keyed := testcluster.NewWith(t, 3, testcluster.Options{TLS: true, Config: func(cfg *node.Config) {
		cfg.GossipKeys = [][]byte{key}
	}})
	// Watch ten times as long as the forgery needed on the keyless
	// cluster, and at least 5 s, resending all along.
	window := max(10*took, 5*time.Second)
	for end := time.Now().Add(window); time.Now().Before(end); {
		attack(keyed)
		time.Sleep(100 * time.Millisecond)
		for _, n := range others(keyed) {
			if !inRing(n, "n2") {
				t.Fatalf("%s took n2 out of its ring after forged dead packets, with a gossip key", n.ID())
			}
		}
	}
	keyed.WaitStable(3)
}

// A TLS node told to gossip on an address other hosts reach, without a
// gossip key, refuses to start and says how to make one; on loopback it
// starts.
func TestGossipBeyondLoopbackNeedsKey(t *testing.T) {
	pki := testcluster.NewPKI(t, testcluster.Name)
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		cfg := testcluster.Config(t, "n1")
		cfg.TLS = pki.Files(tlsconf.RoleNode, "n1", time.Hour)
		cfg.GossipAddr = addr
		n, err := node.New(cfg)
		if err == nil {
			n.Close()
			t.Fatalf("gossip %s, TLS, no key: started", addr)
		}
		if !errors.Is(err, node.ErrConfig) || !strings.Contains(err.Error(), "needs a gossip key") || !strings.Contains(err.Error(), "weir keyring generate --out FILE") {
			t.Errorf("gossip %s, TLS, no key: %v; want a config error saying how to make a key", addr, err)
		}
	}
	cfg := testcluster.Config(t, "n1")
	cfg.TLS = pki.Files(tlsconf.RoleNode, "n1", time.Hour)
	cfg.GossipAddr = "0.0.0.0:0"
	cfg.GossipKeys = [][]byte{peerauth.GenerateKey()}
	n, err := node.New(cfg)
	if err != nil {
		t.Fatalf("gossip 0.0.0.0, TLS, with a key: %v", err)
	}
	n.Close()
	cfg = testcluster.Config(t, "n1")
	cfg.TLS = pki.Files(tlsconf.RoleNode, "n1", time.Hour)
	n, err = node.New(cfg) // loopback
	if err != nil {
		t.Fatalf("gossip on loopback, TLS, no key: %v", err)
	}
	n.Close()
}

// A TLS cluster that ran without a gossip key moves onto one with the
// three rounds of rolling restarts docs/operations.md gives (--gossip-upgrade
// plain, then encrypt, then none): after every restart each node sees all
// three members alive, the restarted one at its new address (keyed and
// keyless nodes gossip with each other throughout), and at the end forged
// dead packets are dropped. (Restarting straight onto the key instead
// leaves the restarted node dead to the others.)
func TestKeylessTLSClusterMovesOntoKey(t *testing.T) {
	key := peerauth.GenerateKey()
	var mu sync.Mutex
	dirs := map[string]string{}
	c := testcluster.NewWith(t, 3, testcluster.Options{TLS: true, Config: func(cfg *node.Config) {
		mu.Lock()
		defer mu.Unlock()
		if dirs[cfg.ID] == "" {
			dirs[cfg.ID] = cfg.DataDir
		}
	}})
	at := map[string]int{"n1": 0, "n2": 1, "n3": 2} // index in c.Nodes
	for _, round := range []string{node.GossipUpgradePlain, node.GossipUpgradeEncrypt, ""} {
		for _, id := range []string{"n1", "n2", "n3"} {
			c.Kill(at[id])
			cfg := testcluster.Config(t, id)
			cfg.DataDir, cfg.ClusterName = dirs[id], c.PKI.Cluster
			cfg.TLS = c.PKI.Files(tlsconf.RoleNode, id, time.Hour)
			cfg.GossipKeys, cfg.GossipUpgrade = [][]byte{key}, round
			cfg.Join = []string{c.Live()[0].GossipAddr()}
			n := c.Start(cfg)
			at[id] = len(c.Nodes) - 1
			testwait.For(t, 60*time.Second, fmt.Sprintf("round %q: every node to see restarted %s alive", round, id), func() error {
				for _, o := range c.Live() {
					for _, m := range o.Members().Members {
						if m.State != "alive" {
							return fmt.Errorf("%s sees %s %s", o.ID(), m.ID, m.State)
						}
						if m.ID == id && m.GossipAddr != n.GossipAddr() {
							return fmt.Errorf("%s sees %s at %s, not at %s", o.ID(), id, m.GossipAddr, n.GossipAddr())
						}
					}
					if k := testcluster.InRing(o); k != 3 {
						return fmt.Errorf("%s sees %d members", o.ID(), k)
					}
				}
				return nil
			})
		}
	}
	c.WaitStable(3)
	live := c.Live()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		sendUDP(t, forgedDead(t, c.PKI.Cluster, "n2"), live...)
		time.Sleep(100 * time.Millisecond)
		for _, n := range live {
			if !inRing(n, "n2") {
				t.Fatalf("%s took n2 out of its ring after forged dead packets, after the move onto the key", n.ID())
			}
		}
	}
}

// --gossip-upgrade takes plain or encrypt, needs TLS, and needs the key.
func TestGossipUpgradeConfig(t *testing.T) {
	pki := testcluster.NewPKI(t, testcluster.Name)
	for _, tc := range []struct {
		name, mode string
		tls, key   bool
		want       string
	}{
		{"unknown mode", "off", true, true, `want "plain" or "encrypt"`},
		{"without TLS", node.GossipUpgradePlain, false, true, "is for a TLS cluster"},
		{"without the key", node.GossipUpgradeEncrypt, true, false, "needs the gossip key"},
	} {
		cfg := testcluster.Config(t, "n1")
		cfg.GossipUpgrade = tc.mode
		if tc.tls {
			cfg.TLS = pki.Files(tlsconf.RoleNode, "n1", time.Hour)
		}
		if tc.key {
			cfg.GossipKeys = [][]byte{peerauth.GenerateKey()}
		}
		n, err := node.New(cfg)
		if err == nil {
			n.Close()
		}
		if !errors.Is(err, node.ErrConfig) || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("%s: %v; want a config error containing %q", tc.name, err, tc.want)
		}
	}
}
