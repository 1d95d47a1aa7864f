package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/weirlimit/weir/node/rls"
)

// --rls-trust takes negative-hits and overrides; an unknown word is a
// usage error that names it.
func TestRLSTrustFlag(t *testing.T) {
	for _, tc := range []struct {
		trust string
		want  rls.Trust
		err   string
	}{
		{"", rls.Trust{}, ""},
		{"negative-hits", rls.Trust{NegativeHits: true}, ""},
		{"negative-hits,overrides", rls.Trust{NegativeHits: true, Overrides: true}, ""},
		{"overrides,refunds", rls.Trust{}, `--rls-trust: trust "refunds": want a comma-separated list of negative-hits and overrides`},
	} {
		var f nodeFlags
		cmd := &cobra.Command{Use: "node"}
		f.register(cmd.Flags(), false)
		if err := cmd.Flags().Parse([]string{"--data-dir", t.TempDir(), "--rls-trust", tc.trust}); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.config(cmd)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("--rls-trust %q: %v, want %q", tc.trust, err, tc.err)
			}
		case err != nil || cfg.RLSTrust != tc.want:
			t.Fatalf("--rls-trust %q: %+v, %v; want %+v", tc.trust, cfg.RLSTrust, err, tc.want)
		}
	}
}
