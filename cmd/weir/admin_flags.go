package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"
)

// Defaults for the admin flags.
const (
	defaultAddr    = "127.0.0.1:8080"
	defaultTimeout = 10 * time.Second
	envAddr        = "WEIR_ADDR"
	envToken       = "WEIR_TOKEN"
	envAuthor      = "WEIR_AUTHOR"
	// authorHeader names who makes a write (node/api.AuthorHeader; the CLI
	// does not import the node).
	authorHeader = "X-Weir-Author"
)

// Output formats for -o.
const (
	outTable = "table"
	outJSON  = "json"
)

// flagSet is one subcommand's flags plus the text its help shows.
type flagSet struct {
	*flag.FlagSet
	name     string // "weir rules get"
	synopsis string // "weir rules get ID [flags]"
	about    string // a paragraph saying what the command does
}

// newFlagSet returns the flags of the command name ("weir rules get"),
// whose arguments are described by args ("ID [flags]").
func newFlagSet(name, args, about string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are printed by run, once
	fs.Usage = func() {}
	synopsis := name
	if args != "" {
		synopsis += " " + args
	}
	return &flagSet{FlagSet: fs, name: name, synopsis: synopsis, about: about}
}

// helpText is what -h prints: synopsis, description and flags.
func (f *flagSet) helpText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n", f.synopsis)
	if f.about != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimRight(f.about, "\n"))
	}
	hasFlags := false
	f.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		b.WriteString("\nflags:\n")
		f.SetOutput(&b)
		f.PrintDefaults()
		f.SetOutput(io.Discard)
	}
	return b.String()
}

// usageErr is a usage error about this command.
func (f *flagSet) usageErr(format string, args ...any) error {
	return &usageError{
		msg:      fmt.Sprintf(format, args...),
		synopsis: f.synopsis,
		help:     f.name + " -h",
	}
}

// parse parses flags and positional arguments, which may be interleaved
// ("weir rules get ID --addr host:8080"); "--" ends the flags. names name
// the positional arguments for messages ("rule ID"); a name ending in "?"
// is optional. There must be no more arguments than names.
func (f *flagSet) parse(args []string, names ...string) ([]string, error) {
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &helpShown{text: f.helpText()}
			}
			return nil, f.usageErr("%v", err)
		}
		rest := f.Args()
		used := len(args) - len(rest)
		if used > 0 && args[used-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) > len(names) {
		extra := pos[len(names):]
		return nil, f.usageErr("unexpected argument%s %s", plural(len(extra)), quoteAll(extra))
	}
	var missing []string
	for _, n := range names[len(pos):] {
		if !strings.HasSuffix(n, "?") {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, f.usageErr("missing %s", strings.Join(missing, " and "))
	}
	return pos, nil
}

// isSet reports whether the flag was given on the command line.
func (f *flagSet) isSet(name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) {
		if fl.Name == name {
			set = true
		}
	})
	return set
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, " ")
}

// adminOpts are the flags every admin command takes.
type adminOpts struct {
	addr    string
	token   string
	author  string
	output  string
	timeout time.Duration
}

// adminFlags registers --addr, --token, -o and --timeout on fs, with
// defaults taken from the environment.
func (c *cli) adminFlags(fs *flagSet) *adminOpts {
	o := &adminOpts{}
	addr := c.getenv(envAddr)
	if addr == "" {
		addr = defaultAddr
	}
	fs.StringVar(&o.addr, "addr", addr, "a node's HTTP `address`, host:port or URL ($"+envAddr+")")
	fs.StringVar(&o.token, "token", c.getenv(envToken), "admin `token`, sent as \"Authorization: Bearer\" ($"+envToken+")")
	fs.StringVar(&o.author, "author", c.defaultAuthor(), "who makes a write, kept in the rules history ($"+envAuthor+", else $USER@host)")
	fs.StringVar(&o.output, "o", outTable, "output `format`: table or json")
	fs.DurationVar(&o.timeout, "timeout", defaultTimeout, "how long to wait for the node")
	return o
}

// client checks the admin flags and returns a client for the node. The
// caller must close it.
func (o *adminOpts) client(fs *flagSet) (*apiClient, error) {
	switch o.output {
	case outTable, outJSON:
	default:
		return nil, fs.usageErr("-o %q: want table or json", o.output)
	}
	if o.timeout <= 0 {
		return nil, fs.usageErr("--timeout %s: must be > 0", o.timeout)
	}
	base, err := normalizeAddr(o.addr)
	if err != nil {
		return nil, fs.usageErr("--addr: %v", err)
	}
	cl := newAPIClient(base, o.token, o.timeout)
	cl.author = o.author
	return cl, nil
}

// defaultAuthor is $WEIR_AUTHOR, else $USER@hostname (or what of it is known).
func (c *cli) defaultAuthor() string {
	if a := c.getenv(envAuthor); a != "" {
		return a
	}
	host, _ := os.Hostname()
	switch user := c.getenv("USER"); {
	case user != "" && host != "":
		return user + "@" + host
	case user != "":
		return user
	default:
		return host
	}
}

// json reports whether -o json was asked for.
func (o *adminOpts) json() bool { return o.output == outJSON }

// normalizeAddr turns "host:port", ":port" or a URL into a base URL with no
// trailing slash ("http://host:port").
func normalizeAddr(addr string) (string, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return "", errors.New("empty address (want host:port or a URL)")
	}
	if !strings.Contains(addr, "://") {
		if strings.HasPrefix(addr, ":") {
			addr = "127.0.0.1" + addr
		}
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "", fmt.Errorf("%q is not a host:port or URL", addr)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: scheme must be http or https", addr)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%q has no host", addr)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: an address may not hold a query or fragment", addr)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u.String(), nil
}

// request runs one admin call: it opens the client, calls the node, and
// prints the node's JSON with -o json or the human form otherwise.
func request[A any](c *cli, o *adminOpts, fs *flagSet, call func(*apiClient) (A, []byte, error), human func(A) error) error {
	api, err := o.client(fs)
	if err != nil {
		return err
	}
	defer api.close()
	a, raw, err := call(api)
	if err != nil {
		return err
	}
	if o.json() {
		return writeJSON(c.stdout, raw, nil)
	}
	return human(a)
}
