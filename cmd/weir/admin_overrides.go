package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/weirlimit/weir/rulesraft/rules"
)

const overridesUsage = `usage: weir overrides <subcommand> [flags]

Subcommands:
  set --key K --rule R (--rate N [--burst N] | --block) [--ttl 1h | --expires RFC3339]
                                  give key K its own limit for rule R, or block it
  list                            list the overrides
  delete --key K --rule R         remove the override of key K for rule R

Every subcommand takes --addr, --token, -o table|json and --timeout;
run 'weir overrides <subcommand> -h' for its flags.
`

// overrides runs `weir overrides SUB ...`.
func (c *cli) overrides(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, overridesUsage)
		return &usageError{msg: "weir overrides: missing subcommand"}
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "set", "put":
		return c.overridesSet(ctx, rest, time.Now())
	case "list", "ls":
		return c.overridesList(ctx, rest)
	case "delete", "rm":
		return c.overridesDelete(ctx, rest)
	case "help", "-h", "-help", "--help":
		return &helpShown{text: overridesUsage}
	}
	return &usageError{msg: fmt.Sprintf("weir overrides: unknown subcommand %q", sub), help: "weir help overrides"}
}

// overridesSet builds the override from flags; now is used for --ttl and
// to refuse an --expires in the past.
func (c *cli) overridesSet(ctx context.Context, args []string, now time.Time) error {
	fs := newFlagSet("weir overrides set", "--key K --rule R (--rate N [--burst N] | --block) [--ttl D | --expires T] [flags]",
		"Give one limited key its own limit for a rule (a partner's raised limit), or block it.\n"+
			"Without --ttl or --expires the override never expires.")
	o := c.adminFlags(fs)
	key := fs.String("key", "", "the limited `key`, e.g. apikey:ak_42")
	rule := fs.String("rule", "", "the rule `id`")
	rate := fs.Int64("rate", 0, "tokens per the rule's period for this key")
	burst := fs.Int64("burst", 0, "bucket size for this key (default: the rate)")
	block := fs.Bool("block", false, "deny every request of this key")
	ttl := fs.Duration("ttl", 0, "expire after this `duration` (e.g. 1h)")
	expires := fs.String("expires", "", "expire at this `time` (RFC 3339, e.g. 2026-12-01T00:00:00Z)")
	if _, err := fs.parse(args); err != nil {
		return err
	}
	var missing []string
	if *key == "" {
		missing = append(missing, "--key")
	}
	if *rule == "" {
		missing = append(missing, "--rule")
	}
	if len(missing) > 0 {
		return fs.usageErr("missing %s", strings.Join(missing, " and "))
	}
	switch {
	case *block && (fs.isSet("rate") || fs.isSet("burst")):
		return fs.usageErr("--block takes no --rate or --burst: a blocked key has no limit")
	case !*block && !fs.isSet("rate"):
		return fs.usageErr("missing --rate N (or --block to deny the key)")
	case fs.isSet("ttl") && *expires != "":
		return fs.usageErr("give --ttl or --expires, not both")
	}
	ov := rules.Override{Key: *key, Rule: *rule, Rate: *rate, Burst: *burst, Block: *block}
	switch {
	case fs.isSet("ttl"):
		if *ttl <= 0 {
			return fs.usageErr("--ttl %s: must be > 0", *ttl)
		}
		ov.ExpiresAt = now.Add(*ttl).UTC().Truncate(time.Second)
	case *expires != "":
		t, err := time.Parse(time.RFC3339, *expires)
		if err != nil {
			return fs.usageErr("--expires %q: want an RFC 3339 time such as 2026-12-01T00:00:00Z", *expires)
		}
		if !t.After(now) {
			return fs.usageErr("--expires %s is in the past", *expires)
		}
		ov.ExpiresAt = t
	}
	if err := ov.Validate(); err != nil {
		return fs.usageErr("invalid override: %s", strings.TrimPrefix(err.Error(), rules.ErrInvalid.Error()+": "))
	}
	return request(c, o, fs, func(api *apiClient) (versionAnswer, []byte, error) { return api.putOverride(ctx, ov) },
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

func (c *cli) overridesList(ctx context.Context, args []string) error {
	fs := newFlagSet("weir overrides list", "[flags]", "List the overrides.")
	o := c.adminFlags(fs)
	if _, err := fs.parse(args); err != nil {
		return err
	}
	return request(c, o, fs, func(api *apiClient) (overridesAnswer, []byte, error) { return api.listOverrides(ctx) },
		func(a overridesAnswer) error {
			return formatOverrides(c.stdout, a.Version, a.Overrides)
		})
}

func (c *cli) overridesDelete(ctx context.Context, args []string) error {
	fs := newFlagSet("weir overrides delete", "--key K --rule R [flags]", "Remove the override of one key for one rule.")
	o := c.adminFlags(fs)
	key := fs.String("key", "", "the limited `key`")
	rule := fs.String("rule", "", "the rule `id`")
	if _, err := fs.parse(args); err != nil {
		return err
	}
	if *key == "" || *rule == "" {
		return fs.usageErr("missing --key or --rule")
	}
	return request(c, o, fs, func(api *apiClient) (versionAnswer, []byte, error) { return api.deleteOverride(ctx, *key, *rule) },
		func(a versionAnswer) error {
			fmt.Fprintf(c.stdout, "override deleted: %s for rule %s: rules version %d\n", *key, *rule, a.Version)
			return nil
		})
}
