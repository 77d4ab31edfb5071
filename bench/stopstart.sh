#!/usr/bin/env bash
# `make bench`, the laptop rows: `devstack stop` and `devstack start` of a
# verified stack, on K3s (the shipped ci profile) and on Kind (the same
# profile with `--provider kind`: one node), from the offline kit. One cold
# `up` per provider (not a figure here), then stop/start cycles: `stop` timed
# until it returns (no container of the stack may still run: a run that
# leaves one counts as failed), `start` timed to a verified round trip. Also
# the memory the running stack holds, which a stop frees. Timed from the
# shell around the whole command; each row says how many of N runs produced
# it and its spread. Each `start`'s `--json` (its timeline) is kept.
#
#   BENCH_RUNS   stop/start cycles per provider (default 3)
#   BENCH_BIN    the devstack binary to time (default: a release build)
#   BENCH_PROVIDERS  which providers, in order (default "k3s kind")
#   BENCH_KEEP   where each start's `--json` is kept
#                (default ~/.cache/devstack/bench/<start time>-stopstart)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${BENCH_RUNS:-3}
providers=${BENCH_PROVIDERS:-k3s kind}
source bench/lib.sh
bash scripts/setup-docker.sh >/dev/null
bench_binary
require_bundle
keep=${BENCH_KEEP:-$HOME/.cache/devstack/bench/$(date -u +%Y%m%dT%H%M%SZ)-stopstart}
mkdir -p "$keep"
work=$(mktemp -d)
stack=bench-stop-$$
ds() { # $1 provider, rest: arguments
  local provider=$1
  shift
  DEVSTACK_HOME="$work/state" CI=1 "$bin" -p ci --name "$stack" --provider "$provider" \
    --bundle "$bundle" -q "$@"
}
cleanup() {
  for provider in $providers; do ds "$provider" down >/dev/null 2>&1; done
  docker rm -f -v $(docker ps -aq --filter "label=dev.devstack.stack=$stack") >/dev/null 2>&1 || true
  docker network rm $(docker network ls -q --filter "label=dev.devstack.stack=$stack") >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The stack's containers that still run (its labelled ones, its Kind nodes).
still_running() {
  {
    docker ps -q --filter "label=dev.devstack.stack=$stack"
    docker ps -q --filter "label=io.x-k8s.kind.cluster=devstack-$stack"
  } | wc -l
}

# spread FIGURE: the lowest and highest of its values, in seconds.
spread() {
  printf '%s' "${bench_values[$1]:-}" | tr ' ' '\n' | sed '/^$/d' | sort -n |
    awk 'NR == 1 {lo = $1} {hi = $1} END {if (NR) printf "    spread: %.1f-%.1f s\n", lo / 1000, hi / 1000}'
}

for provider in $providers; do
  bench_run=0
  if ! measure "${provider}_up" ds "$provider" up --json; then
    missed "the cold up failed" "${provider}_stop" "${provider}_start" "${provider}_mem"
    ds "$provider" down >/dev/null 2>&1
    continue
  fi
  kind_cluster=
  [ "$provider" = kind ] && kind_cluster=devstack-$stack
  record "${provider}_mem" "$(stack_mem_mib "$stack" "$kind_cluster")"
  for r in $(seq 1 "$runs"); do
    bench_run=$r
    measure "${provider}_stop" ds "$provider" stop --json || { missed "stop failed" "${provider}_start"; break; }
    left=$(still_running)
    if [ "$left" -ne 0 ]; then
      bench_failures[${provider}_stop]+="run $r: $left container(s) still running after stop; "
      missed "stop left containers running" "${provider}_start"
      break
    fi
    measure "${provider}_start" ds "$provider" start --json || break
    cp "$work/out.json" "$keep/$provider-start-$r.json"
  done
  ds "$provider" down >/dev/null 2>&1
done

echo "--- stop and start of a verified stack (ci profile, offline bundle), median"
for provider in $providers; do
  row "$provider: stop (every container stopped)" "${provider}_stop" s 1000
  spread "${provider}_stop"
  row "$provider: start, to a verified round trip" "${provider}_start" s 1000
  spread "${provider}_start"
  row "$provider: memory the running stack holds (freed by stop)" "${provider}_mem" MiB
done
echo "timelines: $keep"
