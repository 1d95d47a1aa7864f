package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/tlsconf"
)

// tlsFlags are --tls-cert, --tls-key and --tls-ca, on every command that
// talks to or runs a node.
type tlsFlags struct {
	cert, key, ca string
}

func (f *tlsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.cert, "tls-cert", "", "`file` with this process's certificate (PEM; see weir tls); with --tls-key and --tls-ca, every connection is mutual TLS 1.3")
	fs.StringVar(&f.key, "tls-key", "", "`file` with the certificate's private key (PEM)")
	fs.StringVar(&f.ca, "tls-ca", "", "`file` with the cluster CA certificate(s) (PEM)")
	withEnv(fs, "tls-cert", "tls-key", "tls-ca")
}

func (f *tlsFlags) files() tlsconf.Files { return tlsconf.Files{Cert: f.cert, Key: f.key, CA: f.ca} }

// client is the TLS config of a gateway or admin command (nil without the
// flags). The trust domain is the one the certificate names.
func (f *tlsFlags) client(cmd *cobra.Command, log *slog.Logger) (*tls.Config, error) {
	files := f.files()
	if !files.Set() {
		return nil, nil
	}
	if err := files.Validate(); err != nil {
		return nil, usageErr(cmd, "%s", strings.TrimPrefix(err.Error(), tlsconf.ErrConfig.Error()+": "))
	}
	src, err := tlsconf.New(files, "", log)
	if err != nil {
		return nil, err
	}
	return src.ClientConfig(), nil
}

// tlsCmd is `weir tls`: a small CA for a test or small cluster.
func (c *cli) tlsCmd() *cobra.Command {
	return group(&cobra.Command{Use: "tls", Short: "Make a cluster CA and certificates for nodes, gateways and admins"},
		group(&cobra.Command{Use: "ca", Short: "Manage the cluster CA"}, c.tlsCACreateCmd()),
		group(&cobra.Command{Use: "cert", Short: "Issue certificates"}, c.tlsCertCreateCmd()),
	)
}

func (c *cli) tlsCACreateCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "create --dir DIR [--cluster NAME]", Args: noArgs,
		Short: "Create a cluster CA: DIR/ca.pem and DIR/ca-key.pem",
		Long: "Create a CA (ECDSA P-256) for the cluster named --cluster (the trust domain of its\n" +
			"certificates, spiffe://<cluster>/...): DIR/ca.pem, shared with every process, and\n" +
			"DIR/ca-key.pem, which only `weir tls cert create` needs. An existing CA is kept."}
	dir := cmd.Flags().String("dir", "", "`directory` to write into (required)")
	cluster := cmd.Flags().String("cluster", "weir", "cluster `name` (the nodes' --cluster-name)")
	days := cmd.Flags().Int("days", 3650, "validity in days")
	keep := cmd.Flags().Bool("if-missing", false, "succeed without writing when DIR already holds a CA (for a one-shot container that runs on every start)")
	force := cmd.Flags().Bool("force", false, "write the CA key even into a git work tree that does not ignore DIR")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *dir == "" {
			return usageErr(cmd, "--dir is required")
		}
		if *days < 1 {
			return usageErr(cmd, "--days %d: must be >= 1", *days)
		}
		if *keep {
			if _, err := tlsconf.LoadCA(*dir); err == nil {
				fmt.Fprintf(c.stdout, "kept the CA in %s\n", *dir)
				return nil
			}
		}
		ca, err := tlsconf.NewCA(*cluster, time.Duration(*days)*24*time.Hour)
		if err != nil {
			return usageErr(cmd, "%s", strings.TrimPrefix(err.Error(), tlsconf.ErrConfig.Error()+": "))
		}
		if !*force {
			if repo := unignoredInGit(filepath.Join(*dir, tlsconf.CAKeyFile)); repo != "" {
				return usageErr(cmd, "%s is inside the git work tree %s, which does not ignore it: the CA key would be one `git add -A` from a commit. "+
					"Add the directory to .gitignore, choose a --dir outside the work tree, or give --force", *dir, repo)
			}
		}
		if err := ca.WriteCA(*dir); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "wrote %s and %s (cluster %s)\n", filepath.Join(*dir, tlsconf.CAFile), filepath.Join(*dir, tlsconf.CAKeyFile), *cluster)
		return nil
	}
	return cmd
}

