// Package chaos holds the chaos suite: a three-node Weir cluster in
// containers (the FROM scratch image of `make image`) on a Docker network
// of its own, driven from the host while faults are injected with the
// docker CLI: SIGKILL and restart, freeze (docker pause), a network cut
// (docker network disconnect), a rolling restart and a full stop and start
// from the volumes. It also brings up deploy/compose.yaml and checks it.
//
// The tests are behind the build tag "chaos", so `go test ./...` does not
// run them; `make chaos` builds the image and runs them:
//
//	make chaos                          # or:
//	WEIR_CHAOS_IMAGE=weir:dev go test -tags chaos -count=1 -v ./test/chaos/
//
// Every Docker object a run makes carries the label weir-chaos-run=<run id>
// (WEIR_CHAOS_RUN, else random) and a name starting with it; the test
// removes them at the end, failed or not, and `make chaos` removes them
// again by label in case the test binary itself was killed.
//
// Environment: WEIR_CHAOS_IMAGE (default weir:dev), WEIR_CHAOS_RUN,
// WEIR_CHAOS_STRICT (default 1; 0 reports the cut fault's over-admission
// without failing on it), WEIR_CHAOS_FAULTS (a comma-separated subset of
// kill, pause, cut, rolling, full).
package chaos
