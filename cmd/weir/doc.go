// Command weir runs Weir nodes and administers a Weir cluster.
//
// One binary holds every role: `weir node` and `weir dev` run a node,
// `weir gateway` and `weir bench` run the gateway example and the load
// generator, and the admin commands (`rules`, `overrides`, `check`,
// `members`/`status`) talk to any node's HTTP API; `version`, `help` and
// `completion bash|zsh|fish` complete the set.
//
// This package owns the command line: a cobra command tree built afresh
// for each run (newRoot; one constructor per command, its flags typed
// pflag values), the environment, signal handling and exit codes. It is
// the only place where flags and environment variables are read;
// everything below it takes values. A flag marked by withEnv is also set
// by WEIR_<FLAG NAME> (WEIR_ADDR, WEIR_TOKEN, WEIR_DATA_DIR, ...); bindEnv
// applies them in one place, before every command runs: the command line
// wins over the environment, the environment over the default.
//
// Invariants:
//   - run never calls os.Exit and keeps no package-level state, so tests
//     call it in-process, many times and concurrently, with their own
//     stdin, stdout, stderr and getenv. main is the only function that
//     exits.
//   - Exit codes: 0 success (a denied check is a success), 2 a usage error
//     (unknown command, missing argument, bad flag or variable: anything
//     refused before the command runs), 1 anything else. Help asked for
//     with -h, --help or `weir help` goes to stdout and exits 0.
//   - Errors are one clear sentence on stderr prefixed "weir: ", never a
//     stack trace. A bad rules file is validated locally first and every
//     problem is listed; nothing is sent to the node.
//   - Each admin command builds its own HTTP transport and closes its idle
//     connections before returning, so no goroutine outlives run.
package main
