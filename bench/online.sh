#!/usr/bin/env bash
# `make bench`, online rows: a cold `up` (to a verified round trip) as
# a user with network runs it — no bundle, the artifacts fetched into an
# empty cache through the local registry and file server that stand in for
# upstream (tests/online/mirror.sh) — and with a warm cache, beside the same
# profile from the offline bundle. Each figure is timed the same way, from
# the shell around the whole command, and says how many of N runs produced it.
#
#   BENCH_RUNS   runs per figure (default 3)
#   BENCH_BIN    the devstack binary to time (default: a release build,
#                built here); both sides always use the same one
#   BENCH_PROVIDER  k3s (default: the ci shape, one server) or kind (the
#                default profile's shape: a control plane and a worker)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${BENCH_RUNS:-3}
provider=${BENCH_PROVIDER:-k3s}
case "$provider" in
  k3s) cluster_yaml='  provider: k3s' ;;
  kind) cluster_yaml=$'  provider: kind\n  servers: 1\n  agents: 1' ;;
  *) echo "error: BENCH_PROVIDER=$provider: k3s or kind" >&2; exit 2 ;;
esac
source bench/lib.sh
bash scripts/setup-docker.sh >/dev/null
bench_binary
bundle=${DEVSTACK_KIT_BUNDLE:-$HOME/.cache/devstack/kit/bundle}
[ -f "$bundle/index.json" ] || { echo "error: no kit bundle at $bundle (run make kit)" >&2; exit 1; }
work=$(mktemp -d)
stack=bench-online-$$
cleanup() {
  for s in "$stack" "$stack-2"; do
    docker rm -f -v $(docker ps -aq --filter "label=dev.devstack.stack=$s") >/dev/null 2>&1 || true
    docker network rm $(docker network ls -q --filter "label=dev.devstack.stack=$s") >/dev/null 2>&1 || true
    docker volume rm -f $(docker volume ls -q --filter "label=dev.devstack.stack=$s") >/dev/null 2>&1 || true
  done
  bash tests/online/mirror.sh stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
eval "$(bash tests/online/mirror.sh start 2>/dev/null)"
online_env=(DEVSTACK_MIRRORS="$DEVSTACK_MIRRORS" DEVSTACK_DOWNLOAD_MIRROR="$DEVSTACK_DOWNLOAD_MIRROR" DEVSTACK_PINS="$DEVSTACK_PINS")
unset DEVSTACK_MIRRORS DEVSTACK_DOWNLOAD_MIRROR DEVSTACK_PINS DEVSTACK_BUNDLE

profile() { # $1 name, $2 with the offline bundle (1) or not (0)
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  printf 'apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: %s\nlocalstack:\n  port: %s\ncluster:\n%s\n  kubeconfig: {merge: false}\n' "$1" "$port" "$cluster_yaml" >"$work/$1.yaml"
  [ "$2" = 1 ] && printf 'images:\n  bundle: %s\n' "$bundle" >>"$work/$1.yaml"
  return 0
}
# run NAME HOME [env...] -- one `up --json` of stack NAME; appends ms to
# the array named by $figure, or records the failure.
declare -A failures
up_timed() { # $1 figure, $2 stack, $3 home, rest: env
  local figure=$1 name=$2 home=$3; shift 3
  local t0 t1 out="$work/$figure-$RANDOM.json"
  t0=$(now_ms)
  if env "$@" DEVSTACK_HOME="$home" CI=1 "$bin" --profile "$work/$name.yaml" -q up --json >"$out" 2>"$out.err" \
     && jq -e '.verify.passed == true' "$out" >/dev/null; then
    t1=$(now_ms); eval "$figure+=($((t1 - t0)))"; last_report=$out
  else
    failures[$figure]+="$(tail -1 "$out.err") | "; last_report=
  fi
  env "$@" DEVSTACK_HOME="$home" "$bin" --profile "$work/$name.yaml" -q down >/dev/null 2>&1 || true
}

offline=(); online_cold=(); online_warm=(); second_bytes=()
for r in $(seq 1 "$runs"); do
  profile "$stack" 1
  up_timed offline "$stack" "$work/offline"
  profile "$stack" 0
  rm -rf "$work/online"
  up_timed online_cold "$stack" "$work/online" "${online_env[@]}"
  profile "$stack-2" 0
  up_timed online_warm "$stack-2" "$work/online" "${online_env[@]}"
  if [ -n "$last_report" ]; then
    second_bytes+=("$(jq -e '.artifacts.downloadedBytes' "$last_report")")
  fi
done

row() { # $1 label, $2 array name
  local -n values=$2
  local n=${#values[@]}
  if [ "$n" -eq 0 ]; then
    printf '%-58s %10s  (0 of %s runs)\n' "$1" "-" "$runs"
  else
    printf '%-58s %8.1f s  (%s of %s runs)\n' "$1" "$(printf '%s\n' "${values[@]}" | median | awk '{print $1/1000}')" "$n" "$runs"
  fi
  [ -n "${failures[$2]:-}" ] && printf '    failed: %s\n' "${failures[$2]}"
  return 0
}
echo "--- online path ($provider, cold up to a verified round trip, median)"
row "offline bundle (make kit)" offline
row "online, empty cache (through the local mirror)" online_cold
row "online, warm cache (a second stack on the same cache)" online_warm
if [ ${#second_bytes[@]} -gt 0 ]; then
  printf '%-58s %s\n' "bytes a second stack downloads" "$(printf '%s ' "${second_bytes[@]}")"
fi
if [ ${#offline[@]} -gt 0 ] && [ ${#online_warm[@]} -gt 0 ]; then
  off=$(printf '%s\n' "${offline[@]}" | median); warm=$(printf '%s\n' "${online_warm[@]}" | median)
  awk -v o="$off" -v w="$warm" 'BEGIN {printf "%-58s %+.1f %% (goal: within 5 %%)\n", "warm-cache online against offline", (w - o) * 100 / o}'
fi
