#!/usr/bin/env bash
# `make bench`: speed figures, measured with the release binary against the
# real Docker engine and LocalStack image. Not a test: it reports numbers.
#
#   BENCH_RUNS   repetitions per figure (default 5); medians are reported
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${BENCH_RUNS:-5}
bash tests/host/setup-docker.sh >/dev/null
bash tests/kit/build.sh localstack >/dev/null
cargo build --release --quiet
bin=$PWD/target/release/devstack
work=$(mktemp -d)
stack=bench-$$
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cleanup() {
  docker rm -f -v $(docker ps -aq --filter "label=dev.devstack.stack=$stack") >/dev/null 2>&1 || true
  docker network rm $(docker network ls -q --filter "label=dev.devstack.stack=$stack") >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

profile() { # $1 = number of secrets
  {
    printf 'apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: %s\nlocalstack:\n  port: %s\n' "$stack" "$port"
    if [ "$1" -gt 0 ]; then
      echo "secrets:"
      for i in $(seq 1 "$1"); do printf '  - {name: bench/s%03d, generate: {length: 32}}\n' "$i"; done
    fi
  } >"$work/profile.yaml"
}
now_ms() { date +%s%3N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ds() { DEVSTACK_HOME=$work/state CI=1 "$bin" --profile "$work/profile.yaml" -q "$@"; }

profile 200
cold=(); warm=(); seq_rate=(); conc_rate=()
for r in $(seq 1 "$runs"); do
  cleanup_containers() { docker rm -f -v $(docker ps -aq --filter "label=dev.devstack.stack=$stack") >/dev/null 2>&1 || true; }
  cleanup_containers
  t0=$(now_ms); ds localstack up; t1=$(now_ms); cold+=($((t1 - t0)))
  t0=$(now_ms); ds localstack up; t1=$(now_ms); warm+=($((t1 - t0)))
  t0=$(now_ms); ds seed --concurrency 1; t1=$(now_ms)
  seq_rate+=("$(awk -v ms=$((t1 - t0)) 'BEGIN {printf "%.1f", 200000/ms}')")
  ds localstack down; ds localstack up
  t0=$(now_ms); ds seed --concurrency 16; t1=$(now_ms)
  conc_rate+=("$(awk -v ms=$((t1 - t0)) 'BEGIN {printf "%.1f", 200000/ms}')")
done
# K3s: create-to-Ready with the offline bundle preloaded, and delete.
bundle=${DEVSTACK_KIT_BUNDLE:-$HOME/.cache/devstack/kit/bundle}
k3s_up=(); k3s_down=()
if docker image inspect "$(grep -o 'rancher/k3s:[^"]*' src/versions.rs)" >/dev/null 2>&1 && [ -f "$bundle/index.json" ]; then
  printf 'apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: %s\nlocalstack:\n  port: %s\ncluster:\n  provider: k3s\n  kubeconfig: {merge: false}\nimages:\n  bundle: %s\n' "$stack" "$port" "$bundle" >"$work/profile.yaml"
  for r in $(seq 1 "$runs"); do
    t0=$(now_ms); ds cluster up; t1=$(now_ms); k3s_up+=($((t1 - t0)))
    t0=$(now_ms); ds cluster down; t1=$(now_ms); k3s_down+=($((t1 - t0)))
  done
fi

echo "devstack bench ($runs runs, medians; $(nproc) cores; $(docker version -f '{{.Server.Version}}') engine)"
printf 'localstack cold start-to-healthy   %6s ms\n' "$(printf '%s\n' "${cold[@]}" | median)"
printf 'localstack warm reuse (up again)   %6s ms\n' "$(printf '%s\n' "${warm[@]}" | median)"
printf 'seed 200 secrets, sequential       %6s secrets/s\n' "$(printf '%s\n' "${seq_rate[@]}" | median)"
printf 'seed 200 secrets, 16 concurrent    %6s secrets/s\n' "$(printf '%s\n' "${conc_rate[@]}" | median)"
if [ ${#k3s_up[@]} -gt 0 ]; then
  printf 'k3s cluster create-to-Ready       %6s ms (bundle preloaded, CoreDNS serving)\n' "$(printf '%s\n' "${k3s_up[@]}" | median)"
  printf 'k3s cluster delete                %6s ms\n' "$(printf '%s\n' "${k3s_down[@]}" | median)"
else
  echo "k3s cluster: SKIPPED (no kit node image or bundle; run make kit)"
fi
