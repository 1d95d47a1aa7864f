package main

import (
	"context"
	"fmt"
)

// check runs `weir check --key K --rule R [--cost N]`: one decision, taken
// for real (cost 0 only peeks). A denied check is a successful command.
func (c *cli) check(ctx context.Context, args []string) error {
	fs := newFlagSet("weir check", "--key K --rule R [--cost N] [flags]",
		"Ask the cluster for one decision, as a gateway would, and print it.\n"+
			"The tokens are taken for real; --cost 0 only peeks. The exit code is 0\n"+
			"whether the request is allowed or DENIED; it is non-zero only on errors.")
	o := c.adminFlags(fs)
	key := fs.String("key", "", "the limited `key`, e.g. apikey:ak_42")
	rule := fs.String("rule", "", "the rule `id`")
	cost := fs.Int64("cost", 1, "tokens to take (0 peeks)")
	if _, err := fs.parse(args); err != nil {
		return err
	}
	switch {
	case *key == "" && *rule == "":
		return fs.usageErr("missing --key and --rule")
	case *key == "":
		return fs.usageErr("missing --key")
	case *rule == "":
		return fs.usageErr("missing --rule")
	case *cost < 0:
		return fs.usageErr("--cost %d: must be >= 0", *cost)
	}
	api, err := o.client(fs)
	if err != nil {
		return err
	}
	defer api.close()
	req := checkRequest{Key: *key, Rule: *rule, Cost: *cost}
	d, raw, err := api.check(ctx, req)
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

// members runs `weir members` (or `weir status`): GET /v1/cluster.
func (c *cli) members(ctx context.Context, name string, args []string) error {
	fs := newFlagSet("weir "+name, "[flags]",
		"Show the cluster as the node at --addr sees it: each member's state, Raft role,\n"+
			"partitions owned and replicas held, and the leader, rules version and ring version.\n"+
			"In the table, * marks the Raft leader and (self) the node that answered.")
	o := c.adminFlags(fs)
	if _, err := fs.parse(args); err != nil {
		return err
	}
	return request(c, o, fs, func(api *apiClient) (clusterAnswer, []byte, error) { return api.cluster(ctx) },
		func(a clusterAnswer) error {
			return formatCluster(c.stdout, a)
		})
}
