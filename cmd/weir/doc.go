// Command weir runs Weir nodes and administers a Weir cluster.
//
// One binary holds every role: `weir node` and `weir dev` run a node,
// `weir gateway` and `weir bench` run the gateway example and the load
// generator, and the admin commands (`rules`, `overrides`, `check`,
// `members`/`status`, `version`, `help`) talk to any node's HTTP API.
//
// This package owns the command line: dispatch, flag parsing (one
// flag.FlagSet per subcommand), the environment (WEIR_ADDR, WEIR_TOKEN),
// signal handling and exit codes. It is the only place where flags and
// environment variables are read; everything below it takes values.
//
// Invariants:
//   - run never calls os.Exit and keeps no package-level state, so tests
//     (and the end-to-end suites in /test) call it in-process, many times
//     and concurrently. main is the only function that exits.
//   - Exit codes: 0 success (a denied check is a success), 2 a usage error
//     (unknown command, missing argument, bad flag), 1 anything else. Help
//     asked for with -h or `weir help` exits 0.
//   - Errors are one clear sentence on stderr prefixed "weir: ", never a
//     stack trace. A bad rules file is validated locally first and every
//     problem is listed; nothing is sent to the node.
//   - Each admin command builds its own HTTP transport and closes its idle
//     connections before returning, so no goroutine outlives run.
package main
