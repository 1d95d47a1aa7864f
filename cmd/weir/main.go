package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// errUsage is matched (errors.Is) by every usage error: an unknown command,
// a missing argument, a bad flag. run exits 2 for it. The node, dev,
// gateway and bench runners may wrap it to get the same exit code.
var errUsage = errors.New("weir: usage error")

// usageError is a usage error with the synopsis of the command it concerns.
type usageError struct {
	msg      string // what was wrong, one sentence
	synopsis string // "weir rules get ID [flags]"; may be empty
	help     string // the command to run for details ("weir help rules")
}

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Unwrap() error { return errUsage }

// helpShown is returned when the user asked for help (-h, --help, `weir
// help`): run prints text on stdout and exits 0.
type helpShown struct{ text string }

func (h *helpShown) Error() string { return "help requested" }
func (h *helpShown) Unwrap() error { return flag.ErrHelp }

// cli is one invocation of the command: where it reads and writes, and how
// it sees the environment. It holds no state beyond these.
type cli struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default handling so that a
		// second Ctrl-C kills a process stuck in shutdown.
		<-ctx.Done()
		stop()
	}()
	code := runStdin(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run runs the weir command line args (without the program name) and
// returns the process exit code. It never exits and keeps no global state;
// stdin is os.Stdin (read only by `rules apply -f -` and `rules put -f -`).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return runStdin(ctx, args, os.Stdin, stdout, stderr, getenv)
}

// runStdin is run with an explicit stdin.
func runStdin(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	return c.exit(c.dispatch(ctx, args))
}

// exit prints err (if any) and maps it to an exit code.
func (c *cli) exit(err error) int {
	if err == nil {
		return exitOK
	}
	var hs *helpShown
	if errors.As(err, &hs) {
		fmt.Fprint(c.stdout, hs.text)
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) { // a runner printed its own help
		return exitOK
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "weir: ") && !strings.HasPrefix(msg, "weir ") {
		msg = "weir: " + msg
	}
	fmt.Fprintln(c.stderr, msg)
	var ue *usageError
	if errors.As(err, &ue) {
		if ue.synopsis != "" {
			fmt.Fprintf(c.stderr, "usage: %s\n", ue.synopsis)
		}
		if ue.help != "" {
			fmt.Fprintf(c.stderr, "Run '%s' for details.\n", ue.help)
		}
		return exitUsage
	}
	if errors.Is(err, errUsage) {
		return exitUsage
	}
	return exitError
}

// dispatch runs the command named by args[0].
func (c *cli) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, topUsage)
		return &usageError{msg: "no command given"}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "node":
		return runNode(ctx, rest)
	case "dev":
		return runDev(ctx, rest, c.stdout)
	case "gateway":
		return runGateway(ctx, rest)
	case "bench":
		return runBench(ctx, rest)
	case "rules":
		return c.rules(ctx, rest)
	case "overrides", "override":
		return c.overrides(ctx, rest)
	case "check":
		return c.check(ctx, rest)
	case "members", "status":
		return c.members(ctx, cmd, rest)
	case "version", "--version":
		return c.version(rest)
	case "help", "-h", "-help", "--help":
		return c.help(ctx, rest)
	}
	return &usageError{
		msg:  fmt.Sprintf("unknown command %q", cmd),
		help: "weir help",
	}
}

const topUsage = `weir: a clustered rate limiter

usage: weir <command> [flags] [args]

Run:
  node        run one Weir node
  dev         run a single node with the example rules, for trying Weir out
  gateway     run a gateway that checks each request with Weir
  bench       measure checks per second and latency

Administer a cluster (through any node's HTTP API):
  rules       list, get, put, apply, delete, history, diff or roll back rules
  overrides   set, list or delete a per-key override of a rule's limit
  check       ask for one decision: weir check --key K --rule R [--cost N]
  members     show the cluster's members, leader and versions (alias: status)

Other:
  version     print the version of this binary
  help        show help for a command: weir help <command> [subcommand]

Admin commands take these flags:
  --addr ADDR      a node's HTTP address, host:port or URL
                   (default $WEIR_ADDR, else 127.0.0.1:8080)
  --token TOKEN    admin token, sent as "Authorization: Bearer" (default $WEIR_TOKEN)
  --author NAME    who makes a write, kept in the rules history
                   (default $WEIR_AUTHOR, else $USER@host)
  -o table|json    output format (default table)
  --timeout D      how long to wait for the node (default 10s)
`

// help prints help for the command named in args, or the overview.
func (c *cli) help(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return &helpShown{text: topUsage}
	}
	switch args[0] {
	case "node", "dev", "gateway", "bench", "rules", "overrides", "override",
		"check", "members", "status", "version":
		// Every command answers -h with its own help.
		return c.dispatch(ctx, append(append([]string{}, args...), "-h"))
	case "help":
		return &helpShown{text: topUsage}
	}
	return &usageError{msg: fmt.Sprintf("no help for unknown command %q", args[0]), help: "weir help"}
}

// version prints the module version, the VCS revision and the Go version
// recorded in the binary.
func (c *cli) version(args []string) error {
	fs := newFlagSet("weir version", "", "Print the version of this binary.")
	if _, err := fs.parse(args); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, versionString(debug.ReadBuildInfo()))
	return nil
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
