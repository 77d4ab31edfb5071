#!/usr/bin/env bash
# `make clean-test-resources`: removes what test runs left behind (a test
# killed before its guard ran): containers, networks and volumes of stacks
# the tests name `t-*` and `bench-*` (by devstack's stack label, or kind's
# cluster label `devstack-t-*`), and the test mirror's containers. Nothing
# without one of those labels is touched.
set -euo pipefail
is_test_stack() { [[ "$1" == t-* || "$1" == bench-* ]]; }
removed=0
for id in $(docker ps -aq --filter label=dev.devstack.stack); do
  stack=$(docker inspect -f '{{index .Config.Labels "dev.devstack.stack"}}' "$id")
  is_test_stack "$stack" && { docker rm -f -v "$id" >/dev/null; removed=$((removed + 1)); }
done
for id in $(docker ps -aq --filter label=io.x-k8s.kind.cluster); do
  cluster=$(docker inspect -f '{{index .Config.Labels "io.x-k8s.kind.cluster"}}' "$id")
  is_test_stack "${cluster#devstack-}" && [[ "$cluster" == devstack-* ]] && { docker rm -f -v "$id" >/dev/null; removed=$((removed + 1)); }
done
for id in $(docker ps -aq --filter label=dev.devstack.test-mirror); do
  docker rm -f "$id" >/dev/null; removed=$((removed + 1))
done
for kind in network volume; do
  for name in $(docker "$kind" ls -q --filter label=dev.devstack.stack); do
    stack=$(docker "$kind" inspect -f '{{index .Labels "dev.devstack.stack"}}' "$name")
    is_test_stack "$stack" && { docker "$kind" rm "$name" >/dev/null 2>&1 && removed=$((removed + 1)) || true; }
  done
done
echo "removed $removed test resource(s)"
