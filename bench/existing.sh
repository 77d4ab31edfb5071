#!/usr/bin/env bash
# `make bench`, existing-cluster rows: a cold `up` (to a verified round trip,
# LocalStack in the cluster) on a Kind cluster made beforehand with the kit's
# `kind create cluster`, beside the same profile on a Kind cluster devstack
# creates itself, and the `down` that leaves the existing cluster as it was.
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
bundle=${DEVSTACK_KIT_BUNDLE:-$HOME/.cache/devstack/kit/bundle}
kind=$bundle/bin/kind
[ -x "$kind" ] || die "no kind CLI in the kit bundle at $bundle (run make kit)"
work=$(mktemp -d)
cluster=devstack-bench-existing-$$
own=bench-own-$$
cleanup() {
  "$kind" delete cluster --name "$cluster" --kubeconfig "$work/kubeconfig" >/dev/null 2>&1 || true
  "$kind" delete cluster --name "devstack-$own" --kubeconfig "$work/own-kubeconfig" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

secrets='secrets:\n  - name: ci/app/token\n    generate: {length: 32, charset: hex}\n    sync: {namespace: default, secretName: app-token}\n'
printf "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: bench-existing\ncluster:\n  provider: existing\n  context: kind-$cluster\nimages:\n  bundle: $bundle\n$secrets" >"$work/existing.yaml"
printf "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: $own\ncluster:\n  provider: kind\n  kubeconfig: {merge: false}\nlocalstack:\n  mode: in-cluster\nimages:\n  bundle: $bundle\n$secrets" >"$work/own.yaml"

ds() { # $1 profile, rest: arguments
  local profile=$1
  shift
  KUBECONFIG="$work/kubeconfig" DEVSTACK_HOME="$work/state" CI=1 "$bin" --profile "$work/$profile.yaml" -q "$@"
}
inventory() { # what `down` must leave as it was; empty without kubectl
  command -v kubectl >/dev/null || return 0
  KUBECONFIG="$work/kubeconfig" kubectl get namespaces,crds,clusterroles,clusterrolebindings -o name 2>/dev/null | sort
}

"$kind" create cluster --name "$cluster" --image kindest/node:v1.36.4 --kubeconfig "$work/kubeconfig" --wait 3m >/dev/null 2>&1 \
  || die "kind create cluster failed"
before=$(inventory)
left=0
for r in $(seq 1 "$runs"); do
  bench_run=$r
  measure existing_up ds existing up --json
  measure existing_down ds existing down
  [ "$(inventory)" = "$before" ] || left=$((left + 1))
  measure own_up ds own up --json
  ds own down >/dev/null 2>&1
done

echo "--- an existing Kind cluster (LocalStack in the cluster), median"
row "up, cold, on an existing Kind cluster (1 node)" existing_up s 1000
row "the same profile on a Kind cluster devstack creates" own_up s 1000
row "down on the existing cluster (the cluster stays)" existing_down s 1000
if command -v kubectl >/dev/null; then
  printf '%-56s %s of %s\n' "downs that left the cluster as it was" "$((runs - left))" "$runs"
fi
