package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Defaults for the admin flags.
const (
	defaultAddr    = "127.0.0.1:8080"
	defaultTimeout = 10 * time.Second
	envAddr        = "WEIR_ADDR"  // sets --addr; named in hints
	envToken       = "WEIR_TOKEN" // sets --token; named in hints
	// authorHeader names who makes a write (node/api.AuthorHeader; the CLI
	// does not import the node).
	authorHeader = "X-Weir-Author"
)

// Output formats for -o.
const (
	outTable = "table"
	outJSON  = "json"
)

// adminOpts are the flags every admin command takes.
type adminOpts struct {
	addr    string
	token   string
	author  string
	output  string
	timeout time.Duration
	tls     tlsFlags
}

// adminFlags registers --addr, --token, --author, -o and --timeout on cmd.
func adminFlags(cmd *cobra.Command) *adminOpts {
	o := &adminOpts{}
	fs := cmd.Flags()
	fs.StringVar(&o.addr, "addr", defaultAddr, "a node's HTTP `address`, host:port or URL")
	fs.StringVar(&o.token, "token", "", "admin `token`, sent as \"Authorization: Bearer\"")
	fs.StringVar(&o.author, "author", "", "who makes a write (`name`), kept in the rules history; default $USER@host")
	fs.StringVarP(&o.output, "output", "o", outTable, "output `format`: table or json")
	fs.DurationVar(&o.timeout, "timeout", defaultTimeout, "how long to wait for the node")
	withEnv(fs, "addr", "token", "author")
	o.tls.register(fs)
	return o
}

// client checks the admin flags and returns a client for the node. The
// caller must close it.
func (c *cli) client(cmd *cobra.Command, o *adminOpts) (*apiClient, error) {
	switch o.output {
	case outTable, outJSON:
	default:
		return nil, usageErr(cmd, "-o %q: want table or json", o.output)
	}
	if o.timeout <= 0 {
		return nil, usageErr(cmd, "--timeout %s: must be > 0", o.timeout)
	}
	tc, err := o.tls.client(cmd, nil)
	if err != nil {
		return nil, err
	}
	addr := o.addr
	if tc != nil && !strings.Contains(addr, "://") {
		if strings.HasPrefix(addr, ":") {
			addr = "127.0.0.1" + addr
		}
		addr = "https://" + addr
	}
	base, err := normalizeAddr(addr)
	if err != nil {
		return nil, usageErr(cmd, "--addr: %v", err)
	}
	cl := newAPIClient(base, o.token, o.timeout)
	cl.transport.TLSClientConfig = tc
	cl.author = o.author
	if cl.author == "" {
		cl.author = c.defaultAuthor()
	}
	return cl, nil
}

// defaultAuthor is $USER@hostname (or what of it is known).
func (c *cli) defaultAuthor() string {
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

// staleFlag adds --stale to a command that reads rules: the answering
// node's local copy instead of the default read-your-writes read.
func staleFlag(cmd *cobra.Command) *bool {
	return cmd.Flags().Bool("stale", false, "read the answering node's local copy, which may miss recent writes (default: read-your-writes, through the Raft leader's read index)")
}

// request runs one admin call: it opens the client, calls the node, and
// prints the node's JSON with -o json or the human form otherwise.
func request[A any](c *cli, cmd *cobra.Command, o *adminOpts, call func(*apiClient) (A, []byte, error), human func(A) error) error {
	api, err := c.client(cmd, o)
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
