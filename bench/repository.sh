#!/usr/bin/env bash
# `make bench`, the user's repository rows: a cold `up` (to a verified round
# trip) of examples/gitops-repo, facts and apps layer included, beside the
# same profile without `gitops.apps` and `facts` (the chain alone), on K3s
# from the offline kit; and `sync` of the repository with nothing changed.
# Timed from the shell around the whole command; each row says how many of
# N runs produced it.
#
#   BENCH_RUNS   runs per figure (default 3)
#   BENCH_BIN    the devstack binary to time (default: a release build)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${BENCH_RUNS:-3}
source bench/lib.sh
bash scripts/setup-docker.sh >/dev/null
bench_binary
require_bundle
work=$(mktemp -d)
stack=bench-repo-$$
cleanup() {
  for p in apps chain; do
    [ -f "$work/$p/devstack.yaml" ] && ds "$p" down >/dev/null 2>&1
  done
  docker rm -f -v $(docker ps -aq --filter "label=dev.devstack.stack=$stack") >/dev/null 2>&1 || true
  docker network rm $(docker network ls -q --filter "label=dev.devstack.stack=$stack") >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
ds() { # $1 profile directory, rest: arguments
  local dir=$1
  shift
  SHOP_DOMAIN=shop.bench DEVSTACK_HOME="$work/state" CI=1 "$bin" --profile "$work/$dir/devstack.yaml" -q "$@"
}

# The example as it is, given the bench stack's name, K3s and the bundle;
# and the same without its apps layer and facts.
cp -r examples/gitops-repo "$work/apps"
sed -i "s/^name: shop$/name: $stack/" "$work/apps/devstack.yaml"
printf 'cluster:\n  provider: k3s\n  kubeconfig: {merge: false}\nimages:\n  bundle: %s\n' "$bundle" >>"$work/apps/devstack.yaml"
mkdir -p "$work/chain"
python3 - "$work/apps/devstack.yaml" "$work/chain/devstack.yaml" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
out, skip = [], False
for line in lines:
    if line.startswith(("facts:", "gitops:")):
        skip = True
        continue
    if skip and (line.startswith(" ") or line.startswith("#") or line == ""):
        continue
    skip = False
    out.append(line)
open(sys.argv[2], "w").write("\n".join(out))
PY
grep -q '^facts:\|^gitops:' "$work/chain/devstack.yaml" && die "the chain-only profile still has facts or apps"

for r in $(seq 1 "$runs"); do
  bench_run=$r
  measure chain_up ds chain up --json
  ds chain down >/dev/null 2>&1
  measure apps_up ds apps up --json
  measure apps_sync ds apps sync --json
  ds apps down >/dev/null 2>&1
done

echo "--- examples/gitops-repo on K3s (offline bundle), median"
row "cold up, the chain alone (the example without apps, facts)" chain_up s 1000
row "cold up, the example: facts, values, 2 apps Ready" apps_up s 1000
compare "the apps layer's share of cold up" apps_up chain_up
row "sync of the example, nothing changed" apps_sync s 1000
