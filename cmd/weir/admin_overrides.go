package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirlimit/weir/rulesraft/rules"
)

func (c *cli) overridesCmd() *cobra.Command {
	return group(&cobra.Command{
		Use:     "overrides",
		Aliases: []string{"override"},
		Short:   "Set, list or delete a per-key override of a rule's limit",
		GroupID: "admin",
	}, c.overridesSetCmd(), c.overridesListCmd(), c.overridesDeleteCmd())
}

// overridesSetCmd builds the override from flags; c.now is used for --ttl
// and to refuse an --expires in the past.
func (c *cli) overridesSetCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "set --key K --rule R (--rate N [--burst N] | --block) [--ttl D | --expires T]",
		Aliases: []string{"put"}, Args: noArgs,
		Short: "Give key K its own limit for rule R, or block it",
		Long: "Give one limited key its own limit for a rule (a partner's raised limit), or block it.\n" +
			"Without --ttl or --expires the override never expires."}
	o := adminFlags(cmd)
	fs := cmd.Flags()
	key := fs.String("key", "", "the limited `key`, e.g. apikey:ak_42")
	rule := fs.String("rule", "", "the rule `id`")
	rate := fs.Int64("rate", 0, "tokens per the rule's period for this key")
	burst := fs.Int64("burst", 0, "bucket size for this key (default: the rate)")
	block := fs.Bool("block", false, "deny every request of this key")
	ttl := fs.Duration("ttl", 0, "expire after this `duration` (e.g. 1h)")
	expires := fs.String("expires", "", "expire at this `time` (RFC 3339, e.g. 2026-12-01T00:00:00Z)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var missing []string
		if *key == "" {
			missing = append(missing, "--key")
		}
		if *rule == "" {
			missing = append(missing, "--rule")
		}
		if len(missing) > 0 {
			return usageErr(cmd, "missing %s", strings.Join(missing, " and "))
		}
		switch {
		case *block && (fs.Changed("rate") || fs.Changed("burst")):
			return usageErr(cmd, "--block takes no --rate or --burst: a blocked key has no limit")
		case !*block && !fs.Changed("rate"):
			return usageErr(cmd, "missing --rate N (or --block to deny the key)")
		case fs.Changed("ttl") && *expires != "":
			return usageErr(cmd, "give --ttl or --expires, not both")
		}
		ov := rules.Override{Key: *key, Rule: *rule, Rate: *rate, Burst: *burst, Block: *block}
		now := c.now()
		switch {
		case fs.Changed("ttl"):
			if *ttl <= 0 {
				return usageErr(cmd, "--ttl %s: must be > 0", *ttl)
			}
			ov.ExpiresAt = now.Add(*ttl).UTC().Truncate(time.Second)
		case *expires != "":
			t, err := time.Parse(time.RFC3339, *expires)
			if err != nil {
				return usageErr(cmd, "--expires %q: want an RFC 3339 time such as 2026-12-01T00:00:00Z", *expires)
			}
			if !t.After(now) {
				return usageErr(cmd, "--expires %s is in the past", *expires)
			}
			ov.ExpiresAt = t
		}
		if err := ov.Validate(); err != nil {
			return usageErr(cmd, "invalid override: %s", strings.TrimPrefix(err.Error(), rules.ErrInvalid.Error()+": "))
		}
		return request(c, cmd, o, func(api *apiClient) (versionAnswer, []byte, error) { return api.putOverride(cmd.Context(), ov) },
			func(a versionAnswer) error {
				what := fmt.Sprintf("rate %d", ov.Rate)
				if ov.Burst > 0 {
					what += fmt.Sprintf(", burst %d", ov.Burst)
				}
				if ov.Block {
					what = "blocked"
				}
				fmt.Fprintf(c.stdout, "override set: %s for rule %s: %s, expires %s: rules version %d\n",
					ov.Key, ov.Rule, what, expiresString(ov.ExpiresAt), a.Version)
				return nil
			})
	}
	return cmd
}

func (c *cli) overridesListCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "list", Aliases: []string{"ls"}, Args: noArgs, Short: "List the overrides"}
	o := adminFlags(cmd)
	stale := staleFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return request(c, cmd, o, func(api *apiClient) (overridesAnswer, []byte, error) {
			return api.listOverrides(cmd.Context(), *stale)
		},
			func(a overridesAnswer) error {
				if err := formatOverrides(c.stdout, a.Version, a.Overrides); err != nil {
					return err
				}
				formatRead(c.stdout, a.Read, a.Version)
				return nil
			})
	}
	return cmd
}

func (c *cli) overridesDeleteCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "delete --key K --rule R", Aliases: []string{"rm"}, Args: noArgs,
		Short: "Remove the override of key K for rule R"}
	o := adminFlags(cmd)
	key := cmd.Flags().String("key", "", "the limited `key`")
	rule := cmd.Flags().String("rule", "", "the rule `id`")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *key == "" || *rule == "" {
			return usageErr(cmd, "missing --key or --rule")
		}
		return request(c, cmd, o, func(api *apiClient) (versionAnswer, []byte, error) {
			return api.deleteOverride(cmd.Context(), *key, *rule)
		}, func(a versionAnswer) error {
			fmt.Fprintf(c.stdout, "override deleted: %s for rule %s: rules version %d\n", *key, *rule, a.Version)
			return nil
		})
	}
	return cmd
}
