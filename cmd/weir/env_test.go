package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func TestBindEnv(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		interval time.Duration
		join     []string
		pprof    string
		err      string // in the error; "" for none
	}{
		{name: "neither", interval: 5 * time.Millisecond},
		{name: "flag", args: []string{"--replication-interval", "7ms", "--join", "a", "--join", "b,c"},
			interval: 7 * time.Millisecond, join: []string{"a", "b", "c"}},
		{name: "env", env: map[string]string{"WEIR_REPLICATION_INTERVAL": "50ms", "WEIR_JOIN": "x,y"},
			interval: 50 * time.Millisecond, join: []string{"x", "y"}},
		{name: "both: the flag wins", args: []string{"--replication-interval", "7ms"},
			env: map[string]string{"WEIR_REPLICATION_INTERVAL": "50ms"}, interval: 7 * time.Millisecond},
		{name: "empty variable is unset", env: map[string]string{"WEIR_REPLICATION_INTERVAL": ""}, interval: 5 * time.Millisecond},
		{name: "unmarked flag ignores its variable", env: map[string]string{"WEIR_PPROF": ":6060"}, interval: 5 * time.Millisecond},
		{name: "bad variable", env: map[string]string{"WEIR_REPLICATION_INTERVAL": "soon"},
			err: `$WEIR_REPLICATION_INTERVAL: invalid value "soon" for --replication-interval: time: invalid duration "soon"`},
		{name: "bad variable under a flag is not read", args: []string{"--replication-interval", "7ms"},
			env: map[string]string{"WEIR_REPLICATION_INTERVAL": "soon"}, interval: 7 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			interval := fs.Duration("replication-interval", 5*time.Millisecond, "")
			join := fs.StringSlice("join", nil, "")
			pprof := fs.String("pprof", "", "")
			withEnv(fs, "replication-interval", "join")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := bindEnv(fs, func(k string) string { return tt.env[k] })
			switch {
			case tt.err != "":
				if err == nil || err.Error() != tt.err {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if *interval != tt.interval || !slices.Equal(*join, tt.join) || *pprof != tt.pprof {
				t.Errorf("interval %s, join %q, pprof %q; want %s, %q, %q", *interval, *join, *pprof, tt.interval, tt.join, tt.pprof)
			}
		})
	}
}

// TestEnvironmentVariables pins which flags read which variables: every
// name that worked before the move to cobra, those added since (advertise,
// leave timeout, gRPC reflection), and no other.
func TestEnvironmentVariables(t *testing.T) {
	tlsVars := []string{"WEIR_TLS_CA", "WEIR_TLS_CERT", "WEIR_TLS_KEY"}
	node := []string{"WEIR_ADMIN_TOKEN", "WEIR_ADMIN_TOKEN_FILE", "WEIR_ADVERTISE", "WEIR_API_KEY_HEADER", "WEIR_BOOTSTRAP_EXPECT", "WEIR_CLUSTER_NAME", "WEIR_DATA_DIR", "WEIR_GOSSIP", "WEIR_GOSSIP_KEY_FILE", "WEIR_GOSSIP_UPGRADE", "WEIR_GRPC",
		"WEIR_GRPC_REFLECTION", "WEIR_HEADER_STYLE", "WEIR_HTTP", "WEIR_ID", "WEIR_JOIN", "WEIR_LEAVE_TIMEOUT", "WEIR_LOG_FORMAT", "WEIR_LOG_LEVEL", "WEIR_MAX_KEYS", "WEIR_PEER_REGIONS", "WEIR_PLAN_HEADER", "WEIR_RAFT",
		"WEIR_REGION", "WEIR_REGION_INTERVAL", "WEIR_REPLICATION_INTERVAL", "WEIR_RLS_EACH_DESCRIPTOR", "WEIR_SHARDS", "WEIR_TLS_CA", "WEIR_TLS_CERT", "WEIR_TLS_KEY", "WEIR_USER_HEADER"}
	node = append(node, "WEIR_GATEWAY_TOKEN_FILE", "WEIR_RLS_TRUST") // issue 25
	node = append(node, "WEIR_IDLE_TIMEOUT", "WEIR_READ_TOKEN_FILE") // issue 25: reads and idle connections
	// issue 29: durable counters
	node = append(node, "WEIR_PERSIST_INTERVAL", "WEIR_RESTORE_WAIT")
	slices.Sort(node)
	admin := []string{"WEIR_ADDR", "WEIR_AUTHOR", "WEIR_TLS_CA", "WEIR_TLS_CERT", "WEIR_TLS_KEY", "WEIR_TOKEN"}
	want := map[string][]string{"weir node": node, "weir dev": node, "weir health": tlsVars,
		"weir gateway": {"WEIR_CLUSTER", "WEIR_HEADER_STYLE", "WEIR_LOG_FORMAT", "WEIR_RULES_CACHE", "WEIR_TLS_CA", "WEIR_TLS_CERT", "WEIR_TLS_KEY", "WEIR_UNTIL_RULES", "WEIR_UNTIL_RULES_TIMEOUT"}}
	for _, p := range []string{"rules list", "rules get", "rules put", "rules apply", "rules delete", "rules history",
		"rules diff", "rules rollback", "rules import", "overrides set", "overrides list", "overrides delete", "check", "members",
		"keyring list", "keyring install", "keyring use", "keyring remove", "events", "top", "limits"} {
		want["weir "+p] = admin
	}
	want["weir rules regions"] = []string{"WEIR_TOKEN"}
	want["weir gateway"] = append(want["weir gateway"], "WEIR_TOKEN_FILE")
	slices.Sort(want["weir gateway"])
	got := map[string][]string{}
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if env := f.Annotations[envAnnotation]; env != nil {
				if want := "WEIR_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")); env[0] != want {
					t.Errorf("%s --%s reads %s, want %s", cmd.CommandPath(), f.Name, env[0], want)
				}
				got[cmd.CommandPath()] = append(got[cmd.CommandPath()], env[0])
			}
		})
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk((&cli{getenv: func(string) string { return "" }}).newRoot())
	for path, vars := range got {
		slices.Sort(vars)
		if !slices.Equal(vars, want[path]) {
			t.Errorf("%s reads %q, want %q", path, vars, want[path])
		}
	}
	for path := range want {
		if got[path] == nil {
			t.Errorf("%s reads no variable, want %q", path, want[path])
		}
	}

	// Through run: a bad value is a usage error naming the variable; a flag
	// on the command line hides it (WEIR_DATA_DIR is read: no "--data-dir
	// is required").
	dir := t.TempDir()
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"WEIR_REPLICATION_INTERVAL": "soon"}, []string{"node", "--data-dir", dir},
			"weir: $WEIR_REPLICATION_INTERVAL: invalid value \"soon\" for --replication-interval: time: invalid duration \"soon\"\nusage: weir node "},
		{map[string]string{"WEIR_BOOTSTRAP_EXPECT": "three"}, []string{"dev"}, "weir: $WEIR_BOOTSTRAP_EXPECT: invalid value \"three\""},
		{map[string]string{"WEIR_REPLICATION_INTERVAL": "soon", "WEIR_DATA_DIR": dir}, []string{"node", "--replication-interval", "0s"},
			"weir: --replication-interval 0s: must be > 0\n"},
	} {
		r := runCLI(t, "", tc.env, tc.args...)
		if r.code != exitUsage || !strings.HasPrefix(r.stderr, tc.want) {
			t.Errorf("%v weir %q: exit %d, stderr:\n%s\nwant exit 2 and prefix:\n%s", tc.env, tc.args, r.code, r.stderr, tc.want)
		}
	}
}
