package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// checkCmd is `weir check --key K --rule R [--cost N]`: one decision, taken
// for real (cost 0 only peeks). A denied check is a successful command.
func (c *cli) checkCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "check --key K --rule R [--cost N]", Args: noArgs, GroupID: "admin",
		Short: "Ask for one decision",
		Long: "Ask the cluster for one decision, as a gateway would, and print it.\n" +
			"The tokens are taken for real; --cost 0 only peeks. The exit code is 0\n" +
			"whether the request is allowed or DENIED; it is non-zero only on errors."}
	o := adminFlags(cmd)
	key := cmd.Flags().String("key", "", "the limited `key`, e.g. apikey:ak_42")
	rule := cmd.Flags().String("rule", "", "the rule `id`")
	cost := cmd.Flags().Int64("cost", 1, "tokens to take (0 peeks)")
	minVersion := cmd.Flags().Uint64("min-rule-version", 0, "decide by rules `version` V or later (e.g. what a write answered); a node that has not applied it within a second refuses (503)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		switch {
		case *key == "" && *rule == "":
			return usageErr(cmd, "missing --key and --rule")
		case *key == "":
			return usageErr(cmd, "missing --key")
		case *rule == "":
			return usageErr(cmd, "missing --rule")
		case *cost < 0:
			return usageErr(cmd, "--cost %d: must be >= 0", *cost)
		}
		api, err := c.client(cmd, o)
		if err != nil {
			return err
		}
		defer api.close()
		req := checkRequest{Key: *key, Rule: *rule, Cost: *cost, MinRuleVersion: *minVersion}
		d, raw, err := api.check(cmd.Context(), req)
		if err != nil {
			return err
		}
		if d.Error != "" {
			return fmt.Errorf("weir: %s", d.Error)
		}
		if o.json() {
			return writeJSON(c.stdout, raw, nil)
		}
		return formatDecision(c.stdout, req, d)
	}
	return cmd
}

// membersCmd is `weir members` (or `weir status`): GET /v1/cluster.
func (c *cli) membersCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "members", Aliases: []string{"status"}, Args: noArgs, GroupID: "admin",
		Short: "Show the cluster's members, leader and versions",
		Long: "Show the cluster as the node at --addr sees it: each member's state, Raft role,\n" +
			"partitions owned and replicas held, and the leader, rules version and ring version.\n" +
			"In the table, * marks the Raft leader and (self) the node that answered."}
	o := adminFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return request(c, cmd, o, func(api *apiClient) (clusterAnswer, []byte, error) { return api.cluster(cmd.Context()) },
			func(a clusterAnswer) error {
				return formatCluster(c.stdout, a)
			})
	}
	return cmd
}
