package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/weirlimit/weir/internal/peerauth"
)

// keyringAnswer is keyringapi.Answer as the CLI reads it.
type keyringAnswer struct {
	Op      string `json:"op"`
	Key     string `json:"key"`
	Members []struct {
		Node    string   `json:"node"`
		Primary string   `json:"primary"`
		Keys    []string `json:"keys"`
		Error   string   `json:"error"`
	} `json:"members"`
}

func (c *apiClient) keyring(ctx context.Context, op, key string) (keyringAnswer, []byte, error) {
	var a keyringAnswer
	if op == "list" {
		raw, err := c.getJSON(ctx, "/v1/keyring", nil, &a)
		return a, raw, err
	}
	raw, err := c.sendJSON(ctx, http.MethodPost, "/v1/keyring/"+op, nil, map[string]string{"key": key}, &a)
	return a, raw, err
}

func (c *cli) keyringCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "keyring", GroupID: "admin",
		Short: "List and rotate the cluster's gossip encryption keys",
		Long: "Rotate the gossip key across the live cluster without dropping a member:\n\n" +
			"  weir keyring install NEWKEY   # every member accepts NEWKEY\n" +
			"  weir keyring use NEWKEY       # every member encrypts and signs with NEWKEY\n" +
			"  weir keyring remove OLDKEY    # OLDKEY is no longer accepted\n\n" +
			"Keys are base64, 32 bytes (weir keyring generate). The node at --addr applies the\n" +
			"change to every live member; each keeps its keyring in its data dir, so a restart\n" +
			"keeps it. Keys are shown by fingerprint (first 8 bytes of their SHA-256), never in\n" +
			"clear. Needs the admin token (a node without one takes keyring changes from its\n" +
			"own machine only)."}
	show := func(o *adminOpts, op string) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			key := ""
			if op != "list" {
				k, err := peerauth.ParseKey(args[0])
				if err != nil {
					return usageErr(cmd, "%v", err)
				}
				key = peerauth.EncodeKey(k)
			}
			return request(c, cmd, o, func(api *apiClient) (keyringAnswer, []byte, error) { return api.keyring(cmd.Context(), op, key) },
				func(a keyringAnswer) error {
					if op != "list" {
						fmt.Fprintf(c.stdout, "%s %s: done on %d members\n", op, a.Key, len(a.Members))
					}
					tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NODE\tPRIMARY\tKEYS\tERROR")
					for _, m := range a.Members {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Node, m.Primary, strings.Join(m.Keys, ","), m.Error)
					}
					return tw.Flush()
				})
		}
	}
	sub := func(use, short string, nargs int) *cobra.Command {
		op := strings.Fields(use)[0]
		s := &cobra.Command{Use: use, Short: short, Args: cobra.ExactArgs(nargs)}
		s.RunE = show(adminFlags(s), op)
		return s
	}
	var out string
	gen := &cobra.Command{Use: "generate [--out FILE]", Short: "Print a new random key (base64, 32 bytes), or write a keyring file", Args: noArgs,
		Long: "Print a new random gossip key. With --out, write it as a keyring file (mode 0600)\n" +
			"instead, unless FILE already holds a valid keyring, which is kept: a container\n" +
			"that runs this at every start (deploy/compose.yaml) creates the key once.",
		RunE: func(*cobra.Command, []string) error {
			if out == "" {
				_, err := fmt.Fprintln(c.stdout, peerauth.EncodeKey(peerauth.GenerateKey()))
				return err
			}
			if _, err := peerauth.ReadKeyringFile(out); err == nil {
				_, err := fmt.Fprintf(c.stdout, "%s holds a keyring already; kept\n", out)
				return err
			}
			k := peerauth.GenerateKey()
			if err := peerauth.WriteKeyringFile(out, k, nil); err != nil {
				return err
			}
			_, err := fmt.Fprintf(c.stdout, "wrote a new keyring to %s\n", out)
			return err
		}}
	gen.Flags().StringVar(&out, "out", "", "write a keyring `file` (kept if it already holds one)")
	return group(cmd,
		sub("list", "Show every live member's keys and primary key", 0),
		sub("install KEY", "Add KEY to every live member's keyring (accepted, not yet used)", 1),
		sub("use KEY", "Make KEY every live member's primary (each must hold it)", 1),
		sub("remove KEY", "Remove KEY from every live member's keyring (none may use it as primary)", 1),
		gen)
}