func (c *cli) tlsCertCreateCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "create --dir DIR [--node ID,...] [--gateway ID,...] [--admin NAME,...]", Args: noArgs,
		Short: "Issue certificates from DIR's CA for nodes, gateways and admins",
		Long: "Issue a certificate (ECDSA P-256, for server and client use) from the CA in DIR for\n" +
			"each name given, naming spiffe://<cluster>/<role>/<name>: DIR/<role>-<name>.pem and\n" +
			"DIR/<role>-<name>-key.pem, replaced atomically (a running process reloads them).\n" +
			"With --node, also the gossip keyring every node needs (--gossip-key-file):\n" +
			"DIR/" + gossipKeyringFile + ", written once (mode 0600) and kept on later runs.\n" +
			"With --p12, also DIR/admin-<name>.p12 (PKCS#12: the admin's certificate, key and the CA)\n" +
			"for a browser to open the dashboard under TLS (docs/operations.md)."}
	fs := cmd.Flags()
	dir := fs.String("dir", "", "`directory` holding ca.pem and ca-key.pem (required)")
	nodes := fs.StringSlice("node", nil, "nodes' `ids` (their --id), comma-separated or repeated")
	gws := fs.StringSlice("gateway", nil, "gateways' `ids`")
	admins := fs.StringSlice("admin", nil, "admins' `names`")
	cluster := fs.String("cluster", "", "cluster `name` (default: the CA's)")
	hosts := fs.StringSlice("host", nil, "extra IP or DNS SANs, for clients that check host names (Weir does not)")
	days := fs.Int("days", 365, "validity in days")
	p12 := fs.Bool("p12", false, "also write each admin's certificate, key and the CA as DIR/admin-<name>.p12 (PKCS#12), for a browser to open the dashboard with (docs/operations.md)")
	p12PassFile := fs.String("p12-password-file", "", "`file` holding the .p12 files' password (default: a new one, printed)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *dir == "" {
			return usageErr(cmd, "--dir is required")
		}
		if *p12 && len(trimAll(*admins)) == 0 {
			return usageErr(cmd, "--p12 needs --admin: it bundles admin certificates for a browser")
		}
		if *p12PassFile != "" && !*p12 {
			return usageErr(cmd, "--p12-password-file needs --p12")
		}
		var p12Pass string
		var p12Made bool
		if *p12 {
			var err error
			if p12Pass, p12Made, err = p12Password(*p12PassFile); err != nil {
				return usageErr(cmd, "--p12-password-file: %v", err)
			}
		}
		var ids []tlsconf.Identity
		for _, g := range []struct {
			role  tlsconf.Role
			names []string
		}{{tlsconf.RoleNode, *nodes}, {tlsconf.RoleGateway, *gws}, {tlsconf.RoleAdmin, *admins}} {
			for _, name := range trimAll(g.names) {
				ids = append(ids, tlsconf.Identity{Role: g.role, Name: name})
			}
		}
		if len(ids) == 0 {
			return usageErr(cmd, "give at least one of --node, --gateway or --admin")
		}
		if *days < 1 {
			return usageErr(cmd, "--days %d: must be >= 1", *days)
		}
		ca, err := tlsconf.LoadCA(*dir)
		if err != nil {
			return fmt.Errorf("loading the CA (run `weir tls ca create --dir %s` first): %w", *dir, err)
		}
		for i := range ids { // every name is checked before anything is written
			ids[i].Cluster = *cluster
			if ids[i].Cluster == "" {
				ids[i].Cluster = ca.Cluster()
			}
			if err := ids[i].Validate(); err != nil {
				return usageErr(cmd, "%s", strings.TrimPrefix(err.Error(), tlsconf.ErrIdentity.Error()+": "))
			}
		}
		for _, id := range ids {
			cert, key, err := ca.WriteCert(*dir, id, append([]string{"127.0.0.1", "localhost"}, trimAll(*hosts)...), time.Duration(*days)*24*time.Hour)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "wrote %s and %s (%s)\n", cert, key, id)
			if *p12 && id.Role == tlsconf.RoleAdmin {
				out := strings.TrimSuffix(cert, ".pem") + ".p12"
				if err := writeP12(out, cert, key, filepath.Join(*dir, tlsconf.CAFile), p12Pass); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "wrote %s (import it into the browser to open the dashboard)\n", out)
			}
		}
		if p12Made {
			fmt.Fprintf(c.stdout, "the .p12 password: %s\n", p12Pass)
		}
		if len(trimAll(*nodes)) == 0 {
			return nil
		}
		path, made, err := gossipKeyring(*dir)
		if err != nil {
			return err
		}
		if made {
			fmt.Fprintf(c.stdout, "wrote %s (the gossip key: give every node --gossip-key-file %s)\n", path, path)
		} else {
			fmt.Fprintf(c.stdout, "kept the gossip keyring %s\n", path)
		}
		return nil
	}
	return cmd
}

