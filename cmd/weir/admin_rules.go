package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// errInvalidFile is matched by every local validation failure of a file.
var errInvalidFile = errors.New("weir: invalid file")

// maxFile caps a file read by -f; the node caps request bodies (1 MiB by
// default) on its own, and says so.
const maxFile = 16 << 20

// fileError lists every problem found in a file; nothing was sent.
type fileError struct {
	name     string
	problems []string
}

func (e *fileError) Error() string {
	var b strings.Builder
	if len(e.problems) == 1 {
		fmt.Fprintf(&b, "%s is invalid; nothing was sent: %s", e.name, e.problems[0])
		return b.String()
	}
	fmt.Fprintf(&b, "%s has %d problems; nothing was sent:", e.name, len(e.problems))
	for _, p := range e.problems {
		b.WriteString("\n  ")
		b.WriteString(p)
	}
	return b.String()
}

func (e *fileError) Unwrap() error { return errInvalidFile }

// newFileError turns a rules package error into a fileError.
func newFileError(name string, err error) error {
	var ve *rules.ValidationError
	if errors.As(err, &ve) && len(ve.Problems) > 0 {
		ps := make([]string, len(ve.Problems))
		for i, p := range ve.Problems {
			ps[i] = p.String()
		}
		return &fileError{name: name, problems: ps}
	}
	return &fileError{name: name, problems: []string{err.Error()}}
}

func (c *cli) rulesCmd() *cobra.Command {
	return group(&cobra.Command{
		Use:     "rules",
		Short:   "List, get, put, apply, delete, history, diff or roll back rules; compare regions",
		GroupID: "admin",
	}, c.rulesListCmd(), c.rulesGetCmd(), c.rulesPutCmd(), c.rulesApplyCmd(), c.rulesDeleteCmd(),
		c.rulesHistoryCmd(), c.rulesDiffCmd(), c.rulesRollbackCmd(), c.rulesRegionsCmd(), c.rulesImportCmd())
}

func (c *cli) rulesListCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "list", Aliases: []string{"ls"}, Args: noArgs,
		Short: "List the rules of the current version, or of version --at"}
	o := adminFlags(cmd)
	at := cmd.Flags().Uint64("at", 0, "show the rules as of this `version` (from history)")
	stale := staleFlag(cmd)
	consistent := cmd.Flags().Bool("consistent", false, "read-your-writes (the default; kept as an alias)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *stale && *consistent {
			return usageErr(cmd, "--stale and --consistent: pick one (consistent is the default)")
		}
		return request(c, cmd, o, func(api *apiClient) (rulesAnswer, []byte, error) {
			return api.listRules(cmd.Context(), *at, *stale)
		},
			func(a rulesAnswer) error {
				if err := formatRules(c.stdout, a.Version, a.Rules); err != nil {
					return err
				}
				formatRead(c.stdout, a.Read, a.Version)
				return nil
			})
	}
	return cmd
}

func (c *cli) rulesGetCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "get ID", Aliases: []string{"show"}, Args: posArgs("rule ID"), Short: "Show one rule"}
	o := adminFlags(cmd)
	stale := staleFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return request(c, cmd, o, func(api *apiClient) (ruleAnswer, []byte, error) { return api.getRule(cmd.Context(), args[0], *stale) },
			func(a ruleAnswer) error {
				if err := formatRule(c.stdout, a.Version, a.Rule); err != nil {
					return err
				}
				formatRead(c.stdout, a.Read, a.Version)
				return nil
			})
	}
	return cmd
}

func (c *cli) rulesPutCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "put [ID] -f FILE", Args: posArgs("rule ID?"),
		Short: "Create or replace one rule",
		Long: "Create or replace one rule, read from FILE (YAML or JSON; - reads stdin).\n" +
			"The file holds one rule (id: ..., match: ..., key: ..., rate: ..., period: ...),\n" +
			"or a rules file with exactly one rule. It is validated locally first and every\n" +
			"problem is listed; nothing is sent unless it is valid. ID, if given, must be\n" +
			"the rule's id."}
	o := adminFlags(cmd)
	file := cmd.Flags().StringP("file", "f", "", "the `file` holding the rule (- for stdin)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *file == "" {
			return usageErr(cmd, "missing -f FILE")
		}
		name, data, err := c.readFile(*file)
		if err != nil {
			return err
		}
		r, err := parseOneRule(name, data)
		if err != nil {
			return err
		}
		if len(args) == 1 && r.ID != args[0] {
			return usageErr(cmd, "the rule in %s has id %q, not %q", name, r.ID, args[0])
		}
		return request(c, cmd, o, func(api *apiClient) (versionAnswer, []byte, error) { return api.putRule(cmd.Context(), r) },
			func(a versionAnswer) error {
				fmt.Fprintf(c.stdout, "rule %s saved: rules version %d\n", r.ID, a.Version)
				return nil
			})
	}
	return cmd
}

