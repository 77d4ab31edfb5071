#!/usr/bin/env bash
# Offline kit orchestrator (`make kit`).
#
#   bash kit/build.sh                 # every component in components/*.sh
#   bash kit/build.sh k3s coredns     # just these (names without .sh)
#
# Each components/NAME.sh is standalone (sources lib.sh, builds itself
# idempotently, records its artifacts in the bundle index); this script runs
# them one after another in their own bash, base image first, and prints
# per-component timings. Order: the base image, then the components listed in
# KIT_ORDER (those that exist), then any other component alphabetically, so a
# new components/*.sh is picked up without editing this file.
set -euo pipefail
KIT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$KIT_DIR/lib.sh"

KIT_ORDER=(pause coredns k3s flux eso localstack)

if [ $# -gt 0 ]; then
  components=("$@")
else
  components=()
  for c in "${KIT_ORDER[@]}"; do
    [ -f "$KIT_DIR/components/$c.sh" ] && components+=("$c")
  done
  for f in "$KIT_DIR"/components/*.sh; do
    c=$(basename "$f" .sh)
    [[ " ${components[*]} " == *" $c "* ]] || components+=("$c")
  done
fi
for c in "${components[@]}"; do
  [ -f "$KIT_DIR/components/$c.sh" ] || die "no component $c (kit/components/$c.sh)"
done

docker info >/dev/null 2>&1 || die "no Docker engine answers (run: bash scripts/setup-docker.sh)"
command -v jq >/dev/null || die "jq is required"

timings=()
total_start=$(date +%s)
t0=$(date +%s)
kit_base_image
timings+=("$(printf '%-12s %5ss' base $(( $(date +%s) - t0 )))")

failed=()
for c in "${components[@]}"; do
  log "=== $c"
  t0=$(date +%s)
  if bash "$KIT_DIR/components/$c.sh"; then
    status=ok
  else
    status=FAILED; failed+=("$c")
  fi
  timings+=("$(printf '%-12s %5ss  %s' "$c" $(( $(date +%s) - t0 )) "$status")")
done

echo "--- kit build timings"
printf '%s\n' "${timings[@]}"
printf '%-12s %5ss\n' total $(( $(date +%s) - total_start ))
echo "--- bundle: $KIT_BUNDLE ($(du -sh "$KIT_BUNDLE" | cut -f1))"
jq -r '.artifacts[] | [.kind, (.role // "-"), (.name + (if .tag then ":" + .tag else "" end)), (.version // "-"), (.size|tostring)] | @tsv' \
  "$KIT_BUNDLE/index.json" 2>/dev/null | column -t || true
if [ ${#failed[@]} -gt 0 ]; then
  die "components failed: ${failed[*]}"
fi