// gossipKeyringFile is the gossip keyring `weir tls cert create --node`
// and `weir dev --tls` write beside the certificates.
const gossipKeyringFile = "gossip-keyring"

// gossipKeyring writes a new gossip keyring to dir/gossip-keyring unless
// that already holds a valid one, and reports whether it wrote one.
func gossipKeyring(dir string) (path string, made bool, err error) {
	path = filepath.Join(dir, gossipKeyringFile)
	if _, err := peerauth.ReadKeyringFile(path); err == nil {
		return path, false, nil
	}
	if err := peerauth.WriteKeyringFile(path, peerauth.GenerateKey(), nil); err != nil {
		return path, false, err
	}
	return path, true, nil
}

// devTLS makes a CA, the dev node's, gateway's and an admin's
// certificates and a gossip keyring under dir/tls (kept across runs with
// the same --data-dir).
func devTLS(dir, nodeID string) (nodeFiles, gwFiles, adminFiles tlsconf.Files, keyring string, err error) {
	tdir := filepath.Join(dir, "tls")
	ca, err := tlsconf.LoadCA(tdir)
	if err != nil {
		if ca, err = tlsconf.NewCA("weir", 365*24*time.Hour); err != nil {
			return
		}
		if err = ca.WriteCA(tdir); err != nil {
			return
		}
	}
	issue := func(role tlsconf.Role, name string) (tlsconf.Files, error) {
		cert, key, err := ca.WriteCert(tdir, tlsconf.Identity{Cluster: "weir", Role: role, Name: name}, []string{"127.0.0.1", "localhost"}, 30*24*time.Hour)
		return tlsconf.Files{Cert: cert, Key: key, CA: filepath.Join(tdir, tlsconf.CAFile)}, err
	}
	if nodeFiles, err = issue(tlsconf.RoleNode, nodeID); err != nil {
		return
	}
	if gwFiles, err = issue(tlsconf.RoleGateway, "dev-gateway"); err != nil {
		return
	}
	if adminFiles, err = issue(tlsconf.RoleAdmin, "dev"); err != nil {
		return
	}
	keyring, _, err = gossipKeyring(tdir)
	return
}

// readTokenFile reads an admin token from path (surrounding space
// trimmed); an empty token is an error.
func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return tok, nil
}

// unignoredInGit returns the top of the git work tree holding path when
// git would not ignore path there, else "" (not in a work tree, ignored, or
// no git to ask). path need not exist yet.
func unignoredInGit(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	dir := filepath.Dir(abs)
	for { // git -C needs a directory that exists
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
	top, err := exec.Command("git", "-C", dir, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "" // not a work tree, or no git
	}
	// check-ignore exits 0 when ignored, 1 when not, 128 on errors.
	err = exec.Command("git", "-C", dir, "check-ignore", "-q", "--no-index", abs).Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return strings.TrimSpace(string(top))
	}
	return ""
}
