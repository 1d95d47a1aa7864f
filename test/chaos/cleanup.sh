#!/bin/sh
# cleanup.sh RUN: removes every Docker object of chaos run RUN (labelled
# weir-chaos-run=RUN, or the Compose project RUNcompose), even if the test
# binary was killed before its own cleanup ran. Called by `make chaos`.
set -u
run=${1:?usage: cleanup.sh RUN}
for filter in "label=weir-chaos-run=$run" "label=com.docker.compose.project=${run}compose"; do
  ids=$(docker ps -aq --filter "$filter"); [ -z "$ids" ] || docker rm -f -v $ids >/dev/null
  ids=$(docker network ls -q --filter "$filter"); [ -z "$ids" ] || docker network rm $ids >/dev/null
  ids=$(docker volume ls -q --filter "$filter"); [ -z "$ids" ] || docker volume rm -f $ids >/dev/null
done
exit 0
