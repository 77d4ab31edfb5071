#!/usr/bin/env bash
# `make bench`, engine rows: a cold `up` (new cluster, to a verified round
# trip) and its `down`, of the K3s ci profile and of the default profile on
# Kind, on the machine's Docker engine and on the kit's current one
# (tests/engines/engine.sh: dockerd 28.5.2, containerd image store,
# `"init": true`, minimum API 1.44) side by side, runs alternating so that
# both meet the same machine. Both engines hold the stack's images before
# the first measured run (an unmeasured run fills the second one), so the
# rows compare the engines, not a first load. Timed from the shell around
# the whole command; each row says how many of N runs produced it.
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
engine=tests/engines/engine.sh
work=$(mktemp -d)
chmod 755 "$work"
cleanup() {
  for where in host current; do
    for p in k3s kind; do ds "$where" "$p" down >/dev/null 2>&1 || true; done
  done
  [ -n "${engine_started:-}" ] && bash "$engine" stop >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

secrets='secrets:\n  - name: ci/app/token\n    generate: {length: 32, charset: hex}\n    sync: {namespace: default, secretName: app-token}\n'
for where in host current; do
  printf "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: bench-eng-k3s-$where\ncluster:\n  provider: k3s\n  kubeconfig: {merge: false}\nimages:\n  bundle: $bundle\n$secrets" >"$work/$where-k3s.yaml"
  printf "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: bench-eng-kind-$where\ncluster:\n  provider: kind\n  kubeconfig: {merge: false}\nimages:\n  bundle: $bundle\n$secrets" >"$work/$where-kind.yaml"
done

ds() { # $1 host|current, $2 k3s|kind, rest: arguments
  local where=$1 profile=$2
  shift 2
  local run=(env DEVSTACK_HOME="$work/$where-state" CI=1 "$bin" --profile "$work/$where-$profile.yaml" -q "$@")
  if [ "$where" = current ]; then bash "$engine" exec "${run[@]}"; else "${run[@]}"; fi
}

bash "$engine" start >"$work/engine.log" 2>&1 || die "the current engine did not start ($(tail -1 "$work/engine.log"))"
engine_started=1
current_version=$(bash "$engine" exec docker version --format '{{.Server.Version}}')
host_version=$(docker version --format '{{.Server.Version}}')
echo "engines: machine's Docker $host_version; current Docker $current_version (containerd image store, min API 1.44)"

for p in k3s kind; do
  ds current "$p" up >/dev/null 2>"$work/warm.err" || die "the unmeasured $p run on the current engine failed: $(tail -1 "$work/warm.err")"
  ds current "$p" down >/dev/null 2>&1
done

for r in $(seq 1 "$runs"); do
  bench_run=$r
  for p in k3s kind; do
    for where in host current; do
      if measure "${where}_${p}_up" ds "$where" "$p" up --json; then
        measure "${where}_${p}_down" ds "$where" "$p" down
      else
        ds "$where" "$p" down >/dev/null 2>&1
        missed "its up failed" "${where}_${p}_down"
      fi
    done
  done
done

echo "--- cold up to a verified round trip, and down, median (Docker $host_version | Docker $current_version)"
for p in k3s kind; do
  row "$p: up, Docker $host_version (classic store)" "host_${p}_up" s 1000
  row "$p: up, Docker $current_version (containerd store)" "current_${p}_up" s 1000
  compare "$p: up, current against the machine's" "current_${p}_up" "host_${p}_up"
  row "$p: down, Docker $host_version" "host_${p}_down" s 1000
  row "$p: down, Docker $current_version" "current_${p}_down" s 1000
done
