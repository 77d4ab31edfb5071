#!/usr/bin/env bash
# Runs examples/integration_stack.rs the way a Rust test suite uses the
# library, on the ci profile with the kit's bundle, and checks that the
# guard took the stack down: nothing labelled with its name is left.
set -euo pipefail
cd "$(dirname "$0")/.."
name="example-$$"
home=$(mktemp -d)
cleanup() {
  ids=$(docker ps -aq --filter "label=dev.devstack.stack=$name")
  [ -z "$ids" ] || docker rm -f -v $ids >/dev/null
  rm -rf "$home"
}
trap cleanup EXIT
export DEVSTACK_NAME=$name DEVSTACK_HOME=$home
export DEVSTACK_BUNDLE=${DEVSTACK_KIT_BUNDLE:-$HOME/.cache/devstack/kit/bundle}
cargo run --quiet --example integration_stack -- ci | tee "$home/out.txt"
grep -q "round trip verified: true" "$home/out.txt"
grep -q "healthy: true, settled: true" "$home/out.txt"
left=$(docker ps -aq --filter "label=dev.devstack.stack=$name")
if [ -n "$left" ]; then
  echo "error: the guard left containers of stack $name: $left" >&2
  exit 1
fi
echo "example: the guard took stack $name down"
