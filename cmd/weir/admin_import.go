package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weirlimit/weir/rulesraft/rules"
	"github.com/weirlimit/weir/rulesraft/rules/envoyrl"
)

// importFormats are the --from values rules import reads.
const fromEnvoyRatelimit = "envoy-ratelimit"

// rulesImportCmd translates another limiter's configuration into Weir rules
// and applies them through Raft as `rules apply` does (adding and replacing
// rules by id; other rules stay).
func (c *cli) rulesImportCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "import --from envoy-ratelimit FILE... [--dry-run]", Args: cobra.MinimumNArgs(1),
		Short: "Import envoyproxy/ratelimit configuration files as rules",
		Long: "Translate envoyproxy/ratelimit configuration files (domain, nested descriptors,\n" +
			"key, value, rate_limit with unit, requests_per_unit, unit_multiplier, unlimited,\n" +
			"name and replaces, shadow_mode, detailed_metric) into descriptor rules and apply\n" +
			"them as `weir rules apply` does. Anything that cannot be translated is listed\n" +
			"with its file and line, and nothing is applied. --print writes the rules file\n" +
			"instead of applying it."}
	o := adminFlags(cmd)
	fs := cmd.Flags()
	from := fs.String("from", "", "the `format` of the files: envoy-ratelimit")
	dryRun := fs.Bool("dry-run", false, "print the diff only; change nothing")
	alg := fs.String("algorithm", rules.AlgSlidingWindow, "`algorithm` of the imported rules (fixed_window counts exactly as envoyproxy/ratelimit; the default has no 2x burst at window edges)")
	print := fs.Bool("print", false, "write the translated rules file to stdout and apply nothing")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *from != fromEnvoyRatelimit {
			return usageErr(cmd, "--from %q: want %s", *from, fromEnvoyRatelimit)
		}
		var files []envoyrl.File
		for _, a := range args {
			name, data, err := c.readFile(a)
			if err != nil {
				return err
			}
			files = append(files, envoyrl.File{Name: name, Data: data})
		}
		rs, notes, err := envoyrl.Import(files, envoyrl.Options{Algorithm: *alg})
		if err != nil {
			var ie *envoyrl.Error
			if errors.As(err, &ie) {
				ps := make([]string, len(ie.Problems))
				for i, p := range ie.Problems {
					ps[i] = p.String()
				}
				return &fileError{name: strings.Join(args, ", "), problems: ps}
			}
			return err
		}
		for _, n := range notes {
			fmt.Fprintf(c.stderr, "note: %s\n", n)
		}
		data, err := rules.MarshalFile(rs)
		if err != nil {
			return newFileError("translated rules", err)
		}
		if *print {
			_, err := c.stdout.Write(data)
			return err
		}
		return request(c, cmd, o, func(api *apiClient) (applyAnswer, []byte, error) {
			return api.applyRules(cmd.Context(), data, *dryRun, false)
		}, func(a applyAnswer) error {
			formatDiff(c.stdout, a.Diff)
			if a.DryRun || *dryRun {
				fmt.Fprintf(c.stdout, "dry run: nothing changed (rules version %d)\n", a.Version)
				return nil
			}
			fmt.Fprintf(c.stdout, "imported %d rules: rules version %d\n", len(rs), a.Version)
			return nil
		})
	}
	return cmd
}