// parseOneRule reads one rule from a YAML or JSON document: either the
// rule itself, or a rules file ("rules:" list) holding exactly one rule.
// It goes through rules.ParseFile, so a rule is read as strictly as in a
// rules file and every problem is listed, with its line.
func parseOneRule(name string, data []byte) (rules.Rule, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return rules.Rule{}, &fileError{name: name, problems: []string{
			"file is empty; want one rule (id: ..., match: ..., key: ..., rate: ..., period: ...)"}}
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) == nil && isRulesFile(&doc) {
		rs, err := rules.ParseFile(data)
		if err != nil {
			return rules.Rule{}, newFileError(name, err)
		}
		if len(rs) != 1 {
			return rules.Rule{}, &fileError{name: name, problems: []string{fmt.Sprintf(
				"holds %d rules; `weir rules put` takes one (use `weir rules apply -f` for a whole file)", len(rs))}}
		}
		return rs[0], nil
	}
	// Wrap the rule as the only item of a rules file. "-" on a line of its
	// own followed by the rule indented is a valid list item for any YAML
	// or JSON value, and it moves every line down by exactly two.
	const shift = 2
	var b bytes.Buffer
	b.WriteString("rules:\n-\n")
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if len(line) > 0 {
			b.WriteString("  ")
			b.Write(line)
		}
	}
	rs, err := rules.ParseFile(b.Bytes())
	if err != nil {
		var ve *rules.ValidationError
		if !errors.As(err, &ve) {
			return rules.Rule{}, newFileError(name, err)
		}
		ps := make([]string, len(ve.Problems))
		for i, p := range ve.Problems {
			p.Line -= shift
			if p.Line < 1 {
				p.Line = 0
			}
			p.Field = strings.TrimPrefix(strings.TrimPrefix(p.Field, "rules[0]"), ".")
			if strings.Contains(p.Msg, "must be a mapping (id:") {
				p.Msg = "must hold one rule as a mapping (id: ..., match: ..., key: ..., rate: ..., period: ...)"
			}
			ps[i] = p.String()
		}
		return rules.Rule{}, &fileError{name: name, problems: ps}
	}
	return rs[0], nil
}

// isRulesFile reports whether doc is a mapping with a top-level "rules" key.
func isRulesFile(doc *yaml.Node) bool {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return false
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "rules" {
			return true
		}
	}
	return false
}

func (c *cli) rulesApplyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "apply -f FILE [--dry-run] [--replace]", Args: noArgs,
		Short: "Apply a rules file; prints the diff and the new version",
		Long: "Apply a rules file (YAML or JSON with a top-level \"rules:\" list; - reads stdin).\n" +
			"The file is validated locally first and every problem is listed; nothing is\n" +
			"sent unless it is valid. Prints the diff and the new rules version."}
	o := adminFlags(cmd)
	fs := cmd.Flags()
	file := fs.StringP("file", "f", "", "the rules `file` (- for stdin)")
	dryRun := fs.Bool("dry-run", false, "print the diff only; change nothing")
	replace := fs.Bool("replace", false, "also delete the rules the file does not hold")
	allowEmpty := fs.Bool("allow-empty", false, "with --replace, allow a file with no rules (deletes every rule)")
	inRegions := fs.String("regions", "", "apply to every region instead of --addr: `name=addr,...` (a node of each), in name order, stopping at the first failure")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *file == "" {
			return usageErr(cmd, "missing -f FILE")
		}
		targets, err := regionTargets(cmd, o, *inRegions)
		if err != nil {
			return err
		}
		name, data, err := c.readFile(*file)
		if err != nil {
			return err
		}
		rs, err := rules.ParseFile(data)
		if err != nil {
			return newFileError(name, err)
		}
		if *replace && len(rs) == 0 && !*allowEmpty {
			return usageErr(cmd, "%s holds no rules: --replace would delete every rule (add --allow-empty if that is what you want)", name)
		}
		for _, tg := range targets {
			if tg.name != "" {
				fmt.Fprintf(c.stdout, "region %s:\n", tg.name)
			}
			err := request(c, cmd, tg.opts, func(api *apiClient) (applyAnswer, []byte, error) {
				return api.applyRules(cmd.Context(), data, *dryRun, *replace)
			}, func(a applyAnswer) error {
				formatDiff(c.stdout, a.Diff)
				if a.DryRun || *dryRun {
					fmt.Fprintf(c.stdout, "dry run: nothing changed (rules version %d)\n", a.Version)
					return nil
				}
				fmt.Fprintf(c.stdout, "applied: rules version %d\n", a.Version)
				return nil
			})
			if err != nil {
				if tg.name != "" {
					return fmt.Errorf("region %s: %w (regions after it were not changed)", tg.name, err)
				}
				return err
			}
		}
		return nil
	}
	return cmd
}

