package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a usage error: an unknown command, a missing argument, a
// bad flag. run exits 2 for it.
type usageError struct {
	msg      string // what was wrong, one sentence
	synopsis string // "weir rules get ID [flags]"; may be empty
	help     string // the command to run for details ("weir rules get --help")
}

func (e *usageError) Error() string { return e.msg }

// usageErr is a usage error about cmd, shown with its synopsis.
func usageErr(cmd *cobra.Command, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), synopsis: cmd.UseLine(), help: cmd.CommandPath() + " --help"}
}

// cli is one invocation of the command: where it reads and writes, how it
// sees the environment and the clock. It holds no state beyond these.
type cli struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	now    func() time.Time // read by `overrides set` for --ttl and --expires
}

func main() {
	// The first SIGINT or SIGTERM cancels the command's context (a node
	// leaves gracefully); a second one exits at once. The handler stays
	// installed: as PID 1 in a container, a signal with its default
	// disposition would be ignored.
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
		s := <-sigs
		fmt.Fprintf(os.Stderr, "weir: %v again: exiting at once\n", s)
		os.Exit(exitError)
	}()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	cancel()
	os.Exit(code)
}

// run runs the weir command line args (without the program name) and
// returns the process exit code. It never exits and keeps no global state;
// stdin is read only by `rules apply -f -` and `rules put -f -`, the
// environment only through getenv (nil: empty).
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv, now: time.Now}
	return c.run(ctx, args)
}

func (c *cli) run(ctx context.Context, args []string) int {
	root := c.newRoot()
	started := false // the command's own RunE was reached
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := bindEnv(cmd.Flags(), c.getenv); err != nil {
			return usageErr(cmd, "%v", err)
		}
		started = true
		return nil
	}
	root.SetArgs(append([]string{}, args...)) // never nil: cobra reads os.Args for nil
	root.SetIn(c.stdin)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	var ue *usageError
	if err != nil && !started && !errors.As(err, &ue) {
		// cobra's own errors (an unknown flag, a bad flag value, extra
		// arguments to a built-in command) come before the command runs.
		err = usageErr(cmd, "%v", err)
	}
	return c.exit(err)
}

// exit prints err (if any) and maps it to an exit code.
func (c *cli) exit(err error) int {
	if err == nil {
		return exitOK
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "weir: ") && !strings.HasPrefix(msg, "weir ") {
		msg = "weir: " + msg
	}
	fmt.Fprintln(c.stderr, msg)
	var ue *usageError
	if !errors.As(err, &ue) {
		return exitError
	}
	if ue.synopsis != "" {
		fmt.Fprintf(c.stderr, "usage: %s\n", ue.synopsis)
	}
	if ue.help != "" {
		fmt.Fprintf(c.stderr, "Run '%s' for details.\n", ue.help)
	}
	return exitUsage
}

const rootLong = `weir: a clustered rate limiter.

The admin commands talk to any node's HTTP API. They take --addr (a node's
HTTP address; $WEIR_ADDR, else 127.0.0.1:8080), --token ($WEIR_TOKEN),
--author ($WEIR_AUTHOR, else $USER@host), -o table|json and --timeout.
A flag given on the command line wins over its WEIR_* environment variable.`

// newRoot builds the command tree of one invocation.
func (c *cli) newRoot() *cobra.Command {
	root := group(&cobra.Command{
		Use:           "weir",
		Short:         "A clustered rate limiter",
		Long:          rootLong,
		Version:       versionString(debug.ReadBuildInfo()),
		SilenceErrors: true, // run prints errors, once, in its own form
		SilenceUsage:  true,
	},
		c.nodeCmd(), c.devCmd(), c.gatewayCmd(), c.echoCmd(), c.benchCmd(), c.healthCmd(), c.tlsCmd(),
		c.rulesCmd(), c.overridesCmd(), c.checkCmd(), c.membersCmd(), c.keyringCmd(),
		c.eventsCmd(), c.topCmd(), c.limitsCmd(), c.plainProxyCmd(),
		&cobra.Command{
			Use:   "version",
			Short: "Print the version of this binary",
			Args:  noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				_, err := fmt.Fprintln(c.stdout, cmd.Root().Version)
				return err
			},
		})
	root.AddGroup(&cobra.Group{ID: "run", Title: "Run:"},
		&cobra.Group{ID: "admin", Title: "Administer a cluster (through any node's HTTP API):"})
	root.SetVersionTemplate("{{.Version}}\n")
	// A group runs only to report a missing or unknown subcommand: its
	// usage shows "weir rules [command]", not also "weir rules [flags]".
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(),
		"{{if .Runnable}}", "{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
	// `weir help X` for an unknown X is a usage error, not help.
	root.InitDefaultHelpCmd()
	help, _, _ := root.Find([]string{"help"})
	help.Args = func(_ *cobra.Command, args []string) error {
		if _, rest, _ := root.Find(args); len(rest) > 0 {
			return fmt.Errorf("no help for unknown command %q", strings.Join(args, " "))
		}
		return nil
	}
	return root
}

// group makes cmd a command holding subs. Run alone, or with an unknown
// subcommand, it prints nothing but a usage error.
func group(cmd *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	cmd.AddCommand(subs...)
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2
	// A mistyped subcommand's flags ("weir rules aply -f x") are not the
	// group's: the word before them is what is wrong, so a flag error after
	// a word names that word as the unknown subcommand. (Subcommands inherit
	// this function; theirs are their own flag errors.)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if a := c.Flags().Args(); c == cmd && len(a) > 0 {
			return c.RunE(c, a)
		}
		return err
	})
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		what := "subcommand"
		if !cmd.HasParent() {
			what = "command"
		}
		if len(args) == 0 {
			fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
			return &usageError{msg: fmt.Sprintf("%s: missing %s", cmd.CommandPath(), what)}
		}
		if args[0] == "help" { // `weir rules help`
			return cmd.Help()
		}
		msg := fmt.Sprintf("%s: unknown %s %q", cmd.CommandPath(), what, args[0])
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
		}
		return &usageError{msg: msg, help: cmd.CommandPath() + " --help"}
	}
	return cmd
}

// posArgs checks a command's positional arguments, named for messages
// ("rule ID"); a name ending in "?" is optional.
func posArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > len(names) {
			extra := args[len(names):]
			q := make([]string, len(extra))
			for i, s := range extra {
				q[i] = fmt.Sprintf("%q", s)
			}
			return usageErr(cmd, "unexpected argument%s %s", plural(len(extra)), strings.Join(q, " "))
		}
		var missing []string
		for _, n := range names[len(args):] {
			if !strings.HasSuffix(n, "?") {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return usageErr(cmd, "missing %s", strings.Join(missing, " and "))
		}
		return nil
	}
}

// noArgs is the Args of a command that takes flags only.
var noArgs = posArgs()

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// versionString formats build information as
// "weir v1.2.3 (rev 0123abcdef01, modified) go1.26.8 linux/amd64".
func versionString(bi *debug.BuildInfo, ok bool) string {
	v := "(devel)"
	var rev string
	var dirty bool
	goVersion := runtime.Version()
	if ok && bi != nil {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "weir %s", v)
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		fmt.Fprintf(&b, " (rev %s", rev)
		if dirty {
			b.WriteString(", modified")
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, " %s %s/%s", goVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}
