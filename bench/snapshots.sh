#!/usr/bin/env bash
# Snapshot figures (docs/snapshots.md), kit bundle, each timed from the shell.
# K3s (default): single runs of cold up, save, restore after down and beside
# the first stack, warm up, export, import; ci profile. `make bench` measures
# save and restore as medians too. Kind (BENCH_PROVIDER=kind): the dev
# profile's shape (one control plane, one worker; a free host port instead
# of 8080), cold up and save once, then BENCH_RUNS restores under a new
# stack name to a verified round trip (each removed after), as medians with
# `n of N runs`.
#
#   BENCH_BIN       the devstack binary to time (default: the release build, built now)
#   BENCH_PROVIDER  k3s (default) or kind
#   BENCH_RUNS      Kind restores (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bash scripts/setup-docker.sh >/dev/null || die "no Docker engine"
bench_binary
export DEVSTACK_BUNDLE=$HOME/.cache/devstack/kit/bundle DEVSTACK_HOME=$(mktemp -d) CI=1
[ -f "$DEVSTACK_BUNDLE/index.json" ] || die "no kit bundle at $DEVSTACK_BUNDLE (run make kit)"
h=$DEVSTACK_HOME
if [ "${BENCH_PROVIDER:-k3s}" = kind ]; then
  runs=${BENCH_RUNS:-3}
  work=$h
  profile=$h/dev.yaml
  sed -e "s/hostPort: 8080/hostPort: $(free_port)/" -e 's/    merge: true/    merge: false/' \
    profiles/dev.yaml >"$profile"
  ds() { "$bin" --profile "$profile" -q "$@"; }
  cleanup() {
    for s in kb0 $(seq -f 'kb%g' 1 "$runs"); do ds --name "$s" down >/dev/null 2>&1 || true; done
    # Without --profile, which `snapshot rm` refuses: a refused rm left the
    # snapshot's shared volumes (~3 GB) behind on every run.
    "$bin" -q snapshot rm base >/dev/null 2>&1 || true
    rm -rf "$h"
  }
  trap cleanup EXIT
  measure "kind cold up" ds --name kb0 up --json || die "cold up failed: $(tail -n 3 "$work/out.err")"
  row "Kind dev: cold up (not the cold figure: one run)" "kind cold up" s 1000
  measure "kind save" ds --name kb0 snapshot save base --json || die "save failed: $(tail -n 3 "$work/out.err")"
  echo "Kind dev: save $(figure_median "kind save") ms (paused $(span .pausedMs) ms, $(span .snapshot.bytes) bytes)"
  ds --name kb0 down
  for bench_run in $(seq 1 "$runs"); do
    if measure "kind restore" ds --name "kb$bench_run" up --from-snapshot base --json; then
      jq -e '.verify.passed == true' "$work/out.json" >/dev/null || die "restore $bench_run did not verify"
      cp "$work/out.json" "$h/restore-$bench_run.json"
      jq -r '.timings[] | select(.parent == null) | "    \(.name): \(.startMs)-\(.endMs)"' "$work/out.json"
    fi
    ds --name "kb$bench_run" down
  done
  row "Kind dev: up --from-snapshot to a verified round trip" "kind restore" s 1000
  echo "  spread: $(printf '%s' "${bench_values["kind restore"]:-}" | tr ' ' '\n' | sed '/^$/d' | sort -n | tr '\n' ' ')ms"
  exit 0
fi
cleanup() {
  for s in m1 m2; do "$bin" -p ci --name $s -q down >/dev/null 2>&1 || true; done
  # The snapshot and its shared volume (kept while a stack used it).
  "$bin" -q snapshot rm base >/dev/null 2>&1 || true
  rm -rf "$h"
}
trap cleanup EXIT
verified() { jq -e '.verify.passed == true' "$1" >/dev/null || die "$1: the round trip did not verify"; }
timed() { # CMD...: its time from the shell, in $last_ms
  local t0 t1
  t0=$(now_ms)
  "$@"
  t1=$(now_ms)
  last_ms=$((t1 - t0))
}
timed "$bin" -p ci --name m1 -q up
echo "cold up: $last_ms ms"
timed "$bin" -p ci --name m1 -q snapshot save base --json >"$h/save.json"
echo "save: $last_ms ms (paused $(span .pausedMs "$h/save.json") ms, $(span .snapshot.bytes "$h/save.json") bytes)"
"$bin" -p ci --name m1 -q down
timed "$bin" -p ci --name m1 -q up --from-snapshot base --json --timings "$h/same.html" >"$h/same.json"
verified "$h/same.json"
echo "restore (same name, after down): $last_ms ms, verified"
jq -r '.timings[] | select(.parent == null or (.name|test("snapshot|restored|API|nodes Ready|level"))) | "  \(.name): \(.startMs)-\(.endMs)"' "$h/same.json"
timed "$bin" -p ci --name m2 -q up --from-snapshot base --json >"$h/beside.json"
verified "$h/beside.json"
echo "restore (beside it): $last_ms ms, verified"
jq -r '.timings[] | select(.parent == null) | "  \(.name): \(.startMs)-\(.endMs)"' "$h/beside.json"
timed "$bin" -p ci --name m1 -q up
echo "warm up on restored: $last_ms ms"
timed "$bin" snapshot export base "$h/base.snap" -q
echo "export: $last_ms ms"
"$bin" -q snapshot rm base
timed "$bin" snapshot import "$h/base.snap" -q
echo "import: $last_ms ms"