func (c *cli) rulesDeleteCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "delete ID", Aliases: []string{"rm"}, Args: posArgs("rule ID"), Short: "Delete one rule"}
	o := adminFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return request(c, cmd, o, func(api *apiClient) (versionAnswer, []byte, error) { return api.deleteRule(cmd.Context(), args[0]) },
			func(a versionAnswer) error {
				fmt.Fprintf(c.stdout, "rule %s deleted: rules version %d\n", args[0], a.Version)
				return nil
			})
	}
	return cmd
}

func (c *cli) rulesHistoryCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "history [--limit N]", Args: noArgs, Short: "List the versions of the rule set, newest first"}
	o := adminFlags(cmd)
	limit := cmd.Flags().Int("limit", 0, "show at most `N` entries (default: the node's)")
	stale := staleFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *limit < 0 {
			return usageErr(cmd, "--limit %d: must be > 0", *limit)
		}
		return request(c, cmd, o, func(api *apiClient) (historyAnswer, []byte, error) { return api.history(cmd.Context(), *limit, *stale) },
			func(a historyAnswer) error {
				if err := formatHistory(c.stdout, a.Entries); err != nil {
					return err
				}
				formatRead(c.stdout, a.Read, a.Version)
				return nil
			})
	}
	return cmd
}

// diffOutput is what `rules diff -o json` prints.
type diffOutput struct {
	From uint64   `json:"from"`
	To   uint64   `json:"to"`
	Diff []string `json:"diff"`
}

func (c *cli) rulesDiffCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "diff V1 V2", Args: posArgs("version V1", "version V2"),
		Short: "Show how the rules and overrides of version V2 differ from those of version V1"}
	o := adminFlags(cmd)
	stale := staleFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		v1, err := parseVersion(cmd, args[0])
		if err != nil {
			return err
		}
		v2, err := parseVersion(cmd, args[1])
		if err != nil {
			return err
		}
		api, err := c.client(cmd, o)
		if err != nil {
			return err
		}
		defer api.close()
		a, _, err := api.listRules(cmd.Context(), v1, *stale)
		if err != nil {
			return fmt.Errorf("version %d: %w", v1, err)
		}
		b, _, err := api.listRules(cmd.Context(), v2, *stale)
		if err != nil {
			return fmt.Errorf("version %d: %w", v2, err)
		}
		diff := append(rules.DiffSets(a.Rules, b.Rules), rules.DiffOverrides(a.Overrides, b.Overrides)...)
		if o.json() {
			if diff == nil {
				diff = []string{}
			}
			return writeJSON(c.stdout, nil, diffOutput{From: v1, To: v2, Diff: diff})
		}
		fmt.Fprintf(c.stdout, "rules version %d -> %d:\n", v1, v2)
		formatDiff(c.stdout, diff)
		formatRead(c.stdout, b.Read, b.Version)
		return nil
	}
	return cmd
}

func (c *cli) rulesRollbackCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "rollback V", Args: posArgs("version V"),
		Short: "Restore the rule set of version V (as a new version)",
		Long: "Restore the rule set (rules and overrides) of version V. The restore is a new version;\n" +
			"history keeps everything."}
	o := adminFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		v, err := parseVersion(cmd, args[0])
		if err != nil {
			return err
		}
		return request(c, cmd, o, func(api *apiClient) (versionAnswer, []byte, error) { return api.rollback(cmd.Context(), v) },
			func(a versionAnswer) error {
				fmt.Fprintf(c.stdout, "rolled back to version %d: rules version %d\n", v, a.Version)
				return nil
			})
	}
	return cmd
}

func parseVersion(cmd *cobra.Command, s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, usageErr(cmd, "%q is not a version (want a positive whole number, see `weir rules history`)", s)
	}
	return v, nil
}

// readFile reads -f FILE, "-" meaning stdin. It returns the name to use in
// messages.
func (c *cli) readFile(path string) (string, []byte, error) {
	var rd io.Reader
	name := path
	if path == "-" {
		name = "stdin"
		if c.stdin == nil {
			return name, nil, fmt.Errorf("weir: no stdin to read the file from")
		}
		rd = c.stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return name, nil, fmt.Errorf("weir: cannot read %s: %w", path, unwrapPathError(err))
		}
		defer f.Close()
		rd = f
	}
	data, err := io.ReadAll(io.LimitReader(rd, maxFile+1))
	if err != nil {
		return name, nil, fmt.Errorf("weir: cannot read %s: %w", name, unwrapPathError(err))
	}
	if len(data) > maxFile {
		return name, nil, fmt.Errorf("weir: %s is over %d MiB", name, maxFile>>20)
	}
	return name, data, nil
}

// unwrapPathError drops *fs.PathError's "open x:" prefix (the name is
// already in the sentence).
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
