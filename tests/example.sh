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

# The CI example README shows (examples/github-actions/devstack.yml), its
# devstack steps run as the job runs them, on the kit's bundle: every line
# of its `run:` steps that runs devstack, but `pull`, which fetches from
# upstream's registries, which this test does not reach
# (tests/unit/docs.rs parses every one of them with the CLI, `pull` too).
workflow=examples/github-actions/devstack.yml
devstack() { "$bin" "$@"; }
export -f devstack
export bin GITHUB_OUTPUT=$home/github-output
: >"$GITHUB_OUTPUT"
mapfile -t lines < <(awk '
  block && NF && match($0, /^ */) && RLENGTH > indent { sub(/^ +/, ""); print; next }
  block && NF { block = 0 }
  /^ *run: [|]$/ { block = 1; match($0, /^ */); indent = RLENGTH; next }
  /^ *run: / { sub(/^ *run: /, ""); print }
' "$workflow" | grep -E '(^|[;&|(]|[$][(])[[:space:]]*devstack ')
ran=()
for line in "${lines[@]}"; do
  if [[ "$line" == *"devstack "*" pull"* ]]; then
    echo "example: CI step not run here (it fetches from upstream's registries): $line"
    continue
  fi
  echo "example: CI step: $line"
  # A line that sets the stack's environment is checked to have set it.
  env -u AWS_ENDPOINT_URL bash -c "set -euo pipefail; $line; [[ \"\$0\" != *eval* ]] || [ -n \"\${AWS_ENDPOINT_URL:-}\" ]" "$line"
  ran+=("$line")
done
printf '%s\n' "${ran[@]}" | grep -q -- '-p ci up$' || { echo "error: no \`devstack -p ci up\` step found in $workflow" >&2; exit 1; }
printf '%s\n' "${ran[@]}" | grep -q -- '-p ci down$' || { echo "error: no \`devstack -p ci down\` step found in $workflow" >&2; exit 1; }
# The cache key: the hash of the pins in effect, not of an empty output.
pins=$("$bin" version --json | jq -ce '.pins')
key=$(printf '%s\n' "$pins" | sha256sum | cut -d' ' -f1)
grep -qx "hash=$key" "$GITHUB_OUTPUT" || { echo "error: the CI example's cache key step wrote $(cat "$GITHUB_OUTPUT"), not hash=$key" >&2; exit 1; }
left=$(docker ps -aq --filter "label=dev.devstack.stack=$name")
if [ -n "$left" ]; then
  echo "error: the CI example's down left containers of stack $name: $left" >&2
  exit 1
fi
echo "example: the CI example's ${#ran[@]} devstack steps ran; its cache key is the pins' hash"
