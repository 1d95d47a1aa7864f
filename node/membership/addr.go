package membership

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
)

// Advertiser decides what a node advertises for each listener. With
// Config.Advertise: that host with each listener's bound port (resolved to
// an IP, but kept as a name for Raft). Without it: the bound addresses,
// except that a listener bound to every address advertises the IP gossip
// advertises (the gossip bind IP, or the first private IP when gossip too
// binds every address: memberlist's own pick). So all four addresses of a
// node name one host, and an unspecified host ([::]:9090, which a peer
// would take for itself) is never gossiped.
type Advertiser struct {
	name string // Config.Advertise as given ("" when unset)
	ip   string // what name resolved to ("" when unset)
	host string // the IP that stands for an unspecified listen host ("" if none was found)
}

// NewAdvertiser resolves advertise (Config.Advertise: a name is retried
// until resolveTimeout passes) or, without it, finds the host IP for
// gossip bound at gossipAddr.
func NewAdvertiser(advertise, gossipAddr string, resolveTimeout time.Duration, log *slog.Logger) (Advertiser, error) {
	a := Advertiser{name: advertise}
	if a.name != "" {
		ip, err := resolveHost(a.name, resolveTimeout, log)
		if err != nil {
			return a, err
		}
		a.ip, a.host = ip, ip
		return a, nil
	}
	g, _, err := net.SplitHostPort(gossipAddr)
	if err != nil {
		return a, fmt.Errorf("membership: gossip address: %w", err)
	}
	if !unspecified(g) {
		a.host = g
		return a, nil
	}
	ip, err := sockaddr.GetPrivateIP()
	if err != nil {
		return a, fmt.Errorf("membership: finding a private IP to advertise: %w", err)
	}
	a.host = ip // "" when there is none
	return a, nil
}

// Addr is what to advertise for the gRPC or HTTP listener bound at bound
// (host:port, the real port).
func (a Advertiser) Addr(bound string) string {
	host, port, err := net.SplitHostPort(bound)
	switch {
	case err != nil:
		return bound
	case a.ip != "":
		return net.JoinHostPort(a.ip, port)
	case unspecified(host) && a.host != "":
		return net.JoinHostPort(a.host, port)
	}
	return bound
}

// GossipIP is the IP memberlist advertises ("" lets memberlist decide:
// the bind address, or the first private IP when it binds every address).
func (a Advertiser) GossipIP() string { return a.ip }

// Raft is the Raft advertise address for the listen address raftAddr
// (its port may be 0: the bound port), "" for the bound address. A name
// stays a name.
func (a Advertiser) Raft(raftAddr string) (string, error) {
	host, port, err := net.SplitHostPort(raftAddr)
	if err != nil {
		return "", err
	}
	switch {
	case a.name != "":
		return net.JoinHostPort(a.name, port), nil
	case !unspecified(host):
		return "", nil
	case a.host != "":
		return net.JoinHostPort(a.host, port), nil
	}
	return "", fmt.Errorf("membership: raft address %q listens on every address and no private IP was found: set Advertise (--advertise)", raftAddr)
}

func unspecified(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// resolveHost returns host's IP (the first IPv4 address, else the first),
// retrying a name every half second until wait passes.
func resolveHost(host string, wait time.Duration, log *slog.Logger) (string, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip.String(), nil
	}
	deadline := time.Now().Add(wait)
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		cancel()
		if err == nil && len(ips) > 0 {
			pick := ips[0].IP
			for _, ip := range ips {
				if ip.IP.To4() != nil {
					pick = ip.IP
					break
				}
			}
			return pick.String(), nil
		}
		if err == nil {
			err = fmt.Errorf("no addresses")
		}
		if !time.Now().Before(deadline) {
			return "", fmt.Errorf("membership: resolving advertise host %q: %w", host, err)
		}
		if attempt == 0 {
			log.Warn("advertise host does not resolve yet; retrying", "host", host, "err", err, "for", wait)
		}
		time.Sleep(500 * time.Millisecond) // retry pace; New has no context to wait on
	}
}

func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, err
	}
	return h, port, nil
}
