package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// The environment. A flag marked by withEnv is also set by its variable,
// WEIR_ and the flag's name in upper case with "-" as "_" (--admin-token:
// WEIR_ADMIN_TOKEN). bindEnv, run once before every command (the root's
// PersistentPreRunE), is the only code that reads these variables: a flag
// given on the command line wins over its variable, the variable over the
// flag's default.

// envAnnotation is the pflag annotation holding a flag's variable.
const envAnnotation = "weir_env"

// withEnv marks the named flags of fs as set by their variables and names
// the variable in each flag's help.
func withEnv(fs *pflag.FlagSet, names ...string) {
	for _, name := range names {
		env := "WEIR_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		f := fs.Lookup(name) // one of the command's own flags, just defined
		f.Usage += " ($" + env + ")"
		f.Annotations = map[string][]string{envAnnotation: {env}}
	}
}

// bindEnv sets each marked flag of fs that was not given on the command
// line from its variable, if that is set and not empty.
func bindEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		env := f.Annotations[envAnnotation]
		if err != nil || len(env) == 0 || f.Changed {
			return
		}
		if v := getenv(env[0]); v != "" {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("$%s: invalid value %q for --%s: %v", env[0], v, f.Name, serr)
			}
		}
	})
	return err
}
