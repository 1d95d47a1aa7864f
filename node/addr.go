package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
)

// advertiser decides what a node advertises for each listener. With
// Config.Advertise: that host with each listener's bound port (resolved to
// an IP, but kept as a name for Raft). Without it: the bound addresses,
// except that a listener bound to every address advertises the IP gossip
// advertises (the gossip bind IP, or the first private IP when gossip too
// binds every address: memberlist's own pick). So all four addresses of a
// node name one host, and an unspecified host ([::]:9090, which a peer
// would take for itself) is never gossiped.
type advertiser struct {
	name string // Config.Advertise as given ("" when unset)
	ip   string // what name resolved to ("" when unset)
	host string // the IP that stands for an unspecified listen host ("" if none was found)
}

// newAdvertiser resolves cfg.Advertise (a name is retried until
// cfg.ResolveTimeout passes) or, without it, finds the host IP.
func newAdvertiser(cfg Config, log *slog.Logger) (advertiser, error) {
	a := advertiser{name: cfg.Advertise}
	if a.name != "" {
		ip, err := resolveHost(a.name, cfg.ResolveTimeout, log)
		if err != nil {
			return a, err
		}
		a.ip, a.host = ip, ip
		return a, nil
	}
	g, _, err := net.SplitHostPort(cfg.GossipAddr)
	if err != nil {
		return a, fmt.Errorf("node: gossip address: %w", err)
	}
	if !unspecified(g) {
		a.host = g
		return a, nil
	}
	ip, err := sockaddr.GetPrivateIP()
	if err != nil {
		return a, fmt.Errorf("node: finding a private IP to advertise: %w", err)
	}
	a.host = ip // "" when there is none
	return a, nil
}

// addr is what to advertise for the gRPC or HTTP listener bound at bound
// (host:port, the real port).
func (a advertiser) addr(bound string) string {
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

// gossipIP is the IP memberlist advertises ("" lets memberlist decide:
// the bind address, or the first private IP when it binds every address).
func (a advertiser) gossipIP() string { return a.ip }

// raft is the Raft advertise address for the listen address raftAddr
// (its port may be 0: the bound port), "" for the bound address. A name
// stays a name.
func (a advertiser) raft(raftAddr string) (string, error) {
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
	return "", fmt.Errorf("node: raft address %q listens on every address and no private IP was found: set Advertise (--advertise)", raftAddr)
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
			return "", fmt.Errorf("node: resolving advertise host %q: %w", host, err)
		}
		if attempt == 0 {
			log.Warn("advertise host does not resolve yet; retrying", "host", host, "err", err, "for", wait)
		}
		time.Sleep(500 * time.Millisecond) // retry pace; New has no context to wait on
	}
}
