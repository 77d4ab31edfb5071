#!/usr/bin/env bash
# Single-run snapshot figures (docs/performance.md): cold up, save, restore after
# down and beside the first stack, warm up, export, import; release binary, ci
# profile, kit bundle. `make bench` measures save and restore as medians too.
set -euo pipefail
B=${CARGO_TARGET_DIR:-$PWD/target}/release/devstack
export DEVSTACK_BUNDLE=$HOME/.cache/devstack/kit/bundle DEVSTACK_HOME=$(mktemp -d) CI=1
ms() { date +%s%3N; }
t0=$(ms); $B -p ci --name m1 -q up; t1=$(ms); echo "cold up: $((t1-t0)) ms"
t0=$(ms); $B -p ci --name m1 -q snapshot save base --json > $DEVSTACK_HOME/save.json; t1=$(ms); echo "save: $((t1-t0)) ms (paused $(jq .pausedMs $DEVSTACK_HOME/save.json) ms, $(jq .snapshot.bytes $DEVSTACK_HOME/save.json) bytes)"
$B -p ci --name m1 -q down
sleep 5
t0=$(ms); $B -p ci --name m1 -q up --from-snapshot base --json --timings $DEVSTACK_HOME/same.html > $DEVSTACK_HOME/same.json; t1=$(ms); echo "restore (same name, after down): $((t1-t0)) ms verify=$(jq .verify.passed $DEVSTACK_HOME/same.json)"
jq -r '.timings[] | select(.parent == null or (.name|test("snapshot|restored|API|nodes Ready|level"))) | "  \(.name): \(.startMs)-\(.endMs)"' $DEVSTACK_HOME/same.json
t0=$(ms); $B -p ci --name m2 -q up --from-snapshot base --json > $DEVSTACK_HOME/beside.json; t1=$(ms); echo "restore (beside it): $((t1-t0)) ms verify=$(jq .verify.passed $DEVSTACK_HOME/beside.json)"
jq -r '.timings[] | select(.parent == null) | "  \(.name): \(.startMs)-\(.endMs)"' $DEVSTACK_HOME/beside.json
t0=$(ms); $B -p ci --name m1 -q up; t1=$(ms); echo "warm up on restored: $((t1-t0)) ms"
t0=$(ms); $B snapshot export base $DEVSTACK_HOME/base.snap -q -p ci; t1=$(ms); echo "export: $((t1-t0)) ms"
$B -p ci -q snapshot rm base
t0=$(ms); $B snapshot import $DEVSTACK_HOME/base.snap -q -p ci; t1=$(ms); echo "import: $((t1-t0)) ms"
$B -p ci --name m1 -q down; $B -p ci --name m2 -q down
# The snapshot and its shared volume (kept while a stack used it).
$B -p ci -q snapshot rm base
rm -rf $DEVSTACK_HOME
