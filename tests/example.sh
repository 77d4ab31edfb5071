#!/usr/bin/env bash
# Runs examples/integration_stack.rs the way a Rust test suite uses the
# library, on the ci profile without its provider (so the library makes
# the choice), with the kit's bundle. Checks that the library chose what
# the CLI chooses for the same profile (`doctor --json` settles the
# provider as `up` does), that the round trip passed, and that the guard
# took the stack down: nothing labelled with its name is left.
set -euo pipefail
cd "$(dirname "$0")/.."
name="example-$$"
home=$(mktemp -d)
cleanup() {
  DEVSTACK_HOME=$home "$bin" -p "$home/unpinned.yaml" -q down >/dev/null 2>&1 || true
  ids=$(docker ps -aq --filter "label=dev.devstack.stack=$name")
  [ -z "$ids" ] || docker rm -f -v $ids >/dev/null
  rm -rf "$home"
}
trap cleanup EXIT
cargo build --quiet --bin devstack --example integration_stack
bin=${CARGO_TARGET_DIR:-$PWD/target}/debug/devstack
example=${CARGO_TARGET_DIR:-$PWD/target}/debug/examples/integration_stack
export DEVSTACK_NAME=$name DEVSTACK_HOME=$home
export DEVSTACK_BUNDLE=${DEVSTACK_KIT_BUNDLE:-$HOME/.cache/devstack/kit/bundle}
# The ci profile without its `cluster` block (which must name a provider):
# the provider is left to the choice. The kubeconfig merges into a file of
# the test's own.
export KUBECONFIG=$home/kubeconfig
sed '/^cluster:$/,/^[a-z]/{/^cluster:$/d;/^  /d}' profiles/ci.yaml >"$home/unpinned.yaml"
! grep -q '^cluster:\|provider:' "$home/unpinned.yaml" || { echo "error: tests/example.sh could not unpin the ci profile's provider" >&2; exit 1; }
# doctor exits 3 when a check of this machine fails; its choice is what counts here.
report=$("$bin" -p "$home/unpinned.yaml" doctor --json || true)
cli=$(jq -er .provider <<<"$report")
"$example" "$home/unpinned.yaml" | tee "$home/out.txt"
grep -q "round trip verified: true" "$home/out.txt"
grep -q "healthy: true, settled: true" "$home/out.txt"
library=$(sed -n 's/^provider: \([a-z0-9]*\) .*/\1/p' "$home/out.txt")
if [ "$library" != "$cli" ]; then
  echo "error: the library chose provider \`$library\`, the CLI \`$cli\`, for one profile" >&2
  exit 1
fi
echo "example: the library and the CLI both chose $cli"
left=$(docker ps -aq --filter "label=dev.devstack.stack=$name")
if [ -n "$left" ]; then
  echo "error: the guard left containers of stack $name: $left" >&2
  exit 1
fi
echo "example: the guard took stack $name down"
