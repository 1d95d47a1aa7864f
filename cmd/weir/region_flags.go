package main

import (
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weirlimit/weir/node"
	"github.com/weirlimit/weir/region"
)

// regionFlags are `weir node`'s multi-region flags (docs/operations.md,
// regions).
type regionFlags struct {
	name, peers string
	interval    time.Duration
}

func (f *regionFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.name, "region", "", "this node's region: rules with scope: global share one quota with the --peer-regions (empty: single region)")
	fs.StringVar(&f.peers, "peer-regions", "", "the other regions as `name=host:port,...` (gRPC address of any node or a load balancer of each)")
	fs.DurationVar(&f.interval, "region-interval", 250*time.Millisecond, "how often shares are exchanged with the peer regions")
	withEnv(fs, "region", "peer-regions", "region-interval")
}

func (f *regionFlags) apply(cmd *cobra.Command, cfg *node.Config) error {
	if f.name == "" && f.peers == "" {
		return nil
	}
	if f.name == "" || f.peers == "" {
		return usageErr(cmd, "--region and --peer-regions go together")
	}
	peers, err := region.ParsePeers(f.peers)
	if err != nil {
		return usageErr(cmd, "--peer-regions %q: %v", f.peers, err)
	}
	if f.interval <= 0 {
		return usageErr(cmd, "--region-interval %s: must be > 0", f.interval)
	}
	cfg.Region.Region, cfg.Region.Peers, cfg.Region.Interval = f.name, peers, f.interval
	return nil
}
