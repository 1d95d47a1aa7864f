package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/weirlimit/weir/region"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// rulesRegionsCmd compares the global rules of several regions: each
// region has its own Raft group, and global rules must be the same in
// every region (docs/operations.md, regions).
func (c *cli) rulesRegionsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "regions --regions NAME=ADDR,...", Args: noArgs,
		Short: "Show each region's rules version and whether their global rules agree"}
	regions := cmd.Flags().String("regions", "", "`name=addr,...`: a node's HTTP address (host:port or URL) in each region")
	token := cmd.Flags().String("token", "", "admin `token`, sent as \"Authorization: Bearer\"")
	timeout := cmd.Flags().Duration("timeout", defaultTimeout, "how long to wait for each node")
	withEnv(cmd.Flags(), "token")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		addrs, err := region.ParsePeers(*regions)
		if err != nil || len(addrs) == 0 {
			return usageErr(cmd, "--regions %q: want name=addr,... (one node of each region)", *regions)
		}
		names := make([]string, 0, len(addrs))
		for n := range addrs {
			names = append(names, n)
		}
		slices.Sort(names)
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "REGION\tVERSION\tGLOBAL RULES\tFINGERPRINT\tERROR")
		prints := map[string]bool{}
		failed := 0
		for _, name := range names {
			base, err := normalizeAddr(addrs[name])
			if err != nil {
				return usageErr(cmd, "--regions: %s: %v", name, err)
			}
			api := newAPIClient(base, *token, *timeout)
			a, _, err := api.listRules(cmd.Context(), 0, false)
			api.close()
			if err != nil {
				failed++
				fmt.Fprintf(tw, "%s\t-\t-\t-\t%v\n", name, err)
				continue
			}
			n, fp := globalFingerprint(a.Rules)
			prints[fp] = true
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t\n", name, a.Version, n, fp)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		switch {
		case failed > 0:
			return fmt.Errorf("%d of %d regions did not answer", failed, len(names))
		case len(prints) > 1:
			return fmt.Errorf("the regions' global rules differ: apply the same rules file to every region")
		}
		fmt.Fprintln(c.stdout, "global rules: the same in every region")
		return nil
	}
	return cmd
}

// globalFingerprint hashes a rule set's global rules (normalized, by id):
// equal fingerprints mean the regions enforce the same global limits.
func globalFingerprint(rs []rules.Rule) (int, string) {
	var global []rules.Rule
	for _, r := range rs {
		if r.Global() {
			global = append(global, rules.Normalize(r))
		}
	}
	slices.SortFunc(global, func(a, b rules.Rule) int { return strings.Compare(a.ID, b.ID) })
	b, _ := json.Marshal(global)
	sum := sha256.Sum256(b)
	return len(global), hex.EncodeToString(sum[:6])
}

// regionTarget is one node to send an admin request to: o's own address,
// or one region's of --regions.
type regionTarget struct {
	name string // empty: no regions given
	opts *adminOpts
}

// regionTargets expands --regions name=addr,... into one target per
// region (sorted by name), each o with that region's address; without
// --regions, o itself.
func regionTargets(cmd *cobra.Command, o *adminOpts, spec string) ([]regionTarget, error) {
	if spec == "" {
		return []regionTarget{{opts: o}}, nil
	}
	addrs, err := region.ParsePeers(spec)
	if err != nil || len(addrs) == 0 {
		return nil, usageErr(cmd, "--regions %q: want name=addr,... (one node of each region)", spec)
	}
	if cmd.Flags().Changed("addr") {
		return nil, usageErr(cmd, "give --addr or --regions, not both")
	}
	names := make([]string, 0, len(addrs))
	for n := range addrs {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]regionTarget, 0, len(names))
	for _, n := range names {
		ro := *o
		ro.addr = addrs[n]
		out = append(out, regionTarget{name: n, opts: &ro})
	}
	return out, nil
}
