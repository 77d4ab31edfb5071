#!/usr/bin/env bash
# Single-run snapshot figures (docs/snapshots.md): cold up, save, restore
# after down and beside the first stack, warm up, export, import; ci profile,
# kit bundle, each timed from the shell. `make bench` measures save and
# restore as medians too.
#
#   BENCH_BIN   the devstack binary to time (default: the release build, built now)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bash scripts/setup-docker.sh >/dev/null || die "no Docker engine"
bench_binary
export DEVSTACK_BUNDLE=$HOME/.cache/devstack/kit/bundle DEVSTACK_HOME=$(mktemp -d) CI=1
[ -f "$DEVSTACK_BUNDLE/index.json" ] || die "no kit bundle at $DEVSTACK_BUNDLE (run make kit)"
h=$DEVSTACK_HOME
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
